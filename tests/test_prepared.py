"""A prepared query text is answered exactly as Strawberry's full pipeline answers it.

Two apps run on the same database, one answering prepared texts itself
(`create_app(prepared=True)`, as served) and one sending every request through
Strawberry (`prepared=False`). Each request goes twice to the first (the first
time prepares its text, the second is answered from it) and once to the
second; status, content type and body must be the same, request ids aside.
The requests cover what a prepared text can meet: every argument, aliases and
fragments at the root, several operations in one document, refusals, bad
variables, the line budget, writes, admin queries, introspection, a database
that refuses connections and an unexpected failure that must be masked.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import nodes, queries
from starlette.testclient import TestClient

from gql import store
from gql.app import create_app
from gql.schema import export_sdl
from gql.settings import Settings

from .conftest import ADMIN, Backend, free_port

READER = "reader-token-0123456789"
WRITER = "writer-token-0123456789"

PAGE = (
    "query Page($runId: ID!, $kinds: [RunLogKind!], $limit: Int, $after: String) {"
    " runLog(runId: $runId, kinds: $kinds, limit: $limit, after: $after) {"
    " nodes { id kind kindName at phase stepId detail { __typename"
    " ... on RunStatusDetail { from to reason }"
    " ... on RunBlockedDetail { blockingRunId concurrencyKey blockingRun { id status terminal } }"
    " ... on NoteDetail { text actor }"
    " ... on UnreadableDetail { text problem } } }"
    " pageInfo { hasNextPage endCursor } } }"
)
ROOT_SHAPES = (
    "query Shapes($skip: Boolean!) { __typename"
    " newest: runLog(runId: 7, limit: 2) { nodes { id } }"
    " ...Older"
    " skipped: runLog(runId: 7) @skip(if: $skip) { nodes { id } } }"
    " fragment Older on Query { older: runLog(runId: 7, limit: 3) { pageInfo { hasNextPage } } }"
)
TWO_OPERATIONS = (
    "query Notes { runLog(runId: 7, kinds: [NOTE]) { nodes { id } } }"
    " query Statuses { runLog(runId: 7, kinds: [RUN_STATUS]) { nodes { id } } }"
)
WRITE = (
    "mutation W($runId: ID!, $kind: String!, $detail: JSON) {"
    " writeRunLog(runId: $runId, kind: $kind, detail: $detail) }"
)

# (what, body, token): a body is sent as JSON, as clients send it.
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("a page", {"query": PAGE, "variables": {"runId": "7", "limit": 3}}, READER),
    ("every line", {"query": PAGE, "variables": {"runId": "7"}}, READER),
    ("kinds", {"query": PAGE, "variables": {"runId": "7", "kinds": ["NOTE", "RUN_BLOCKED"]}}, READER),
    ("no kinds", {"query": PAGE, "variables": {"runId": "7", "kinds": []}}, READER),
    ("operation named", {"query": PAGE, "variables": {"runId": "7"}, "operationName": "Page"}, READER),
    (
        "variables null",
        {"query": "{ runLog(runId: 7, limit: 1) { nodes { id } } }", "variables": None},
        READER,
    ),
    ("root shapes", {"query": ROOT_SHAPES, "variables": {"skip": True}}, READER),
    ("root shapes, not skipped", {"query": ROOT_SHAPES, "variables": {"skip": False}}, READER),
    ("first of two", {"query": TWO_OPERATIONS, "operationName": "Notes"}, READER),
    ("second of two", {"query": TWO_OPERATIONS, "operationName": "Statuses"}, READER),
    ("two, none named", {"query": TWO_OPERATIONS}, READER),
    ("unknown operation", {"query": TWO_OPERATIONS, "operationName": "Nope"}, READER),
    ("no token", {"query": PAGE, "variables": {"runId": "7"}}, None),
    ("a writer reading", {"query": PAGE, "variables": {"runId": "7"}}, WRITER),
    ("a bad run id", {"query": PAGE, "variables": {"runId": "seven"}}, READER),
    ("a bad cursor", {"query": PAGE, "variables": {"runId": "7", "after": "nope"}}, READER),
    ("a limit of the wrong type", {"query": PAGE, "variables": {"runId": "7", "limit": "ten"}}, READER),
    (
        "a run id past 64 bits",
        {"query": PAGE, "variables": {"runId": 123456789012345678901234567890}},
        READER,
    ),
    ("a kind misspelt", {"query": PAGE, "variables": {"runId": "7", "kinds": ["NOTEE"]}}, READER),
    ("a missing variable", {"query": PAGE, "variables": {}}, READER),
    ("over the line budget", {"query": PAGE, "variables": {"runId": "7", "limit": 2000}}, READER),
    (
        "a write",
        {"query": WRITE, "variables": {"runId": "8", "kind": "note", "detail": {"text": "hi"}}},
        WRITER,
    ),
    ("a refused write", {"query": WRITE, "variables": {"runId": "8", "kind": "nope"}}, WRITER),
    ("a write without a token", {"query": WRITE, "variables": {"runId": "8", "kind": "note"}}, None),
    ("retention", {"query": "{ retention { enabled retention eligibleLines } }"}, ADMIN),
    ("retention, not an admin", {"query": "{ retention { enabled } }"}, READER),
    ("prune nothing", {"query": 'mutation { pruneTerminal(before: "2000-01-01T00:00:00Z") }'}, ADMIN),
    (
        "introspection",
        {"query": '{ __schema { queryType { name } } __type(name: "NoteDetail") { name } }'},
        None,
    ),
    ("extensions", {"query": PAGE, "variables": {"runId": "7"}, "extensions": {"x": 1}}, READER),
    # JSON's escape of half a surrogate pair: the parser refuses the text, which is never prepared.
    ("a lone surrogate", {"query": "{ __typename } # \ud800"}, READER),
    ("an unknown key", {"query": PAGE, "variables": {"runId": "7"}, "id": "abc"}, READER),
]


def _normalised(text: str) -> Any:
    """The body as JSON, with each request id (which differs by request) as REQUEST."""
    return json.loads(
        re.sub(r"(?<=request id )[0-9a-f]{16}|(?<=\"requestId\":\")[0-9a-f]{16}", "REQUEST", text)
    )


class Pair:
    """The same settings served twice: with prepared texts, and through Strawberry alone."""

    def __init__(self, settings: Settings) -> None:
        self.prepared = TestClient(create_app(settings, prepared=True))
        self.full = TestClient(create_app(settings, prepared=False))
        self.answered: list[bool] = []  # whether run_prepared answered, per prepared request
        view = self.prepared.app.routes[0].endpoint  # type: ignore[attr-defined]
        run_prepared = view.run_prepared

        async def counting(request: Any) -> Any:
            response = await run_prepared(request)
            self.answered.append(response is not None)
            return response

        view.run_prepared = counting

    def __enter__(self) -> Pair:
        self.prepared.__enter__()
        self.full.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.full.__exit__(*exc)
        self.prepared.__exit__(*exc)

    def compare(self, body: dict[str, Any], token: str | None, content_type: str = "application/json") -> Any:
        """Send `body` to both; assert the answers are the same; answer it (parsed)."""
        return self.compare_raw(json.dumps(body).encode(), token, content_type)

    def compare_raw(self, raw: bytes, token: str | None, content_type: str) -> Any:
        headers = {"content-type": content_type}
        if token:
            headers["authorization"] = f"Bearer {token}"
        answers = []
        for client in (self.prepared, self.prepared, self.full):
            response = client.post("/graphql", content=raw, headers=headers)
            request_id = re.fullmatch(r"[0-9a-f]{16}", response.headers.get("x-request-id", ""))
            answers.append(
                (
                    response.status_code,
                    response.headers["content-type"],
                    request_id is not None,
                    _normalised(response.text),  # errors too are JSON
                )
            )
        assert answers[0] == answers[1] == answers[2]
        assert answers[2][2]  # every answer has its request id
        return answers[2][3]


@pytest.fixture
def pair(tables: Backend) -> Iterator[Callable[..., Pair]]:
    made: list[Pair] = []

    def make(**overrides: Any) -> Pair:
        settings = tables.settings(
            reader_tokens=(READER,), writer_tokens=(WRITER,), max_lines_per_request=1000, **overrides
        )
        made.append(Pair(settings).__enter__())
        return made[-1]

    yield make
    for each in made:
        each.__exit__(None, None, None)


def _arrange(backend: Backend) -> None:
    backend.add_run(37, "live", None, "2026-05-01 10:00:00")
    lines = [
        ("run.status", '{"from": "scheduled", "to": "live", "reason": null}'),
        ("note", '{"text": "checked", "actor": "ops"}'),
        ("run.blocked", '{"blockingRunId": "37", "concurrencyKey": "venue-1"}'),
        ("run.blocked", '{"blockingRunId": "999", "concurrencyKey": "venue-1"}'),
        ("run.status", "not json {"),
        ("run.teleported", '{"to": "mars"}'),
        ("note", None),
    ]
    for i, (kind, detail) in enumerate(lines):
        backend.execute(
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
            "VALUES (7, :step, :kind, 1, :detail, :at)",
            step=i or None,
            kind=kind,
            detail=detail,
            at=f"2026-05-01 10:00:0{i}.250",
        )


@pytest.mark.parametrize(("what", "body", "token"), CASES, ids=[case[0] for case in CASES])
def test_a_prepared_text_is_answered_as_strawberry_answers_it(
    pair: Callable[..., Pair], tables: Backend, what: str, body: dict[str, Any], token: str | None
) -> None:
    _arrange(tables)
    both = pair()
    answer = both.compare(body, token)
    assert answer if isinstance(answer, str) else answer.get("data") is not None or answer.get("errors")


def test_the_prepared_path_answers_what_it_should_and_leaves_the_rest(
    pair: Callable[..., Pair], tables: Backend
) -> None:
    _arrange(tables)
    both = pair()
    for _what, body, token in CASES:
        both.answered.clear()
        both.compare(body, token)
        answered = both.answered[1]  # the second time: the text has been seen
        declined = body.get("extensions") is not None or body.get("operationName") == "Nope"
        declined = declined or (body.get("query") == TWO_OPERATIONS and "operationName" not in body)
        declined = declined or _what == "a lone surrogate"
        # Over the budget: a limit that is not an Int counts as the most a page can be.
        declined = declined or (body.get("variables") or {}).get("limit") in (2000, "ten")
        assert answered is not declined, (_what, both.answered)
    # JSON in any spelling is answered; another content type is left to Strawberry, which refuses it.
    both.answered.clear()
    page = {"query": PAGE, "variables": {"runId": "7", "limit": 1}}
    assert both.compare(page, READER, "application/json; charset=utf-8")["data"]["runLog"]["nodes"]
    assert both.answered[1]
    both.answered.clear()
    assert both.compare(page, READER, "application/json;charset=UTF-8")["data"]["runLog"]["nodes"]
    assert both.answered[1]
    both.answered.clear()
    assert both.compare(page, READER, "text/plain")["errors"]  # refused by Strawberry, with 415
    assert both.answered == [False, False]


def test_an_unavailable_database_is_the_same_answer(tmp_path: Any) -> None:
    url = f"mysql+aiomysql://root@127.0.0.1:{free_port()}/nothing"
    with Pair(Settings(database_url=url, reader_tokens=(READER,), connect_timeout=1)) as both:
        answer = both.compare({"query": PAGE, "variables": {"runId": "7"}}, READER)
    assert answer["errors"][0]["extensions"]["code"] == "DATABASE_UNAVAILABLE"
    assert both.answered == [False, True]


def test_an_unexpected_failure_is_masked_the_same_way(pair: Callable[..., Pair], tables: Backend) -> None:
    both = pair()
    tables.execute("DROP TABLE event_run_log")  # a fault of the server's database, not the caller's
    answer = both.compare({"query": PAGE, "variables": {"runId": "7"}}, READER)
    assert answer["errors"][0]["message"] == "Unexpected error (request id REQUEST)."
    assert "event_run_log" not in json.dumps(answer)
    assert both.answered == [False, True]


def test_with_introspection_off_a_schema_query_is_refused_both_ways(
    pair: Callable[..., Pair], tables: Backend
) -> None:
    both = pair(introspection=False)
    answer = both.compare({"query": "{ __schema { queryType { name } } }"}, None)
    assert "introspection has been disabled" in answer["errors"][0]["message"], answer
    assert both.answered == [False, False]  # refused by validation: never prepared
    assert both.compare({"query": "{ __typename }"}, None) == {"data": {"__typename": "Query"}}


def test_a_number_past_64_bits_is_stored_exactly(pair: Callable[..., Pair], tables: Backend) -> None:
    both = pair()
    answer = {"big": 2**70, "negative": -(2**63) - 1, "small": 2**62}
    body = {
        "query": WRITE,
        "variables": {"runId": "9", "kind": "step.status", "detail": {"to": "done", "answer": answer}},
    }
    assert both.compare(body, WRITER) == {"data": {"writeRunLog": True}}
    stored = [
        json.loads(row.detail)["answer"]
        for row in tables.rows("SELECT detail FROM event_run_log WHERE run_id = 9")
    ]
    assert stored == [answer] * 3
    assert both.answered == [False, True]  # read as Strawberry's path reads it: exactly


def test_an_extension_it_does_not_reproduce_turns_prepared_texts_off() -> None:
    """A tracer added to the schema later must see every request: Strawberry then answers them all."""
    from strawberry.extensions import SchemaExtension

    from gql.answers import MaskUnexpected
    from gql.auth import Policy
    from gql.engine.documents import DocumentCaches
    from gql.schema import build_schema
    from gql.view import RunLogGraphQL

    class Tracer(SchemaExtension):
        pass

    caches = DocumentCaches()
    known = build_schema([MaskUnexpected, caches.extension])
    policy = Policy.from_settings(Settings())
    assert RunLogGraphQL(known, caches=caches, max_lines=10, policy=policy).prepared
    traced = build_schema([MaskUnexpected, caches.extension, Tracer])
    assert not RunLogGraphQL(traced, caches=caches, max_lines=10, policy=policy).prepared


# ── generated requests ───────────────────────────────────────────────────────

# 100 examples unless RUNLOG_FUZZ_EXAMPLES says otherwise: at 25, a run id past
# 64 bits read as a float by the prepared path was found for one seed in three;
# at 100, for five seeds in five (with the guard against it taken out).
GENERATED = settings(
    max_examples=int(os.environ.get("RUNLOG_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Past 64 bits orjson reads an integer as a float: odd ones, which a float cannot hold exactly.
_huge = st.integers(2**64, 2**70).map(lambda n: n | 1)
_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        _huge,
        st.floats(),  # NaN and infinities too: json.dumps writes them, json reads them, orjson does not
        st.text(max_size=12),
        st.sampled_from(["7", "NOTE", "RUN_STATUS", "note", "run.status"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@GENERATED
@given(value=_values)
def test_a_body_is_read_as_json_loads_reads_it(value: Any) -> None:
    """The view reads bodies through orjson where it agrees with `json`: past 64 bits, NaN, all alike."""
    from gql.view import _loads

    body = json.dumps({"variables": value}).encode()
    assert json.dumps(_loads(body)) == json.dumps(json.loads(body))


@pytest.mark.parametrize(
    "body",
    [
        b'{"runId": 18446744073709551617}',
        b'{"runId": -18446744073709551617}',
        b'{"a": NaN, "b": -Infinity, "c": 1e400}',
        b'{"text": "\\ud800"}',  # a lone surrogate
        b"\xef\xbb\xbf{}",  # a byte order mark
        '{"a": 1}'.encode("utf-16"),
    ],
)
def test_what_orjson_reads_otherwise_or_refuses_is_read_as_json_loads_reads_it(body: bytes) -> None:
    from gql.view import _loads

    assert json.dumps(_loads(body)) == json.dumps(json.loads(body))


@pytest.mark.parametrize("body", [b"{", b'{"a": 1,}', b"\xff{}", b"[" * 100_000 + b"]" * 100_000])
def test_a_body_json_refuses_is_refused_as_json_refuses_it(body: bytes) -> None:
    from gql.view import _loads

    with pytest.raises((ValueError, RecursionError)) as ours:
        _loads(body)
    with pytest.raises((ValueError, RecursionError)) as theirs:
        json.loads(body)
    assert type(ours.value) is type(theirs.value)


CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/json;charset=UTF-8",
    "text/plain",
]
SCALARS = {
    "DateTime": st.just("2026-01-01T00:00:00Z").map(nodes.String),
    "JSON": st.just("x").map(nodes.String),
}


@st.composite
def prepared_bodies(draw: st.DrawFn) -> tuple[bytes, str]:
    """A body around a text the app has prepared: mostly one it answers, with odd values in it."""

    def mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
        # Hypothesis leans to the simplest choice (0): 3 is the rare case, about one in four.
        return draw(rare if draw(st.integers(0, 3)) == 3 else usual)

    query = draw(st.sampled_from([PAGE, ROOT_SHAPES, TWO_OPERATIONS]))
    body: dict[str, Any] = {"query": query}
    if query == PAGE:
        variables = {
            "runId": mostly(st.sampled_from(["7", 7, "8", "0"]), _huge),
            "kinds": mostly(st.one_of(st.none(), st.lists(st.sampled_from(["NOTE", "RUN_STATUS"]))), _values),
            "limit": mostly(st.one_of(st.none(), st.integers(-5, 1000)), _values),
            "after": mostly(st.none(), _values),
        }
        body["variables"] = mostly(st.just(variables), st.one_of(_values, st.just({})))
    elif query == ROOT_SHAPES:
        body["variables"] = mostly(st.fixed_dictionaries({"skip": st.booleans()}), _values)
    else:
        body["operationName"] = mostly(st.sampled_from(["Notes", "Statuses"]), _values)
    if draw(st.integers(0, 7)) == 7:
        body["extensions"] = draw(_values)
    content_type = mostly(st.just("application/json"), st.sampled_from(CONTENT_TYPES))
    return json.dumps(body).encode(), content_type


def test_generated_requests_get_the_same_answers(
    pair: Callable[..., Pair], tables: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries from hypothesis-graphql, and bodies around prepared texts, answered alike both ways."""
    # The two apps read a few milliseconds apart, and a cursor of a recent
    # line (or an empty first page's startCursor) holds the read's time: the
    # clock is held still for both.
    settled = store.settled_before(0)
    monkeypatch.setattr(store, "settled_before", lambda _window: settled)
    _arrange(tables)
    both = pair()
    for body in (
        {"query": PAGE, "variables": {"runId": "7"}},
        {"query": ROOT_SHAPES, "variables": {"skip": True}},
    ):
        both.compare(body, READER)  # prepared from here on
    both.compare({"query": TWO_OPERATIONS, "operationName": "Notes"}, READER)

    @GENERATED
    @given(request=prepared_bodies())
    def around_prepared_texts(request: tuple[bytes, str]) -> None:
        raw, content_type = request
        both.compare_raw(raw, READER, content_type)

    @GENERATED
    @given(text=queries(export_sdl(), custom_scalars=SCALARS))
    def generated_queries(text: str) -> None:
        both.compare({"query": text}, ADMIN)

    around_prepared_texts()
    generated_queries()
    assert any(both.answered), "no generated request was answered from a prepared text"
