"""The subscription `runLogTail` over websockets: protocols, the caller, the caps, the query limits.

In process, on both databases, with Starlette's test client as the
websocket's other end. What a tail delivers (catch-up, order, late commits)
is tested in tests/test_tail*.py; a live server (pings, shutdown, two
processes, reconnects) in tests/test_subscription_live.py.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from .conftest import UNHURRIED_WRITE_TIMEOUT, Api

READER = "reader-token-0123456789"
WRITER = "writer-token-0123456789"
TAIL = (
    "subscription T($runId: ID!, $kinds: [RunLogKind!], $since: String) {"
    " runLogTail(runId: $runId, kinds: $kinds, since: $since) {"
    " id runId kind cursor detail { __typename ... on NoteDetail { text } } } }"
)


def now(api: Api, run_id: Any, token: str | None = None) -> str | None:
    """A cursor of this moment for `run_id` (an empty first page's startCursor); None if refused.

    A tail without `since` starts from when it has started, which may come
    after a line the test writes right after subscribing: the tests start
    from a cursor read before, so no line they write can come too early.
    """
    body = api.post(
        "query N($r: ID!) { runLog(runId: $r, limit: 1) { pageInfo { startCursor } } }", {"r": run_id}, token
    )
    return None if "errors" in body else body["data"]["runLog"]["pageInfo"]["startCursor"]


class Socket:
    """One graphql-transport-ws connection over the test client."""

    def __init__(self, api: Api, payload: dict[str, Any] | None = None, **connect: Any) -> None:
        self.api = api
        # Header names are read in any case, as the service reads them (a "since" needs the token).
        given = next((v for k, v in (payload or {}).items() if k.lower() == "authorization"), None)
        given = given or connect.get("headers", {}).get("Authorization") or ""
        self.token = given.removeprefix("Bearer ") if isinstance(given, str) else ""
        self.ws = api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"], **connect)
        self.ws.__enter__()
        self.ws.send_json({"type": "connection_init", "payload": payload or {}})
        self.ack = self.ws.receive_json()

    def subscribe(self, op_id: str, run_id: Any, query: str = TAIL, **variables: Any) -> None:
        if "since" not in variables and isinstance(run_id, int):
            variables["since"] = now(self.api, run_id, self.token or None)
        self.ws.send_json(
            {
                "type": "subscribe",
                "id": op_id,
                "payload": {"query": query, "variables": {"runId": run_id, **variables}},
            }
        )

    def receive(self) -> dict[str, Any]:
        message: dict[str, Any] = self.ws.receive_json()
        return message

    def complete(self, op_id: str) -> None:
        self.ws.send_json({"type": "complete", "id": op_id})

    def close(self) -> None:
        self.ws.__exit__(None, None, None)


@pytest.fixture
def make_api(make_api: Callable[..., Api]) -> Callable[..., Api]:
    """conftest's, with writes given the most time the service allows: their deadline is not tested here."""

    def make(**overrides: Any) -> Api:
        return make_api(**{"write_timeout": UNHURRIED_WRITE_TIMEOUT, **overrides})

    return make


@pytest.fixture
def sockets() -> Any:
    opened: list[Socket] = []

    def open_socket(api: Api, payload: dict[str, Any] | None = None, **connect: Any) -> Socket:
        socket = Socket(api, payload, **connect)
        opened.append(socket)
        return socket

    yield open_socket
    for socket in opened:
        with contextlib.suppress(Exception):  # closed by the server already
            socket.close()


def note(api: Api, run_id: int, text: str, token: str | None = None) -> None:
    body = api.post(
        "mutation W($runId: ID!, $text: String!) {"
        ' writeRunLog(runId: $runId, kind: "note", detail: {text: $text}) }',
        {"runId": run_id, "text": text},
        token,
    )
    assert body == {"data": {"writeRunLog": True}}, body


def test_a_line_written_arrives_on_the_tail_typed_as_on_a_page(
    api: Api, sockets: Callable[..., Socket]
) -> None:
    socket = sockets(api)
    assert socket.ack == {"type": "connection_ack"}
    socket.subscribe("1", 41)
    note(api, 42, "another run's")
    note(api, 41, "phase 3 waits for its gate")
    message = socket.receive()
    assert message["type"] == "next" and message["id"] == "1"
    line = message["payload"]["data"]["runLogTail"]
    assert line["runId"] == "41" and line["kind"] == "NOTE"
    assert line["detail"] == {"__typename": "NoteDetail", "text": "phase 3 waits for its gate"}
    page = api.data("{ runLog(runId: 41) { nodes { id } } }")["runLog"]["nodes"]
    assert [line["id"]] == [node["id"] for node in page]
    assert line["cursor"]  # opaque; a reconnect passes it as `since` (test_subscription_live.py)
    socket.complete("1")


def test_the_older_graphql_ws_protocol_serves_the_tail_and_keeps_alive(make_api: Callable[..., Api]) -> None:
    api = make_api(ws_ping_interval=1.0)
    with api.client.websocket_connect("/graphql", subprotocols=["graphql-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        assert ws.receive_json() == {"type": "ka"}  # sent at once, then every RUNLOG_WS_PING_INTERVAL
        variables = {"runId": 5, "since": now(api, 5)}
        ws.send_json({"type": "start", "id": "t", "payload": {"query": TAIL, "variables": variables}})
        note(api, 5, "over graphql-ws")
        while (message := ws.receive_json())["type"] == "ka":
            pass
        assert message["type"] == "data" and message["id"] == "t"
        assert message["payload"]["data"]["runLogTail"]["detail"]["text"] == "over graphql-ws"
        ws.send_json({"type": "stop", "id": "t"})


def test_messages_are_text_frames(api: Api) -> None:
    # A browser hands a binary frame over as a Blob, which graphql-ws cannot parse.
    with api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init"})
        message = ws.receive()
        assert message == {"type": "websocket.send", "text": '{"type":"connection_ack"}'}


@pytest.mark.parametrize("sent", ["[]", '"connection_init"', "7", "{not json"])
def test_a_message_that_is_not_a_json_object_closes_the_socket_with_4400(api: Api, sent: str) -> None:
    with api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_text(sent)
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == 4400


# ── the caller ────────────────────────────────────────────────────────────────


def test_a_reader_token_in_the_connection_init_payload_is_a_reader(
    make_api: Callable[..., Api], sockets: Callable[..., Socket]
) -> None:
    api = make_api(reader_tokens=(READER,), writer_tokens=(WRITER,))
    socket = sockets(api, {"Authorization": f"Bearer {READER}"})
    socket.subscribe("1", 9)
    note(api, 9, "for the reader", token=WRITER)
    assert socket.receive()["payload"]["data"]["runLogTail"]["detail"]["text"] == "for the reader"
    # Spelled in lower case, as some clients send it.
    lower = sockets(api, {"authorization": f"Bearer {READER}"})
    lower.subscribe("1", 9)
    note(api, 9, "again", token=WRITER)
    assert lower.receive()["payload"]["data"]["runLogTail"]["detail"]["text"] == "again"


def test_a_reader_token_in_the_upgrade_requests_header_is_a_reader(
    make_api: Callable[..., Api], sockets: Callable[..., Socket]
) -> None:
    api = make_api(reader_tokens=(READER,), writer_tokens=(WRITER,))
    socket = sockets(api, headers={"Authorization": f"Bearer {READER}"})
    socket.subscribe("1", 9)
    note(api, 9, "by header", token=WRITER)
    assert socket.receive()["payload"]["data"]["runLogTail"]["detail"]["text"] == "by header"


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({}, "UNAUTHENTICATED"),
        ({"Authorization": "Bearer not-a-token-of-this-service"}, "UNAUTHENTICATED"),
        ({"Authorization": f"Bearer {WRITER}"}, "FORBIDDEN"),
    ],
)
def test_a_caller_who_is_not_a_reader_is_refused_as_over_http(
    make_api: Callable[..., Api], sockets: Callable[..., Socket], payload: dict[str, str], code: str
) -> None:
    api = make_api(reader_tokens=(READER,), writer_tokens=(WRITER,))
    token = payload.get("Authorization", "").removeprefix("Bearer ") or None
    over_http = api.post("{ runLog(runId: 9) { nodes { id } } }", token=token)["errors"][0]
    assert over_http["extensions"]["code"] == code
    socket = sockets(api, payload)
    assert socket.ack == {"type": "connection_ack"}  # as HTTP takes the request, and refuses the field
    socket.subscribe("1", 9)
    message = socket.receive()
    assert message["type"] == "error" and message["id"] == "1"
    (error,) = message["payload"]
    assert error["extensions"]["code"] == code
    assert error["message"].startswith("runLogTail is refused: the caller is not a reader")
    if code == "UNAUTHENTICATED":
        assert '{"Authorization": "Bearer <token>"}' in error["message"]  # where a websocket sends it


def test_a_payload_authorization_that_is_not_a_string_closes_the_socket_with_4403(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(reader_tokens=(READER,))
    with api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {"Authorization": ["Bearer", READER]}})
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == 4403


