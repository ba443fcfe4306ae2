"""Query limits: body size, tokens, depth, aliases and lines per request, each refused before any SQL."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from graphql import get_introspection_query

from gql.domain.details import DETAIL_TYPES
from gql.edge.body_limit import BodyLimit
from gql.settings import Settings

from .conftest import ADMIN, Api, Backend, sent_statements


@contextmanager
def statements(api: Api) -> Iterator[list[str]]:
    """Every SQL statement the app under test sends while the block runs, on either pool."""
    state = api.client.app_state
    with sent_statements(state["engine"]) as read:
        if state["write_engine"] is state["engine"]:
            yield read
            return
        with sent_statements(state["write_engine"]) as written:
            seen: list[str] = []
            yield seen
            seen += read + written


def aliased(count: int, limit: str = "limit: 2000", field: str = "runLog") -> str:
    parts = [f"r{i}: {field}(runId: 1, {limit}) {{ nodes {{ id }} }}" for i in range(count)]
    return "{ " + " ".join(parts) + " }"


def message(body: dict[str, Any]) -> str:
    (error,) = body["errors"]
    assert body.get("data") is None
    text: str = error["message"]
    return text


def test_the_statement_counter_sees_a_read(api: Api) -> None:
    with statements(api) as seen:
        api.data(aliased(1))
    assert any("event_run_log" in s for s in seen)


def test_300_pages_of_2000_lines_are_refused_before_any_sql_with_the_limit_named(api: Api) -> None:
    with statements(api) as seen:
        body = api.post(aliased(300))
    # With the defaults the token limit is hit first, while the document is parsed.
    assert "Document contains more than 2000 tokens" in message(body)
    assert seen == []


def test_the_line_budget_refuses_what_the_other_limits_let_through(make_api: Callable[..., Api]) -> None:
    api = make_api(max_tokens=100_000, max_aliases=1000)
    with statements(api) as seen:
        body = api.post(aliased(300))
    assert seen == []
    (error,) = body["errors"]
    assert error["message"] == (
        "This request could read 600000 lines (300 runLog fields); the limit is 10000 lines "
        "per request (RUNLOG_MAX_LINES_PER_REQUEST). Ask for fewer or smaller pages."
    )
    assert error["extensions"] == {"code": "TOO_MANY_LINES", "lines": 600000, "maxLines": 10000}


def test_five_full_pages_fit_the_default_budget_and_six_do_not(api: Api) -> None:
    assert len(api.data(aliased(5))) == 5
    with statements(api) as seen:
        assert "could read 12000 lines" in message(api.post(aliased(6)))
    assert seen == []


@pytest.mark.parametrize(
    ("query", "variables", "lines"),
    [
        # null, 0 and a missing limit are 500, as the resolver reads them.
        (
            "{ a: runLog(runId: 1) { nodes { id } } b: runLog(runId: 1, limit: null) { nodes { id } } }",
            {},
            1000,
        ),
        (
            "{ a: runLog(runId: 1, limit: 0) { nodes { id } }"
            " b: runLog(runId: 2, limit: 1) { nodes { id } } }",
            {},
            501,
        ),
        # Clamped like the resolver: over 2000 is 2000, under 1 is 1.
        (
            "{ a: runLog(runId: 1, limit: 99999) { nodes { id } }"
            " b: runLog(runId: 1, limit: -5) { nodes { id } } }",
            {},
            2001,
        ),
        # Variables count as sent, their defaults when not sent.
        ("query($n: Int) { a: runLog(runId: 1, limit: $n) { nodes { id } } }", {"n": 1500}, 1500),
        ("query($n: Int) { a: runLog(runId: 1, limit: $n) { nodes { id } } }", {"n": None}, 500),
        ("query($n: Int = 1200) { a: runLog(runId: 1, limit: $n) { nodes { id } } }", {}, 1200),
        ("query($n: Int = 1200) { a: runLog(runId: 1, limit: $n) { nodes { id } } }", {"n": 7}, 7),
        # Through fragments, each once: graphql-core collects a fragment spread twice once.
        (
            "query { ...F ... on Query { b: runLog(runId: 1, limit: 300) { nodes { id } } } ...F }"
            " fragment F on Query { a: runLog(runId: 1, limit: 100) { nodes { id } } }",
            {},
            400,
        ),
    ],
)
def test_the_lines_a_request_could_read_are_counted_like_the_resolver_reads_them(
    make_api: Callable[..., Api], query: str, variables: dict[str, Any], lines: int
) -> None:
    # A budget one line short of the request's cost refuses it; an exact one lets it run.
    short = make_api(max_lines_per_request=lines - 1) if lines > 1 else None
    if short is not None:
        with statements(short) as seen:
            assert f"could read {lines} lines" in message(short.post(query, variables))
        assert seen == []
    exact = make_api(max_lines_per_request=lines)
    assert "errors" not in exact.post(query, variables)


def test_only_the_operation_that_runs_is_counted(make_api: Callable[..., Api]) -> None:
    api = make_api(max_lines_per_request=1000)
    document = f"query Big {aliased(5)} query Small {{ runLog(runId: 1, limit: 10) {{ nodes {{ id }} }} }}"
    response = api.client.post("/graphql", json={"query": document, "operationName": "Small"})
    assert "errors" not in response.json()
    response = api.client.post("/graphql", json={"query": document, "operationName": "Big"})
    assert "could read 10000 lines" in message(response.json())


def test_a_page_of_blocked_lines_with_their_blocking_runs_fits(api: Api) -> None:
    # blockingRun is not counted: one batched lookup per request, never more
    # rows than the lines already counted.
    for i in range(3):
        assert api.write(9, "run.blocked", {"blockingRunId": i + 1, "concurrencyKey": "k"})
    query = (
        "{ a: runLog(runId: 9, limit: 2000) { nodes { detail { ... on RunBlockedDetail"
        " { blockingRun { id } } } } } }"
    )
    assert len(api.data(query)["a"]["nodes"]) == 3


def test_depth_over_the_limit_is_refused_before_any_sql(make_api: Callable[..., Api]) -> None:
    api = make_api(max_depth=3)
    deep = "{ runLog(runId: 1) { nodes { detail { ... on RunBlockedDetail { blockingRun { id } } } } } }"
    with statements(api) as seen:
        assert message(api.post(deep)) == "'anonymous' exceeds maximum operation depth of 3"
    assert seen == []
    assert "errors" not in api.post("{ runLog(runId: 1) { nodes { detail { __typename } } } }")


def test_aliases_over_the_limit_are_refused_before_any_sql(make_api: Callable[..., Api]) -> None:
    api = make_api(max_aliases=3)
    with statements(api) as seen:
        assert message(api.post(aliased(4, "limit: 1"))) == "4 aliases found. Allowed: 3"
    assert seen == []
    assert len(api.data(aliased(3, "limit: 1"))) == 3


def test_aliased_writes_count_against_the_alias_limit(make_api: Callable[..., Api], tables: Backend) -> None:
    api = make_api(max_aliases=2)
    writes = " ".join(f'w{i}: writeRunLog(runId: 1, kind: "note")' for i in range(3))
    assert message(api.post(f"mutation {{ {writes} }}")) == "3 aliases found. Allowed: 2"
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0


def test_tokens_over_the_limit_are_refused_while_parsing(make_api: Callable[..., Api]) -> None:
    api = make_api(max_tokens=50)
    with statements(api) as seen:
        body = api.post("{ " + "__typename " * 60 + "}")
    assert "Document contains more than 50 tokens. Parsing aborted." in message(body)
    assert seen == []


def test_a_spread_of_an_undefined_fragment_is_a_validation_error_not_a_crash(api: Api) -> None:
    # Strawberry's depth limiter raises KeyError on it (as graphene's did).
    assert message(api.post("{ ...Missing }")) == "Unknown fragment 'Missing'."


def test_a_crash_while_validating_is_masked_all_the_same(
    tables: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Strawberry's own depth limiter, unguarded, raises a KeyError: to see that
    # the last stop before the client masks what escaped MaskUnexpected.
    from starlette.testclient import TestClient

    import gql.api.query_shape
    from gql.edge.app import create_app

    monkeypatch.setattr(gql.api.query_shape, "_unless_too_big", lambda rule, most: rule)
    gql.api.query_shape.shape_rules.cache_clear()  # made again, unguarded, and not kept for the next test
    try:
        with TestClient(create_app(tables.settings())) as client:
            response = client.post("/graphql", json={"query": "{ ...Missing }"})
    finally:
        gql.api.query_shape.shape_rules.cache_clear()
    (error,) = response.json()["errors"]
    request_id = response.headers["X-Request-Id"]
    assert error["message"] == f"Unexpected error (request id {request_id})."
    assert error["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    assert request_id in caplog.text and "KeyError" in caplog.text


def every_detail_fragment() -> str:
    """The query the frontend sends: every field of every detail type, in one document."""

    def selection(tp: Any) -> str:
        from strawberry.types.base import get_object_definition

        definition = get_object_definition(tp, strict=True)
        names = []
        for f in definition.fields:
            name = f.graphql_name or _camel(f.python_name)
            inner = getattr(f.type, "of_type", f.type)
            inner = getattr(inner, "of_type", inner)
            if name == "blockingRun":  # a Run (named lazily); its holds would recurse
                names.append("blockingRun { id status terminal headline }")
            else:
                names.append(f"{name} {{ {selection(inner)} }}" if get_object_definition(inner) else name)
        return " ".join(names)

    fragments = " ".join(f"... on {tp.__name__} {{ {selection(tp)} }}" for tp in DETAIL_TYPES.values())
    return (
        "query Page($runId: ID!, $after: String) { runLog(runId: $runId, limit: 50, after: $after) {"
        f" nodes {{ id runId stepId kind kindName phase at detail {{ __typename {fragments}"
        " ... on UnreadableDetail { text problem } } }"
        " pageInfo { hasNextPage endCursor } } }"
    )


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part.title() for part in rest)


def test_the_defaults_let_through_graphiql_and_the_frontends_biggest_query(api: Api) -> None:
    assert api.data(get_introspection_query(descriptions=True, input_value_deprecation=True))
    assert api.data(every_detail_fragment(), {"runId": "1"}) == {
        "runLog": {"nodes": [], "pageInfo": {"hasNextPage": False, "endCursor": None}}
    }


def test_a_batch_is_refused_whole_before_any_sql(api: Api) -> None:
    # Batching is off (Strawberry's default): a list of 300 requests cannot
    # slip 300 pages past the per-request budget.
    batch = [{"query": aliased(1)} for _ in range(300)]
    with statements(api) as seen:
        response = api.client.post("/graphql", json=batch)
    assert response.status_code == 400
    assert response.json()["errors"][0]["message"] == "Batching is not enabled"
    assert seen == []


def test_a_body_over_its_declared_limit_is_refused_with_413_before_it_is_read(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(max_body_bytes=1000)
    query = "{ runLog(runId: 1) { nodes { id } } }"
    padded = {"query": query + " " * 1000}
    with statements(api) as seen:
        response = api.client.post("/graphql", json=padded)
    assert response.status_code == 413
    (error,) = response.json()["errors"]
    assert error["extensions"] == {
        "code": "BODY_TOO_LARGE",
        "maxBytes": 1000,
        "requestId": response.headers["X-Request-Id"],
    }
    assert "over the limit of 1000 bytes (RUNLOG_MAX_BODY_BYTES)" in error["message"]
    assert seen == []
    fits = {"query": query + " " * (1000 - len(query) - 20)}
    assert api.client.post("/graphql", json=fits).status_code == 200


def test_the_default_body_limit_is_4_mib(api: Api) -> None:
    just_over = b'{"query": "{ __typename }", "pad": "' + b"x" * (4 * 1024 * 1024) + b'"}'
    response = api.client.post("/graphql", content=just_over, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    under = b'{"query": "{ __typename }", "pad": "' + b"x" * (4 * 1024 * 1024 - 100) + b'"}'
    response = api.client.post("/graphql", content=under, headers={"Content-Type": "application/json"})
    assert response.json() == {"data": {"__typename": "Query"}}


def test_a_streamed_body_is_counted_and_refused_once_past_the_limit() -> None:
    """At the ASGI level: chunks with no Content-Length, the way a chunked upload arrives."""
    received: list[int] = []
    called: list[bool] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(True)

    def chunks(n: int) -> Any:
        async def receive() -> dict[str, Any]:
            received.append(1)
            return {"type": "http.request", "body": b"x" * 400, "more_body": len(received) < n}

        return receive

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": [(b"transfer-encoding", b"chunked")]}
    asyncio.run(BodyLimit(app, max_bytes=1000)(scope, chunks(100), send))
    assert sent[0]["status"] == 413 and not called
    assert len(received) == 3, "reading stops at the first chunk past the limit"

    received.clear()
    sent.clear()

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message["body"]
            if not message["more_body"]:
                break
        called.append(len(body) == 800 and scope["state"]["body"] == body)

    asyncio.run(BodyLimit(echo, max_bytes=1000)(scope, chunks(2), send))
    assert called == [True], "a body within the limit reaches the app whole, and in the scope's state"
    assert "body" not in scope["state"], "the body is not left in the scope once the request is answered"


@contextmanager
def _serving(tmp_path: Path, **settings: Any) -> Iterator[int]:
    """The app on a real socket (uvicorn in a thread), with `settings`; its port."""
    import uvicorn

    from gql.edge.app import create_app
    from gql.edge.server import uvicorn_options

    made = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}", **settings)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    options = {**uvicorn_options(made), "log_level": "warning", "log_config": None}
    server = uvicorn.Server(uvicorn.Config(create_app(made), port=port, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 90  # generous: CI may be loaded
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    """The app on a real socket, with a 64 KiB body limit."""
    with _serving(tmp_path, max_body_bytes=65536) as port:
        yield port


def _exchange(port: int, head: bytes, chunks: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head)
        for chunk in chunks:
            conn.sendall(chunk)
        answer = b""
        while data := conn.recv(65536):
            answer += data
            if b"\r\n\r\n" in answer and answer.endswith(b"}"):
                break
        return answer


def test_a_chunked_upload_over_the_limit_is_refused_by_the_real_server(served: int) -> None:
    head = (
        b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 16384
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    # Five 16 KiB chunks pass 64 KiB; the terminating chunk is never sent.
    answer = _exchange(served, head, [chunk] * 5)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"BODY_TOO_LARGE" in answer


def test_a_declared_length_over_the_limit_is_refused_by_the_real_server_unread(served: int) -> None:
    head = (
        b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 10000000\r\n\r\n"
    )
    answer = _exchange(served, head, [])  # not one byte of the body is sent
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def test_every_limit_is_read_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "RUNLOG_MAX_DEPTH": "4",
            "RUNLOG_MAX_ALIASES": "5",
            "RUNLOG_MAX_TOKENS": "600",
            "RUNLOG_MAX_LINES_PER_REQUEST": "4000",
            "RUNLOG_MAX_BODY_BYTES": "100000",
        }
    )
    assert (settings.max_depth, settings.max_aliases, settings.max_tokens) == (4, 5, 600)
    assert (settings.max_lines_per_request, settings.max_body_bytes) == (4000, 100000)
    defaults = Settings.from_env({})
    assert (defaults.max_depth, defaults.max_aliases, defaults.max_tokens) == (10, 30, 2000)
    assert (defaults.max_lines_per_request, defaults.max_body_bytes) == (10_000, 4 * 1024 * 1024)


def test_an_admin_is_held_to_the_same_limits(make_api: Callable[..., Api]) -> None:
    api = make_api(max_lines_per_request=100)
    assert "could read 500 lines" in message(api.post(aliased(1, "limit: 0"), token=ADMIN))


def test_large_bodies_are_not_held_once_answered(tmp_path: Path) -> None:
    """A body the server has answered is freed at once, not kept as long as its connection's protocol."""
    import tracemalloc

    body = b'{"query": "{ __typename }' + b" " * (3 * 1024 * 1024) + b'"}'  # refused for its size

    def post(port: int) -> str:
        # A connection each, closed once the answer's head is in, as a client that stops reading may.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(
                b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            return conn.recv(200).decode()

    with _serving(tmp_path) as port:
        tracemalloc.start()
        try:
            post(port)
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(8):
                answer = post(port)
                assert answer.startswith("HTTP/1.1 200"), answer
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    # The last body or two may still be on their way out when the client has its answer's head;
    # a body kept with its connection keeps all eight.
    assert grown < 4 * len(body), f"{grown:,} bytes still held after 8 bodies of {len(body):,}"
