"""Websockets and long polls against real servers (`python -m gql serve`), as hostile or careless
clients use them: what the process holds for them is bounded, and routine events log no ERROR.

On both databases. Each test waits for an event (a message, a close, a log
line, a metric), never a fixed time.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from . import local
from .conftest import Backend, sqlite_alone
from .serving import Server, start, stop, wait_until_healthy
from .test_subscription_live import PATIENCE, next_line, open_tail

RUN = 11
PAGE = (
    "query P($before: String, $wait: Int) {"
    " runLog(runId: 11, before: $before, wait: $wait) { nodes { id } } }"
)


@contextlib.contextmanager
def served(tmp_path: Path, backend: Backend, **env: str) -> Iterator[Server]:
    server = start(tmp_path, backend.url, **env)
    try:
        wait_until_healthy(server)
        yield server
    finally:
        stop(server)


def ws_url(server: Server) -> str:
    return server.base.replace("http://", "ws://") + "/graphql"


def port(server: Server) -> int:
    return int(server.base.rsplit(":", 1)[1])


def logged_cleanly(server: Server) -> str:
    """The server's log, once it has stopped; it must hold no ERROR and no traceback."""
    stop(server)
    log = server.output()
    assert " ERROR " not in log and "Traceback" not in log and "never retrieved" not in log, log
    return log


def wait_for(what: str, check: Any, within: float = PATIENCE) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {within}s"
        time.sleep(0.05)


def metric(server: Server, name: str) -> float:
    for line in local.get(f"{server.base}/metrics", timeout=PATIENCE).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def add_lines(backend: Backend, count: int, size: int) -> None:
    """A note "first", then `count` notes of `size` bytes, in run RUN, stamped months ago."""
    table = "event_run_log"
    first = datetime.datetime(2026, 5, 1, 10, 0, 0)
    backend.execute(
        f"INSERT INTO {table} (run_id, kind, detail, at) VALUES (:r, 'note', :d, :at)",
        r=RUN,
        d=json.dumps({"text": "first"}),
        at=first,
    )
    rows = [
        {
            "r": RUN,
            "d": json.dumps({"text": f"{n:05d}" + "x" * size}),
            "at": first + datetime.timedelta(seconds=n + 1),
        }
        for n in range(count)
    ]
    with backend.sync.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {table} (run_id, kind, detail, at) VALUES (:r, 'note', :d, :at)"), rows
        )


def cursor_of_first(server: Server) -> str:
    """The cursor of the note "first" (the run's oldest line: pages are newest first)."""
    page = local.post(
        f"{server.base}/graphql",
        json={"query": "{ runLog(runId: 11, limit: 2000) { nodes { cursor } } }"},
        timeout=PATIENCE,
    ).json()
    cursor: str = page["data"]["runLog"]["nodes"][-1]["cursor"]
    return cursor


# ── item 9: routine events log no ERROR ─────────────────────────────────────


def test_tail_clients_closing_normally_mid_send_log_no_error(tables: Backend, tmp_path: Path) -> None:
    add_lines(tables, 300, 100)
    with served(tmp_path, tables) as server:
        since = cursor_of_first(server)
        for _ in range(10):
            # The catch-up sends 300 lines at once; the client leaves (1000)
            # after one, reading on until the server's close frame, which
            # comes behind the lines sent before it. (A client that stopped
            # reading waited 10 s each time, for a frame it could not read.)
            with open_tail(server.base, RUN, since, max_queue=None) as ws:
                next_line(ws)
    logged_cleanly(server)


def test_routine_websocket_events_are_answered_without_an_error_in_the_log(
    tables: Backend, tmp_path: Path
) -> None:
    with served(tmp_path, tables, RUNLOG_HEADER_TIMEOUT="1") as server:
        url = ws_url(server)
        # A page of another origin: 403, with a warning naming the setting.
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin="http://elsewhere.example", subprotocols=["graphql-transport-ws"])  # type: ignore[arg-type,list-item]
        assert refused.value.response.status_code == 403
        # The Python gql client's way: graphql-ws offered first, then an introspection.
        offered = ["graphql-ws", "graphql-transport-ws"]
        with connect(url, subprotocols=offered, open_timeout=PATIENCE) as ws:  # type: ignore[arg-type]
            assert ws.subprotocol == "graphql-transport-ws"
        with connect(url, subprotocols=["graphql-ws"], open_timeout=PATIENCE) as ws:  # type: ignore[list-item]
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            assert json.loads(ws.recv(timeout=PATIENCE)) == {"type": "connection_ack"}
            query = "query IntrospectionQuery { __schema { queryType { name } } }"
            ws.send(json.dumps({"type": "start", "id": "1", "payload": {"query": query}}))
            answers = [json.loads(ws.recv(timeout=PATIENCE)) for _ in range(3)]
            answers = [a for a in answers if a["type"] != "ka"]
            assert answers[0] == {
                "type": "data",
                "id": "1",
                "payload": {"data": {"__schema": {"queryType": {"name": "Query"}}}},
            }
            # A second init (each once started a keep-alive task for good) closes
            # it. One is enough: the server may close before a third is sent.
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    ws.recv(timeout=PATIENCE)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4429
        # A graphql-ws socket that never initialises is closed, as graphql-transport-ws's is.
        with connect(url, subprotocols=["graphql-ws"], open_timeout=PATIENCE) as ws:  # type: ignore[list-item]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=PATIENCE)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4408
    log = logged_cleanly(server)
    assert "RUNLOG_CORS_ORIGINS" in log and "allowed_origins" not in log


