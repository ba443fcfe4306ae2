"""What one websocket may ask of the service, on both protocols: one init, readable messages, and
each operation held to the bounds of one HTTP request (its own write deadline, its own page budget).

In process, on both databases, with Starlette's test client as the other end;
what needs a real server (timeouts, logs, sockets that do not read) is in
tests/test_websocket_live.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from .conftest import UNHURRIED_WRITE_TIMEOUT, Api

PAGE = "query P($r: ID!) { runLog(runId: $r, limit: 20) { nodes { id } } }"
WRITE = 'mutation W($r: ID!, $t: String!) { writeRunLog(runId: $r, kind: "note", detail: {text: $t}) }'


@contextmanager
def initialised(api: Api, protocol: str) -> Iterator[WebSocketTestSession]:
    with api.client.websocket_connect("/graphql", subprotocols=[protocol]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        yield ws


def operate(ws: WebSocketTestSession, protocol: str, op_id: str, query: str, **variables: Any) -> Any:
    """Send one operation and return its one answer's payload, past keep-alives; its `complete` read."""
    kind = "subscribe" if protocol == "graphql-transport-ws" else "start"
    ws.send_json({"type": kind, "id": op_id, "payload": {"query": query, "variables": variables}})
    while (message := ws.receive_json())["type"] == "ka":
        pass
    assert message["type"] in ("next", "data"), message
    assert message["id"] == op_id
    assert ws.receive_json() == {"type": "complete", "id": op_id}
    return message["payload"]


def closing(ws: WebSocketTestSession) -> tuple[int, str]:
    """The code and reason the server closes `ws` with, past keep-alives; fails on any other message."""
    while True:
        try:
            message = ws.receive_json()
        except WebSocketDisconnect as closed:
            return closed.code, closed.reason
        assert message["type"] == "ka", message