@pytest.mark.parametrize(
    ("variables", "words"),
    [
        ({"runId": "run-7"}, "runId must be a positive integer"),
        ({"runId": 7, "since": "yesterday"}, "since='yesterday' is not a cursor this service issued"),
    ],
)
def test_a_bad_run_id_or_since_is_refused_as_the_operations_error(
    api: Api, sockets: Callable[..., Socket], variables: dict[str, Any], words: str
) -> None:
    socket = sockets(api)
    socket.subscribe(
        "1", **{"run_id": variables["runId"], **{k: v for k, v in variables.items() if k != "runId"}}
    )
    message = socket.receive()
    assert message["type"] == "error"
    assert message["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert words in message["payload"][0]["message"]


# ── the caps ──────────────────────────────────────────────────────────────────


def test_subscriptions_past_the_connections_cap_are_refused_with_the_setting_named(
    make_api: Callable[..., Api], sockets: Callable[..., Socket]
) -> None:
    api = make_api(max_subscriptions_per_connection=2)
    socket = sockets(api)
    socket.subscribe("1", 1)
    socket.subscribe("2", 2)
    socket.subscribe("3", 3)
    message = socket.receive()
    assert message["type"] == "error" and message["id"] == "3"
    (error,) = message["payload"]
    assert error["extensions"]["code"] == "TOO_MANY_SUBSCRIPTIONS"
    assert "RUNLOG_MAX_SUBSCRIPTIONS_PER_CONNECTION" in error["message"]
    # Another connection has its own count; completing one frees its place.
    other = sockets(api)
    other.subscribe("1", 3)
    socket.complete("2")
    socket.subscribe("4", 3)
    note(api, 3, "both")
    assert other.receive()["id"] == "1"
    assert socket.receive()["id"] == "4"


def test_subscriptions_past_the_process_cap_are_refused_with_the_setting_named(
    make_api: Callable[..., Api], sockets: Callable[..., Socket]
) -> None:
    api = make_api(max_subscriptions=2)
    first, second = sockets(api), sockets(api)
    first.subscribe("1", 1)
    second.subscribe("1", 1)
    third = sockets(api)
    third.subscribe("1", 1)
    message = third.receive()
    assert message["type"] == "error"
    (error,) = message["payload"]
    assert error["extensions"]["code"] == "TOO_MANY_SUBSCRIPTIONS"
    assert "RUNLOG_MAX_SUBSCRIPTIONS)" in error["message"]
    # A connection that goes away gives its subscriptions' places back.
    first.close()
    third.subscribe("again", 1)
    note(api, 1, "third")
    message = third.receive()
    assert message["type"] == "next" and message["id"] == "again", message


# ── the query limits, as over HTTP ────────────────────────────────────────────


_DEEP = "{ detail { ... on RunBlockedDetail { blockingRun { id } } } }"


@pytest.mark.parametrize(
    ("settings", "selection", "words"),
    [
        ({"max_depth": 2}, _DEEP, "exceeds maximum operation depth of 2"),
        ({"max_aliases": 2}, "{ a: id b: id c: id }", "3 aliases found. Allowed: 2"),
        ({"max_tokens": 12}, "{ id runId kind phase at stepId }", "more than 12 tokens"),
        ({"max_query_bytes": 120}, "{ id } # " + "x" * 200, "RUNLOG_MAX_QUERY_BYTES"),
    ],
)
def test_a_subscription_is_held_to_the_query_limits_of_http(
    make_api: Callable[..., Api],
    sockets: Callable[..., Socket],
    settings: dict[str, int],
    selection: str,
    words: str,
) -> None:
    api = make_api(**settings)
    page = api.client.post("/graphql", json={"query": f"{{ runLog(runId: 1) {{ nodes {selection} }} }}"})
    assert words in page.text, page.text
    socket = sockets(api)
    socket.ws.send_json(
        {
            "type": "subscribe",
            "id": "1",
            "payload": {"query": f"subscription {{ runLogTail(runId: 1) {selection} }}"},
        }
    )
    try:
        message = socket.receive()
    except WebSocketDisconnect as closed:
        # A text that does not parse closes the socket (graphql-transport-ws),
        # with the parser's error as the reason.
        assert closed.code == 4400 and words in closed.reason, (closed.code, closed.reason)
        return
    assert message["type"] == "error" and message["id"] == "1", message
    assert words in message["payload"][0]["message"], message


def test_a_subscriptions_variables_are_held_to_the_values_limit(
    api: Api, sockets: Callable[..., Socket]
) -> None:
    socket = sockets(api)
    socket.subscribe("1", 1, kinds=["NOTE"] * 20_000)
    message = socket.receive()
    assert message["payload"]["errors"][0]["extensions"]["code"] == "TOO_MANY_VALUES", message
    assert message["payload"]["data"] is None
    assert socket.receive() == {"id": "1", "type": "complete"}


def test_a_catch_up_past_its_limit_ends_with_an_error_and_a_new_tail_goes_on(
    make_api: Callable[..., Api], tables: Any, sockets: Callable[..., Socket]
) -> None:
    # The lines are recent, so pages of them stop short (their cursors would
    # name too many) until they settle, a late window after their `at`. Every
    # line is written as another writer would, so the window can be the
    # shortest: write_timeout 0.05 s makes it about 3 s rather than 7.5 s.
    api = make_api(max_catch_up_lines=500, write_timeout=0.05)
    stamp = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    tables.execute(
        "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (12, 'note', :detail, :at)",
        detail='{"text": "start"}',
        at=stamp.isoformat(sep=" ", timespec="milliseconds") if tables.name == "sqlite" else stamp,
    )
    since = api.data("{ runLog(runId: 12, limit: 1) { nodes { cursor } } }")["runLog"]["nodes"][0]["cursor"]
    # 520 lines newer than `since`, stamped just after it: more than the limit behind.
    at = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)).replace(tzinfo=None)
    for n in range(0, 520, 130):
        tables.execute(
            "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES "
            + ", ".join(f"(12, 'note', '{{\"text\": \"{n + i}\"}}', :at)" for i in range(130)),
            at=at.isoformat(sep=" ", timespec="milliseconds") if tables.name == "sqlite" else at,
        )
    socket = sockets(api)
    socket.subscribe("1", 12, since=since)
    texts = []
    while (message := socket.receive())["type"] == "next" and message["payload"].get("data"):
        texts.append(message["payload"]["data"]["runLogTail"]["detail"]["text"])
        last = message["payload"]["data"]["runLogTail"]["cursor"]
    # Whole pages only; a page stops short where its cursors would name more
    # than store.RECENT_LINES recent lines (these are recent), so perhaps fewer.
    assert 0 < len(texts) <= 500
    (error,) = message["payload"]["errors"]
    assert error["extensions"]["code"] == "CATCH_UP_TOO_LONG"
    assert "RUNLOG_MAX_CATCH_UP_LINES" in error["message"]
    # Subscribing again from the last cursor received goes on with the rest, once each.
    again = sockets(api)
    again.subscribe("2", 12, since=last)
    rest = [
        again.receive()["payload"]["data"]["runLogTail"]["detail"]["text"] for _ in range(520 - len(texts))
    ]
    assert sorted(texts + rest, key=int) == [str(n) for n in range(520)]


def test_a_subscription_sent_over_http_is_refused_with_where_it_is_served(api: Api) -> None:
    for _ in range(2):  # the second time from the document cache
        body = api.post("subscription { runLogTail(runId: 1) { id } }")
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST", body
        assert "served over a websocket at this same /graphql" in error["message"]