def closed_after(url: str, protocol: str, sent: str | bytes, initialise: bool = True) -> tuple[int, str]:
    """The code and reason the server closes a socket with once `sent` (after an init, with `initialise`).

    A query follows `sent`: a socket left open answers it, which fails here
    at once (nothing is waited for but the close or that answer).
    """
    start = "subscribe" if protocol == "graphql-transport-ws" else "start"
    with connect(url, subprotocols=[protocol], open_timeout=PATIENCE) as ws:  # type: ignore[list-item]
        if initialise:
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            assert json.loads(ws.recv(timeout=PATIENCE)) == {"type": "connection_ack"}
        with pytest.raises(ConnectionClosed) as closed:
            ws.send(sent)
            ws.send(json.dumps({"type": start, "id": "after", "payload": {"query": "{ __typename }"}}))
            while (answer := json.loads(ws.recv(timeout=PATIENCE)))["type"] == "ka":
                pass
            raise AssertionError(f"{protocol}: the socket was not closed, it answered {answer}")
    assert closed.value.rcvd is not None, f"{protocol}: no close frame"
    return closed.value.rcvd.code, closed.value.rcvd.reason


@sqlite_alone
@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
def test_both_protocols_close_a_connection_alike(tables: Backend, tmp_path: Path, protocol: str) -> None:
    # graphql-ws answered a non-string Authorization with connection_error and
    # 1011, skipped a text that is not JSON (the socket stayed open), failed
    # on `[]` with a stack in the log, and closed on a binary frame with 1002.
    token = "reader-token-0123456789"
    with served(tmp_path, tables, RUNLOG_READER_TOKENS=token) as server:
        url = ws_url(server)
        init = {"type": "connection_init", "payload": {"Authorization": ["Bearer", token]}}
        code, reason = closed_after(url, protocol, json.dumps(init), initialise=False)
        assert code == 4403 and "Authorization must be a string" in reason, (code, reason)
        init = {"type": "connection_init", "payload": ["not", "an", "object"]}
        code, reason = closed_after(url, protocol, json.dumps(init), initialise=False)
        assert code == 4400 and "payload must be an object" in reason, (code, reason)
        for sent in ("{not json", "[]", '"connection_init"'):
            assert closed_after(url, protocol, sent) == (4400, "WebSocket message must be a JSON object")
        assert closed_after(url, protocol, b"binary") == (4400, "WebSocket message type must be text")
        # A null payload is the protocols' own (graphql-transport-ws's too): taken.
        with connect(url, subprotocols=[protocol], open_timeout=PATIENCE) as ws:  # type: ignore[list-item]
            ws.send(json.dumps({"type": "connection_init", "payload": None}))
            assert json.loads(ws.recv(timeout=PATIENCE)) == {"type": "connection_ack"}
    logged_cleanly(server)


# ── item 8: long polls ──────────────────────────────────────────────────────


def poll_request(cursor: str) -> bytes:
    body = json.dumps({"query": PAGE, "variables": {"before": cursor, "wait": 30}}).encode()
    return (
        b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def start_cursor(server: Server) -> str:
    answer = local.post(
        f"{server.base}/graphql",
        json={"query": "{ runLog(runId: 11, limit: 1) { pageInfo { startCursor } } }"},
        timeout=PATIENCE,
    ).json()
    cursor: str = answer["data"]["runLog"]["pageInfo"]["startCursor"]
    return cursor


def test_a_long_poll_whose_client_hangs_up_stops_waiting(tables: Backend, tmp_path: Path) -> None:
    with served(tmp_path, tables, RUNLOG_MAX_WAITS="4") as server:
        cursor = start_cursor(server)
        for _ in range(2):
            polls = [
                socket.create_connection(("127.0.0.1", port(server)), timeout=PATIENCE) for _ in range(4)
            ]
            for poll in polls:
                poll.sendall(poll_request(cursor))
            wait_for("four polls waiting", lambda: metric(server, "runlog_long_polls_waiting") == 4)
            for poll in polls:
                poll.close()
            # Well before their 30 s: the waits end with their clients, and
            # their places (RUNLOG_MAX_WAITS) are free for the next four.
            wait_for("no poll waiting", lambda: metric(server, "runlog_long_polls_waiting") == 0, within=20)
    logged_cleanly(server)


def test_polls_holding_every_connection_leave_the_health_checks_answered(
    tables: Backend, tmp_path: Path
) -> None:
    with served(tmp_path, tables, RUNLOG_MAX_CONNECTIONS="5") as server:
        cursor = start_cursor(server)
        polls = [socket.create_connection(("127.0.0.1", port(server)), timeout=PATIENCE) for _ in range(5)]
        try:
            for poll in polls:
                poll.sendall(poll_request(cursor))
            wait_for("five polls waiting", lambda: metric(server, "runlog_long_polls_waiting") == 5)
            for path in ("/livez", "/readyz", "/metrics"):
                assert local.get(f"{server.base}{path}", timeout=PATIENCE).status_code == 200, path
            # Other requests are held to the cap, as before.
            assert local.post(f"{server.base}/graphql", json={"query": "{ __typename }"}).status_code == 503
        finally:
            for poll in polls:
                poll.close()
