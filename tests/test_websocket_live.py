"""Websockets and long polls against real servers (`python -m gql serve`), as hostile or careless
clients use them: what the process holds for them is bounded, and routine events log no ERROR.

On both databases. Each test waits for an event (a message, a close, a log
line, a metric), never a fixed time.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from gql.edge.server import GRACEFUL_SHUTDOWN

from .conftest import Backend
from .serving import Server, start, stop, wait_until_healthy
from .test_subscription_live import PATIENCE, TAIL, frame, next_line, open_tail, read_frame

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
    for line in httpx.get(f"{server.base}/metrics", timeout=PATIENCE).text.splitlines():
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
    page = httpx.post(
        f"{server.base}/graphql",
        json={"query": "{ runLog(runId: 11, limit: 2000) { nodes { cursor } } }"},
        timeout=PATIENCE,
    ).json()
    cursor: str = page["data"]["runLog"]["nodes"][-1]["cursor"]
    return cursor


# ── websocket frames, for clients that do not read ──────────────────────────


def subscriber_that_never_reads(server: Server, since: str) -> socket.socket:
    """A graphql-transport-ws tail from `since`, on a socket with a tiny receive buffer, read no further."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(PATIENCE)
    raw.connect(("127.0.0.1", port(server)))
    raw.sendall(
        b"GET /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(1)
    assert head.startswith(b"HTTP/1.1 101 "), head
    raw.sendall(frame(0x1, b'{"type":"connection_init"}'))
    assert read_frame(raw) == (0x1, b'{"type":"connection_ack"}')
    subscribe = {
        "type": "subscribe",
        "id": "t",
        "payload": {"query": TAIL, "variables": {"runId": RUN, "since": since}},
    }
    raw.sendall(frame(0x1, json.dumps(subscribe).encode()))
    return raw


def dropped(server: Server) -> int:
    return server.output().count("dropped: it took none of the")


# ── item 7: a subscriber that falls behind ──────────────────────────────────


def test_a_subscriber_that_takes_nothing_is_dropped_and_its_subscription_ends(
    tables: Backend, tmp_path: Path
) -> None:
    add_lines(tables, 200, 60 * 1024)  # 12 MB: past what the sockets' buffers hold
    with served(tmp_path, tables, RUNLOG_WS_PING_INTERVAL="1") as server:
        since = cursor_of_first(server)
        with contextlib.ExitStack() as stack:
            for _ in range(3):
                stack.enter_context(subscriber_that_never_reads(server, since))
            wait_for("three subscribers dropped", lambda: dropped(server) == 3)
            # Their subscriptions ended: a new tail is served.
            wait_for("no subscription left", lambda: metric(server, "runlog_subscriptions_open") == 0)
        with open_tail(server.base, RUN, since) as ws:
            assert next_line(ws)["detail"]["text"].startswith("00000")
    logged_cleanly(server)


def kernel_can_hold() -> int:
    """The most one never-read websocket's kernel buffers can take: the server's send buffer and the client's.

    The server's send buffer grows to at most tcp_wmem's maximum (uvicorn
    sets no SO_SNDBUF); the client's receive buffer is what its SO_RCVBUF
    became (the kernel doubles what was asked for), counted twice for what
    the kernel lets a queue overrun by.
    """
    send_most = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # as subscriber_that_never_reads
        receive = probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return send_most + 2 * receive


def frame_head_waiting(raw: socket.socket) -> tuple[int, int]:
    """The opcode and length of the first frame sent to `raw`, peeked: nothing is taken from the socket."""

    def head() -> bytes:
        return raw.recv(10, socket.MSG_PEEK)

    wait_for("the first frame's head", lambda: len(head()) == 10)
    first, size = head()[:2]
    assert size == 127, head()  # a 64-bit length
    (length,) = struct.unpack("!Q", head()[2:])
    return first & 0x0F, length


def test_sigterm_drops_subscribers_that_take_nothing_within_the_grace(
    tables: Backend, tmp_path: Path
) -> None:
    # One line larger than both kernel buffers of a socket: once the server
    # has written its first bytes, the rest waits in the server's memory
    # for a client that takes none. The detail cap is raised to let it be
    # read (the setting allows up to 16 MiB).
    detail = kernel_can_hold() + 1024 * 1024
    if detail > 16 * 1024 * 1024:
        pytest.skip(f"tcp_wmem's maximum asks for a {detail}-byte detail, past 16 MiB")
    add_lines(tables, 1, detail)
    # No ping within the test: the subscribers are dropped by shutdown, not
    # by a ping timeout.
    with served(
        tmp_path, tables, RUNLOG_WS_PING_INTERVAL="3600", RUNLOG_MAX_DETAIL_BYTES=str(detail + 100)
    ) as server:
        since = cursor_of_first(server)
        with contextlib.ExitStack() as stack:
            subscribers = [stack.enter_context(subscriber_that_never_reads(server, since)) for _ in range(3)]
            for raw in subscribers:
                opcode, length = frame_head_waiting(raw)
                assert opcode == 0x1 and length > detail, (opcode, length)
            # Each frame's head has arrived, so the server has written the
            # frame (uvicorn writes one whole), larger than the kernel can
            # hold: the rest waits in the server, for ever from these clients.
            server.process.send_signal(signal.SIGTERM)
            try:
                status = server.process.wait(timeout=GRACEFUL_SHUTDOWN + PATIENCE)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the server did not exit on SIGTERM:\n{server.output()}")
        log = server.output()
        # uvicorn shuts down gracefully, then raises the signal again so the
        # exit status says how the process ended (tests/test_http.py).
        assert status in (0, -signal.SIGTERM) and "Finished server process" in log, (status, log)
        # Had the grace (GRACEFUL_SHUTDOWN, fixed) run out, uvicorn would
        # have logged "timeout graceful shutdown exceeded" at ERROR, and a
        # traceback for each task it then cancelled.
        assert " ERROR " not in log and "Traceback" not in log and "never retrieved" not in log, log
        assert dropped(server) == 3, log


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
    answer = httpx.post(
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
        # Four polls and the connection of any other request make the five.
        polls = [socket.create_connection(("127.0.0.1", port(server)), timeout=PATIENCE) for _ in range(4)]
        try:
            for poll in polls:
                poll.sendall(poll_request(cursor))
            wait_for("four polls waiting", lambda: metric(server, "runlog_long_polls_waiting") == 4)
            for path in ("/livez", "/readyz", "/metrics"):
                assert httpx.get(f"{server.base}{path}", timeout=PATIENCE).status_code == 200, path
            # Other requests are held to the cap, as before.
            assert httpx.post(f"{server.base}/graphql", json={"query": "{ __typename }"}).status_code == 503
        finally:
            for poll in polls:
                poll.close()
