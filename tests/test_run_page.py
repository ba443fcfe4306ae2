"""The run page at /runs and /runs/{runId}: served by the service alone, on the shipped operations.

tests/test_run_page_browser.py opens it in a real browser.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from gql.domain import demo, demo_runs
from gql.edge import run_page
from gql.edge.graphiql import OPERATIONS_DIR

from .conftest import Api, Backend
from .test_graphiql import BROWSER, ROOT, page_files


def config(api: Api, path: str) -> dict[str, Any]:
    """What the page's shell tells its script, as a browser receives it."""
    response = api.client.get(path, headers=BROWSER)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    found = re.search(
        r'<script type="application/json" id="runpage-config">(.*?)</script>', response.text, re.S
    )
    assert found, "the page carries no config"
    loaded: dict[str, Any] = json.loads(found.group(1))
    return loaded


@pytest.fixture
def demo_api(make_api: Callable[..., Api], tables: Backend) -> Callable[..., Api]:
    asyncio.run(demo.load_into(tables.settings(), allow_non_embedded=True))
    return make_api


@pytest.mark.parametrize("path", ["/runs", "/runs/38"])
def test_the_page_loads_every_file_from_the_service_itself(api: Api, path: str) -> None:
    response = api.client.get(path, headers=BROWSER)
    files = [url for url in page_files(response.text) if url != "data:,"]  # the empty icon
    assert len(files) == 7  # preact, its hooks, htm, graphql-ws, the page's two scripts and style
    manifest = json.loads((run_page.VENDOR_DIR / "assets.json").read_text())
    for url in files:
        # Relative to the page, so under whatever prefix a proxy gives the API.
        assert not re.match(r"^[a-z]+:|^//|^/", url), url
        served = api.client.get(f"/runs/{url.split('runs/', 1)[1]}", headers={"Accept-Encoding": "identity"})
        assert served.status_code == 200, url
        name = url.rsplit("/", 1)[1]
        if name in manifest["files"]:
            assert hashlib.sha256(served.content).hexdigest() == manifest["files"][name]
        assert served.headers["cache-control"] == "public, max-age=31536000, immutable"
        integrity = re.search(rf'"{re.escape(url)}" integrity="sha384-([^"]+)"', response.text)
        assert integrity and base64.b64decode(integrity.group(1)) == hashlib.sha384(served.content).digest()
    assert set(manifest["files"]) >= {"preact.min.umd.js", "hooks.umd.js", "htm.umd.js", "graphql-ws.min.js"}


