"""Trusted documents: the shipped operations by hash, more from a manifest, and RUNLOG_TRUSTED_DOCUMENTS=on.

The hashes are the TypeScript client's own: GraphQL Code Generator's client
preset writes clients/ts/src/generated/persisted/persisted-documents.json,
and every document in it is sent here by its id, as a client would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from graphql import OperationDefinitionNode, parse, validate

from gql.api.schema import build_schema
from gql.api.trusted import SHIPPED
from gql.compat.strawberry import graphql_schema
from gql.settings import SettingsError

from .conftest import ADMIN, UNHURRIED_WRITE_TIMEOUT, Api

ROOT = Path(__file__).resolve().parent.parent
PERSISTED = ROOT / "clients" / "ts" / "src" / "generated" / "persisted" / "persisted-documents.json"
OTHER = "{ runLog(runId: 7) { nodes { id } } }"


def persisted() -> dict[str, tuple[str, str]]:
    """The TypeScript client's manifest: each hash, with its operation's type and name."""
    found = {}
    for key, text in json.loads(PERSISTED.read_text()).items():
        (operation,) = [d for d in parse(text).definitions if isinstance(d, OperationDefinitionNode)]
        assert operation.name is not None
        found[key] = (operation.operation.value, operation.name.value)
    return found


def send(api: Api, document_id: str, variables: dict[str, Any], token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return api.client.post(
        "/graphql", json={"documentId": document_id, "variables": variables}, headers=headers
    )


def start_cursor(api: Api) -> str:
    body = api.post("query S { runLog(runId: 7, limit: 1) { pageInfo { startCursor } } }", token=ADMIN)
    cursor: str = body["data"]["runLog"]["pageInfo"]["startCursor"]
    return cursor


@pytest.fixture
def on(make_api: Callable[..., Api]) -> Api:
    return make_api(trusted_documents=True, admin_tokens=(ADMIN,), write_timeout=UNHURRIED_WRITE_TIMEOUT)


def test_the_shipped_manifest_is_the_typescript_clients_and_holds_every_shipped_operation() -> None:
    assert json.loads(SHIPPED.read_text()) == json.loads(PERSISTED.read_text())
    shipped = {
        d.name.value
        for path in (ROOT / "gql" / "operations").glob("*.graphql")
        for d in parse(path.read_text()).definitions
        if isinstance(d, OperationDefinitionNode) and d.name is not None
    }
    assert {name for _, name in persisted().values()} == shipped


def test_every_persisted_document_of_the_typescript_client_runs_by_its_id(on: Api) -> None:
    before = start_cursor(on)
    variables = {
        "RunLog": {"runId": "7"},
        "RunLogByKinds": {"runId": "7", "kinds": ["NOTE"]},
        "RunLogPage": {"runId": "7"},
        "RunLogWait": {"runId": "7", "before": before, "wait": 0},
        "WriteNote": {"runId": "7", "text": "by its id"},
        "RunHolds": {"runId": "7"},
        "RunsInFlight": {},
        # The run page's (gql/edge/run_page.py).
        "RunLines": {"runId": "7", "kinds": ["NOTE"]},
        "RunKindCounts": {"runId": "7"},
        "RunHead": {"runId": "7", "phase": [2], "counts": False},
    }
    ran = set()
    for key, (kind, name) in persisted().items():
        if kind == "subscription":
            continue  # served on the websocket
        for document_id in (key, key.removeprefix("sha256:")):  # the bare hex too
            answered = send(on, document_id, variables[name])
            assert answered.status_code == 200, (name, answered.text)
            assert "errors" not in answered.json(), (name, answered.text)
        ran.add(name)
    assert ran == set(variables)
    notes = on.data("{ runLog(runId: 7) { nodes { detail { ... on NoteDetail { text } } } } }", token=ADMIN)
    assert [line["detail"]["text"] for line in notes["runLog"]["nodes"]] == ["by its id", "by its id"]


def test_a_document_id_is_read_in_any_case_over_post_and_get(on: Api) -> None:
    # The hex was read in either case, but "SHA256:" was an unknown id.
    key = next(k for k, (_, name) in persisted().items() if name == "RunLogPage")
    hex_digest = key.removeprefix("sha256:")
    variables = json.dumps({"runId": "7"})
    for document_id in (
        f"SHA256:{hex_digest}",
        f"Sha256:{hex_digest.upper()}",
        f"sha256:{hex_digest.upper()}",
    ):
        answered = send(on, document_id, {"runId": "7"})
        assert answered.status_code == 200 and answered.json()["data"]["runLog"]["nodes"] == [], (
            document_id,
            answered.text,
        )
        params = {"documentId": document_id, "variables": variables}
        answered = on.client.get("/graphql", params=params, headers={"Accept": "*/*"})
        assert answered.status_code == 200 and answered.json()["data"]["runLog"]["nodes"] == [], (
            document_id,
            answered.text,
        )


def test_a_query_by_its_id_may_come_by_get(on: Api) -> None:
    key = next(k for k, (_, name) in persisted().items() if name == "RunLogPage")
    answered = on.client.get(
        "/graphql",
        params={"documentId": key, "variables": json.dumps({"runId": "7"})},
        headers={"Accept": "*/*"},
    )
    assert answered.status_code == 200 and answered.json()["data"]["runLog"]["nodes"] == []


def test_with_it_on_a_caller_may_run_only_known_documents_and_an_admin_anything(on: Api) -> None:
    refused = on.client.post("/graphql", json={"query": OTHER})
    assert refused.status_code == 403, refused.text
    error = refused.json()["errors"][0]
    assert error["extensions"]["code"] == "FORBIDDEN"
    assert "RUNLOG_TRUSTED_DOCUMENTS=on" in error["message"] and "documentId" in error["message"]
    assert on.client.get("/graphql", params={"query": OTHER}).status_code == 403
    assert on.data(OTHER, token=ADMIN) == {"runLog": {"nodes": []}}
    # A known document's exact text is that document.
    key = next(k for k, (_, name) in persisted().items() if name == "RunLogPage")
    text = json.loads(PERSISTED.read_text())[key]
    assert on.data(text, {"runId": "7"})["runLog"]["nodes"] == []


def test_an_unknown_id_is_refused_naming_where_documents_come_from(make_api: Callable[..., Api]) -> None:
    for api in (make_api(), make_api(trusted_documents=True)):
        refused = send(api, "sha256:" + "0" * 64, {})
        assert refused.status_code == 400, refused.text
        message = refused.json()["errors"][0]["message"]
        assert "Unknown documentId" in message and "RUNLOG_TRUSTED_DOCUMENTS_FILE" in message
        both = api.client.post(
            "/graphql", json={"documentId": "sha256:" + "0" * 64, "query": "{ __typename }"}
        )
        assert both.status_code == 400 and "not both" in both.text


def test_off_by_default_any_text_runs_and_ids_work_too(api: Api) -> None:
    assert api.data(OTHER) == {"runLog": {"nodes": []}}
    key = next(k for k, (_, name) in persisted().items() if name == "RunLogPage")
    assert send(api, key, {"runId": "7"}).json()["data"]["runLog"]["nodes"] == []


def test_an_operators_manifest_adds_documents(make_api: Callable[..., Api], tmp_path: Path) -> None:
    text = "query Mine($runId: ID!) { runLog(runId: $runId) { nodes { id kind } } }"
    digest = hashlib.sha256(text.encode()).hexdigest()
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({f"sha256:{digest}": text}))
    api = make_api(trusted_documents=True, trusted_documents_file=str(manifest))
    answered = send(api, f"sha256:{digest}", {"runId": "7"})
    assert answered.json() == {"data": {"runLog": {"nodes": []}}}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"sha256:' + "0" * 64 + '": "{ __typename }"}', "is not the SHA-256 of its text"),
        ('{"md5:abc": "{ __typename }"}', "must map"),
        ("[1]", "must be a JSON object"),
        ("{", "cannot be read as a JSON manifest"),
    ],
)
def test_a_manifest_that_does_not_hold_stops_start_up_naming_what(
    make_api: Callable[..., Api], tmp_path: Path, content: str, says: str
) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(content)
    with pytest.raises(SettingsError, match=says) as raised:
        make_api(trusted_documents=True, trusted_documents_file=str(manifest))
    assert "RUNLOG_TRUSTED_DOCUMENTS_FILE" in str(raised.value)


def test_a_manifest_document_this_schema_refuses_stops_start_up(
    make_api: Callable[..., Api], tmp_path: Path
) -> None:
    text = "{ noSuchField }"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({f"sha256:{hashlib.sha256(text.encode()).hexdigest()}": text}))
    with pytest.raises(SettingsError, match="noSuchField"):
        make_api(trusted_documents=True, trusted_documents_file=str(manifest))


def test_on_the_websocket_too_only_known_documents_run_for_all_but_admins(on: Api) -> None:
    texts = json.loads(PERSISTED.read_text())
    tail = next(t for k, t in texts.items() if persisted()[k][1] == "RunLogTail")
    write_note = next(k for k in texts if persisted()[k][1] == "WriteNote")
    other = "subscription O($since: String) { runLogTail(runId: 7, since: $since) { id } }"
    for token, query, allowed in ((None, other, False), (ADMIN, other, True), (None, tail, True)):
        # From a cursor read first: the note written after subscribing comes whenever it started.
        since = start_cursor(on)
        payload = {"Authorization": f"Bearer {token}"} if token else {}
        with on.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
            ws.send_json({"type": "connection_init", "payload": payload})
            assert ws.receive_json()["type"] == "connection_ack"
            variables = {"runId": "7", "since": since}
            ws.send_json(
                {"type": "subscribe", "id": "1", "payload": {"query": query, "variables": variables}}
            )
            if allowed:
                # Accepted: a line written now arrives.
                assert send(on, write_note, {"runId": "7", "text": "tailed"}).json()["data"]["writeRunLog"]
                assert ws.receive_json()["type"] == "next"
            else:
                message = ws.receive_json()
                assert message["type"] == "error", message
                assert message["payload"][0]["extensions"]["code"] == "FORBIDDEN"
                assert "RUNLOG_TRUSTED_DOCUMENTS=on" in message["payload"][0]["message"]


def test_every_shipped_document_is_valid_against_the_schema() -> None:
    """The shipped documents are not checked at start-up (only an operator's are): here instead."""
    schema = graphql_schema(build_schema(extensions=[]))
    for digest, text in json.loads(SHIPPED.read_text()).items():
        assert validate(schema, parse(text)) == [], digest


def api_text(document_id: str) -> str:
    text: str = json.loads(PERSISTED.read_text())[document_id]
    return text