PROTOCOLS = ["graphql-transport-ws", "graphql-ws"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_second_connection_init_closes_the_socket_with_4429(api: Api, protocol: str) -> None:
    # Over graphql-ws each init started one more keep-alive task, never stopped.
    with initialised(api, protocol) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert closing(ws) == (4429, "Too many initialisation requests")


def test_queries_and_mutations_are_served_over_the_older_protocol(make_api: Callable[..., Api]) -> None:
    # The Python `gql` client speaks graphql-ws and introspects on connect.
    api = make_api(write_timeout=UNHURRIED_WRITE_TIMEOUT)
    with initialised(api, "graphql-ws") as ws:
        schema = operate(ws, "graphql-ws", "1", "{ __schema { queryType { name } } }")
        assert schema == {"data": {"__schema": {"queryType": {"name": "Query"}}}}
        written = operate(ws, "graphql-ws", "2", WRITE, r=3, t="over graphql-ws")
        assert written == {"data": {"writeRunLog": True}}
        assert len(operate(ws, "graphql-ws", "3", PAGE, r=3)["data"]["runLog"]["nodes"]) == 1


def test_a_client_offering_both_protocols_gets_graphql_transport_ws(api: Api) -> None:
    offered = ["graphql-ws", "graphql-transport-ws"]  # the `gql` client's order
    with api.client.websocket_connect("/graphql", subprotocols=offered) as ws:
        assert ws.accepted_subprotocol == "graphql-transport-ws"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_write_over_a_socket_older_than_the_write_deadline_is_stored(
    make_api: Callable[..., Api], protocol: str
) -> None:
    # Each operation's deadline runs from its own arrival, as a request's over
    # HTTP: it once ran from the socket's opening, so every write over a
    # socket older than RUNLOG_WRITE_TIMEOUT was answered false. The keep-alive
    # of graphql-ws (every RUNLOG_WS_PING_INTERVAL) tells the socket's age.
    api = make_api(write_timeout=UNHURRIED_WRITE_TIMEOUT, ws_ping_interval=UNHURRIED_WRITE_TIMEOUT + 0.5)
    with ExitStack() as stack:
        clock = stack.enter_context(initialised(api, "graphql-ws"))
        ws = clock if protocol == "graphql-ws" else stack.enter_context(initialised(api, protocol))
        assert clock.receive_json() == {"type": "ka"}  # at once
        assert clock.receive_json() == {"type": "ka"}  # a whole interval later: past the deadline
        for n in range(2):
            payload = operate(ws, protocol, f"w{n}", WRITE, r=5, t=f"late {n}")
            assert payload == {"data": {"writeRunLog": True}}
    assert len(api.data(PAGE, {"r": 5})["runLog"]["nodes"]) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_operation_over_a_socket_has_its_own_page_budget(
    make_api: Callable[..., Api], protocol: str
) -> None:
    # 8 KiB of details per request: 7 of these 1 KiB notes fit one page. The
    # budget was the socket's, spent for good: the second page got 1 line.
    api = make_api(write_timeout=UNHURRIED_WRITE_TIMEOUT, max_page_bytes=8 * 1024)
    for n in range(12):
        assert api.write(4, "note", {"text": f"{n:02d}" + "x" * 1000})
    page = "query P($r: ID!) { runLog(runId: $r, limit: 12) { nodes { detail { __typename } } } }"
    over_http = len(api.data(page, {"r": 4})["runLog"]["nodes"])
    assert 1 < over_http < 12
    with initialised(api, protocol) as ws:
        counts = [len(operate(ws, protocol, f"p{n}", page, r=4)["data"]["runLog"]["nodes"]) for n in range(3)]
    assert counts == [over_http] * 3


UNREADABLE = [
    ({"type": "MESSAGE", "id": ["a list"], "payload": {"query": "{ __typename }"}}, "id must be a string"),
    ({"type": "MESSAGE", "id": "1", "payload": ["not", "an", "object"]}, "payload must be an object"),
    ({"type": "MESSAGE", "id": "1", "payload": {"query": 42}}, "query must be a string"),
    ({"type": "MESSAGE", "id": "1", "payload": {"query": "{ __typename }", "variables": [1]}}, "variables"),
    ({"type": "MESSAGE", "id": "1"}, "payload must be an object"),
    ({"type": "MESSAGE", "payload": {"query": "{ __typename }"}}, "needs an id"),
    ({"type": "STOP", "id": {"an": "object"}}, "id must be a string"),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("message", [{"id": "1"}, {"type": 5, "id": "1"}, {"type": None, "payload": {}}])
def test_a_message_without_a_type_closes_the_socket_with_4400_saying_so(
    api: Api, protocol: str, message: dict[str, Any]
) -> None:
    # Strawberry's graphql-ws handler read message["type"]: a KeyError raised
    # out of the app (uvicorn's ERROR with a stack), on any caller's say.
    start = "subscribe" if protocol == "graphql-transport-ws" else "start"
    with initialised(api, protocol) as ws:
        ws.send_json(message)
        # An operation behind it: answered (a failure here) if the socket stayed open.
        ws.send_json({"type": start, "id": "2", "payload": {"query": "{ __typename }"}})
        code, reason = closing(ws)
    assert (code, reason) == (4400, "Invalid message: a message needs a type (a string)")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("message", "words"), UNREADABLE)
def test_a_message_the_protocol_cannot_read_closes_the_socket_with_4400_saying_why(
    api: Api, protocol: str, message: dict[str, Any], words: str
) -> None:
    # Strawberry's handlers indexed into these: a stack in the log, or a
    # masked internal error, on any caller's say.
    start, stop = ("subscribe", "complete") if protocol == "graphql-transport-ws" else ("start", "stop")
    sent = {**message, "type": {"MESSAGE": start, "STOP": stop}[message["type"]]}
    with initialised(api, protocol) as ws:
        ws.send_json(sent)
        code, reason = closing(ws)
    assert code == 4400 and words in reason, (code, reason)