def test_the_page_allows_no_other_origin_and_runs_no_inline_script(api: Api) -> None:
    response = api.client.get("/runs/38", headers=BROWSER)
    policy = dict(d.strip().split(" ", 1) for d in response.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'"
    assert policy["connect-src"] == "'self'"  # the API over HTTP and the tail's websocket
    assert not re.search(r"(?:src|href)=\"(?:[a-z]+:)?//", response.text)
    assert "<script>" not in response.text


def test_only_the_current_files_are_served(api: Api) -> None:
    url = page_files(api.client.get("/runs", headers=BROWSER).text)[1]  # [0] is the empty icon
    digest, name = url.split("/")[-2:]
    assert api.client.get(f"/runs/assets/{'0' * 16}/{name}").status_code == 404
    assert api.client.get(f"/runs/assets/{digest}/assets.json").status_code == 404
    assert api.client.get(f"/runs/assets/{digest}/LICENSE.preact").status_code == 404


def test_a_run_id_cannot_close_the_script_element_it_sits_in(api: Api) -> None:
    response = api.client.get("/runs/%3C!--%3Cscript%3Ealert(1)", headers=BROWSER)
    found = re.search(r'id="runpage-config">(.*?)</script>', response.text, re.S)
    assert found and "<" not in found.group(1)
    assert json.loads(found.group(1))["runId"] == "<!--<script>alert(1)"


def test_the_page_is_told_whether_the_server_runs_with_trusted_documents(
    make_api: Callable[..., Api],
) -> None:
    assert config(make_api(), "/runs/38")["trustedDocuments"] is False
    assert config(make_api(trusted_documents=True), "/runs/38")["trustedDocuments"] is True


def test_the_page_sends_only_shipped_operations(api: Api) -> None:
    operations = config(api, "/runs/38")["operations"]
    assert set(operations) == set(run_page.OPERATIONS)
    shipped = json.loads((OPERATIONS_DIR / "persisted-documents.json").read_text())
    for name, operation in operations.items():
        assert shipped[operation["documentId"]] == operation["query"], name
        assert (OPERATIONS_DIR / f"{name}.graphql").exists()


def test_on_a_trusted_server_the_page_reads_a_run_by_document_id(demo_api: Callable[..., Api]) -> None:
    # What the page's script sends, on the demo's blocked run.
    api = demo_api(trusted_documents=True)
    operations = config(api, "/runs/38")["operations"]
    run = str(demo_runs.BLOCKED)

    def send(name: str, variables: dict[str, Any]) -> Any:
        body = {"documentId": operations[name]["documentId"], "variables": variables}
        answer = api.client.post("/graphql", json=body).json()
        assert "errors" not in answer, answer
        return answer["data"]

    lines = send("RunLines", {"runId": run, "kinds": ["RUN_BLOCKED"], "limit": 200})["runLog"]["nodes"]
    assert lines and {line["kind"] for line in lines} == {"RUN_BLOCKED"}
    assert lines[0]["detail"]["blockingRunId"] == str(demo_runs.INVASION)
    answer = send("RunHead", {"runId": run})["runLog"]
    head = answer["run"]
    assert head["status"] == "scheduled" and [hold["reason"] for hold in head["holds"]] == ["BLOCKED_BY_RUN"]
    assert head["holds"][0]["blockingRun"]["id"] == str(demo_runs.INVASION)
    assert {count["kindName"]: count["count"] for count in answer["kindCounts"]}["run.blocked"] >= 1
    # With a text search the counts are the matches of each kind.
    searched = send("RunHead", {"runId": run, "search": "Yew"})["runLog"]["kindCounts"]
    assert {count["kindName"]: count["count"] for count in searched}.get("run.blocked", 0) >= 1
    assert send("RunsInFlight", {"limit": 50})["runsInFlight"]["nodes"][0]["headline"]
    # The text it would send instead is refused there: only trusted documents run.
    refused = api.client.post("/graphql", json={"query": "{ runLog(runId: 38) { nodes { id } } }"})
    assert refused.status_code == 403 and "RUNLOG_TRUSTED_DOCUMENTS" in refused.text


def test_on_a_trusted_server_the_tail_runs_as_the_page_sends_it(demo_api: Callable[..., Api]) -> None:
    # A websocket takes no documentId: the page sends the trusted document's exact text.
    api = demo_api(trusted_documents=True)
    operations = config(api, "/runs/38")["operations"]
    run = str(demo_runs.BLOCKED)
    # From the newest line's cursor, as the page does (not "from now on", which
    # starts when the subscription has: the note written next may commit first).
    first = {"documentId": operations["RunLines"]["documentId"], "variables": {"runId": run, "limit": 1}}
    since = api.client.post("/graphql", json=first).json()["data"]["runLog"]["pageInfo"]["startCursor"]
    with api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        payload = {"query": operations["RunTail"]["query"], "variables": {"runId": run, "since": since}}
        ws.send_json({"type": "subscribe", "id": "1", "payload": payload})
        note = "the operator looked"
        shipped = json.loads((OPERATIONS_DIR / "persisted-documents.json").read_text())
        write_note = next(key for key, text in shipped.items() if "mutation WriteNote" in text)
        body = {"documentId": write_note, "variables": {"runId": run, "text": note}}
        assert api.client.post("/graphql", json=body).json() == {"data": {"writeRunLog": True}}
        message = ws.receive_json()
    assert message["type"] == "next", message
    assert message["payload"]["data"]["runLogTail"]["detail"]["text"] == note


def test_the_readme_shows_the_page_and_the_client_docs_point_at_it() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "](docs/run-page.png)" in readme and (ROOT / "docs" / "run-page.png").stat().st_size > 10_000
    assert "http://127.0.0.1:8000/runs/38" in readme
    assert "gql/static/runpage.js" in (ROOT / "docs" / "clients.md").read_text()
