"""What one request may cost before it is parsed or coerced, and what the caches may hold."""

from __future__ import annotations

import gc
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType, MethodType, ModuleType
from typing import Any

import graphql.execution.values
import pytest
from graphql.language.parser import Parser
from starlette.testclient import TestClient

from gql.api.execution.documents import DOCUMENT_CACHE_BYTES
from gql.api.execution.page_plan import PLAN_CACHE_BYTES
from gql.api.limits import MAX_VARIABLE_VALUES
from gql.edge.app import create_app
from gql.edge.graphiql import with_fragments
from gql.kinds import Kind
from gql.settings import Settings, SettingsError

from .conftest import Api, Backend, sqlite_alone

OPERATIONS = Path(__file__).resolve().parent.parent / "gql" / "operations"
JSON = {"Content-Type": "application/json"}
BODY_LIMIT = 4 * 1024 * 1024
KINDS_QUERY = (
    "query K($runId: ID!, $kinds: [RunLogKind!]) { runLog(runId: $runId, kinds: $kinds) { nodes { id } } }"
)
WRITE = 'mutation W($d: JSON) { writeRunLog(runId: 1, kind: "note", detail: $d) }'


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many documents graphql-core parsed."""
    seen: list[int] = []
    parse_document = Parser.parse_document

    def counting(self: Parser) -> Any:
        seen.append(1)
        return parse_document(self)

    monkeypatch.setattr(Parser, "parse_document", counting)
    yield seen


@pytest.fixture
def coercions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many variable values graphql-core coerced (each list item counts)."""
    seen: list[int] = []
    coerce = graphql.execution.values.coerce_input_value

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        return coerce(*args, **kwargs)

    monkeypatch.setattr(graphql.execution.values, "coerce_input_value", counting)
    yield seen


def post(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    assert len(raw) <= BODY_LIMIT, "the hostile body must pass the body limit to test what follows it"
    response = api.client.post("/graphql", content=raw, headers=JSON)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def hostile_texts() -> dict[str, str]:
    """4 MiB of comment, of string and of field name: one token each, so no token limit sees them."""
    size = BODY_LIMIT - 200
    return {
        "comment": "#" + "x" * size + "\n{ __typename }",
        "string": '{ __type(name: "' + "x" * size + '") { name } }',
        "field name": "{ " + "x" * size + " }",
    }


@sqlite_alone
@pytest.mark.parametrize("what", list(hostile_texts()))
def test_a_huge_query_text_is_refused_before_it_is_parsed(api: Api, parses: list[int], what: str) -> None:
    query = hostile_texts()[what]
    for _ in range(2):  # and the second time, too
        (error,) = post(api, {"query": query})["errors"]
        assert error["extensions"]["code"] == "QUERY_TOO_LARGE"
        assert error["extensions"]["maxBytes"] == 128 * 1024
        assert (
            f"The query text is {len(query)} bytes; the limit is 131072 bytes (RUNLOG_MAX_QUERY_BYTES)"
            in (error["message"])
        )
    assert parses == [], "refused before graphql-core parsed it"


@sqlite_alone
def test_the_query_limit_counts_utf8_bytes_and_is_a_setting(make_api: Callable[..., Api]) -> None:
    api = make_api(max_query_bytes=1000)
    fits = "{ __typename } #" + "é" * 492  # 1000 bytes in 508 characters
    assert post(api, {"query": fits}) == {"data": {"__typename": "Query"}}
    (error,) = post(api, {"query": fits + "x"})["errors"]
    assert error["extensions"] == {"code": "QUERY_TOO_LARGE", "bytes": 1001, "maxBytes": 1000}
    assert Settings.from_env({"RUNLOG_MAX_QUERY_BYTES": "4096"}).max_query_bytes == 4096
    with pytest.raises(SettingsError, match="RUNLOG_MAX_QUERY_BYTES"):
        Settings.from_env({"RUNLOG_MAX_QUERY_BYTES": str(64 * 1024 * 1024)})


def test_the_shipped_operations_and_a_64_kib_detail_fit(api: Api) -> None:
    for path in sorted(OPERATIONS.glob("*.graphql")):
        if path.name == "fragments.graphql":
            continue
        text = path.read_text()
        query = with_fragments(text)
        variables = {"runId": "1", "kinds": [k.name for k in Kind], "text": "é" * 30_000}
        # The long poll's cursor: where run 1's newest page begins now, and no wait.
        newest = post(
            api,
            {
                "query": "query($kinds: [RunLogKind!]) { runLog(runId: 1, limit: 1, kinds: $kinds)"
                " { pageInfo { startCursor } } }",
                "variables": {"kinds": variables["kinds"]} if "$kinds" in text else {},
            },
        )
        variables |= {"before": newest["data"]["runLog"]["pageInfo"]["startCursor"], "wait": 0}
        body = post(api, {"query": query, "variables": variables})
        if re.search(r"^subscription\b", text, re.MULTILINE):
            # Served over a websocket, where tests/test_subscription.py holds it to these limits.
            assert body["errors"][0]["extensions"]["code"] == "BAD_REQUEST", (path.name, body)
            continue
        assert "errors" not in body, (path.name, body)
    detail = {"text": "x" * (64 * 1024 - 20)}
    assert post(api, {"query": WRITE, "variables": {"d": detail}}) == {"data": {"writeRunLog": True}}
    # Written inline rather than as a variable, the same detail still fits the query limit.
    inline = 'mutation { writeRunLog(runId: 1, kind: "note", detail: {text: "' + detail["text"] + '"}) }'
    assert post(api, {"query": inline}) == {"data": {"writeRunLog": True}}


@sqlite_alone
def test_a_huge_list_variable_is_refused_before_it_is_coerced(tables: Backend, coercions: list[int]) -> None:
    with TestClient(create_app(tables.settings())) as client:
        api = Api(client)
        everything = {"runId": "1", "kinds": [k.name for k in Kind]}
        assert post(api, {"query": KINDS_QUERY, "variables": everything}) == {
            "data": {"runLog": {"nodes": []}}
        }
        assert post(api, {"query": KINDS_QUERY, "variables": everything}) == {
            "data": {"runLog": {"nodes": []}}
        }
        coercions.clear()
        for kinds in (["NOTE"] * 500_000, [[["NOTE"]]] * 300_000):
            (error,) = post(api, {"query": KINDS_QUERY, "variables": {"runId": "1", "kinds": kinds}})[
                "errors"
            ]
            assert error["extensions"] == {"code": "TOO_MANY_VALUES", "maxValues": MAX_VARIABLE_VALUES}
            assert f"the limit is {MAX_VARIABLE_VALUES} values per request" in error["message"]
        assert coercions == [], "refused before graphql-core coerced a value"


def test_a_detail_is_one_value_however_big(api: Api) -> None:
    # A write never answers with an error: its detail is bounded by its size
    # (RUNLOG_MAX_DETAIL_BYTES), and answers false past it.
    # A detail's values are not graphql-core's to check: never TOO_MANY_VALUES.
    for detail in ({"text": "hi", "n": list(range(20_000))}, [0] * 1_000_000):
        body = post(api, {"query": WRITE, "variables": {"d": detail}})
        assert body["data"] == {"writeRunLog": False} and "errors" not in body, str(body)[:300]


# ── what the caches hold ─────────────────────────────────────────────────────


def held_bytes(*roots: Any) -> int:
    """The memory of everything reachable from `roots`, classes, modules and functions aside."""
    seen: set[int] = set()
    pending = list(roots)
    total = 0
    while pending:
        found = pending.pop()
        if id(found) in seen or isinstance(found, type | ModuleType | FunctionType | MethodType):
            continue
        seen.add(id(found))
        total += sys.getsizeof(found)
        pending.extend(gc.get_referents(found))
    return total


@sqlite_alone
def test_distinct_texts_padded_with_tokens_do_not_grow_the_document_caches_past_their_bound(api: Api) -> None:
    caches = api.document_cache()
    # Each text is 1,900 tokens in under 4 KiB: about 1 MB once parsed. The
    # token limit lets it through; validation refuses it (no argument x),
    # after it is parsed and cached.
    for n in range(80):
        text = "{ __typename(x: [" + "1 " * 1900 + f"]) }} # {n}"
        assert post(api, {"query": text})["errors"]
    held = held_bytes(caches)
    assert held <= DOCUMENT_CACHE_BYTES * 1.1, f"{held / 2**20:.0f} MiB held"
    assert held >= DOCUMENT_CACHE_BYTES / 2, "the cache still keeps what fits"
    # The text seen last is still held.
    assert text in caches.texts


@sqlite_alone
def test_distinct_runlog_selections_padded_with_comments_do_not_grow_the_plans_past_their_bound(
    api: Api,
) -> None:
    cache = api.client.app.routes[0].endpoint.schema.execution_context_class.plans  # type: ignore[attr-defined]
    # A comment is no token the limit counts, but each plan's nodes keep their
    # whole text alive: 120 KiB a text, twice (the text and the comment's token).
    for n in range(200):
        text = f"{{ runLog(runId: 1, limit: {n + 1}) {{ nodes {{ id }} }} }}\n#" + "x" * 120_000
        assert post(api, {"query": text}) == {"data": {"runLog": {"nodes": []}}}
    held = held_bytes([selection.nodes for selection in cache.entries.values()])
    assert held <= PLAN_CACHE_BYTES * 1.1, f"{held / 2**20:.0f} MiB held"
    assert cache.held_bytes <= PLAN_CACHE_BYTES
