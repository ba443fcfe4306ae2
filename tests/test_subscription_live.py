"""runLogTail against real servers: `python -m gql serve` processes, a websocket client, real sockets.

Two processes on one MariaDB, a reconnect with the last cursor while lines
are written, keep-alive pings on an idle socket, and shutdown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from . import local
from .conftest import Backend, sqlite_alone
from .serving import serving

TAIL = (
    "subscription T($runId: ID!, $since: String) { runLogTail(runId: $runId, since: $since) {"
    " id cursor detail { ... on NoteDetail { text } } } }"
)
PATIENCE = 60  # seconds: any wait this long is a failure, not a slow machine


@contextmanager
def open_tail(
    base: str, run_id: int, since: str | None = None, *, max_queue: int | None = 16, **payload: str
) -> Iterator[ClientConnection]:
    """A graphql-transport-ws tail of `run_id` from `since`; `payload` goes in connection_init.

    `max_queue` is the websockets client's: past that many messages unread,
    it stops reading the socket (16, its default), and its close does not
    read on, so it waits its close timeout (10 s) for a close frame queued
    behind the rest; None reads on, as a browser does.
    """
    url = base.replace("http://", "ws://") + "/graphql"
    with connect(
        url,
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        open_timeout=PATIENCE,
        max_queue=max_queue,
    ) as ws:
        ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        assert json.loads(ws.recv(timeout=PATIENCE)) == {"type": "connection_ack"}
        variables: dict[str, Any] = {"runId": run_id, "since": since}
        ws.send(
            json.dumps({"type": "subscribe", "id": "t", "payload": {"query": TAIL, "variables": variables}})
        )
        yield ws


def next_line(ws: ClientConnection) -> dict[str, Any]:
    message = json.loads(ws.recv(timeout=PATIENCE))
    assert message["type"] == "next", message
    line: dict[str, Any] = message["payload"]["data"]["runLogTail"]
    return line


def write(base: str, run_id: int, text: str) -> None:
    body = local.post(
        f"{base}/graphql",
        json={
            "query": "mutation W($r: ID!, $t: String!) {"
            ' writeRunLog(runId: $r, kind: "note", detail: {text: $t}) }',
            "variables": {"r": run_id, "t": text},
        },
        timeout=PATIENCE,
    ).json()
    assert body == {"data": {"writeRunLog": True}}, body


def newest_cursor(base: str, run_id: int) -> str:
    page = local.post(
        f"{base}/graphql",
        json={
            "query": "query P($r: ID!) { runLog(runId: $r, limit: 1) { nodes { cursor } } }",
            "variables": {"r": run_id},
        },
        timeout=PATIENCE,
    ).json()
    cursor: str = page["data"]["runLog"]["nodes"][0]["cursor"]
    return cursor


@pytest.mark.mariadb
def test_a_line_written_through_another_process_arrives_on_the_tail(mariadb: Backend, tmp_path: Path) -> None:
    mariadb.create_tables()
    with (
        serving(tmp_path, mariadb.url, "a") as (a, _),
        serving(tmp_path, mariadb.url, "b") as (b, _),
    ):
        write(a, 31, "start")
        with open_tail(a, 31, newest_cursor(a, 31)) as ws:
            for server, text in ((b, "through b"), (a, "through a"), (b, "through b again")):
                write(server, 31, text)
            texts = [next_line(ws)["detail"]["text"] for _ in range(3)]
        assert texts == ["through b", "through a", "through b again"]
        ws.close()


def test_a_reconnect_with_the_last_cursor_misses_nothing_and_repeats_nothing_while_lines_are_written(
    tables: Backend, tmp_path: Path
) -> None:
    count = 60
    with serving(tmp_path, tables.url) as (base, _):
        write(base, 8, "start")
        since = newest_cursor(base, 8)

        def writer() -> None:
            for n in range(count):
                write(base, 8, f"line {n}")
                time.sleep(0.01)

        writing = threading.Thread(target=writer)
        writing.start()
        seen: list[str] = []
        try:
            for connection in range(4):  # three reconnects, each in the middle of the writes
                # Left mid-stream, with no `complete`: as a dropped connection.
                with open_tail(base, 8, since) as ws:
                    for _ in range(count // 4 if connection < 3 else count - len(seen)):
                        line = next_line(ws)
                        seen.append(line["detail"]["text"])
                        since = line["cursor"]
        finally:
            writing.join()
    assert seen == [f"line {n}" for n in range(count)]


@sqlite_alone
def test_an_idle_websocket_is_pinged_and_kept_past_the_head_deadline(tables: Backend, tmp_path: Path) -> None:
    env = {"RUNLOG_WS_PING_INTERVAL": "1", "RUNLOG_HEADER_TIMEOUT": "1"}
    with serving(tmp_path, tables.url, **env) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        with _initialised(port) as raw:
            started = time.monotonic()
            # Idle from here: the server pings (opcode 9) every second; each
            # ping answered keeps the connection past RUNLOG_HEADER_TIMEOUT.
            _answer_pings(raw, 3)
            assert time.monotonic() - started > 1
            # A peer that stops answering is closed once the ping's timeout passes.
            assert read_frame(raw)[0] == 0x9
            opcode, payload = read_frame(raw)
            assert opcode == 0x8 and int.from_bytes(payload[:2], "big") == 1011, (opcode, payload)
        # And a tail that stays idle through several pings still gets its line.
        write(base, 4, "start")
        variables = {"runId": 4, "since": newest_cursor(base, 4)}
        subscribe = {"type": "subscribe", "id": "t", "payload": {"query": TAIL, "variables": variables}}
        with _initialised(port) as raw:
            raw.sendall(frame(0x1, json.dumps(subscribe).encode()))
            _answer_pings(raw, 3)  # idle through several pings
            write(base, 4, "after a quiet while")
            while (got := read_frame(raw))[0] == 0x9:  # the next ping may come first
                raw.sendall(frame(0xA, got[1]))
            assert got[0] == 0x1, got
            message = json.loads(got[1])
            assert message["type"] == "next", message
            assert message["payload"]["data"]["runLogTail"]["detail"]["text"] == "after a quiet while"


def initialise(raw: socket.socket) -> None:
    """Open graphql-transport-ws on a connected socket, by hand: upgrade, connection_init, ack."""
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


@contextmanager
def _initialised(port: int) -> Iterator[socket.socket]:
    """A raw graphql-transport-ws connection, acknowledged: its pings are the test's to answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as raw:
        initialise(raw)
        yield raw


def _answer_pings(raw: socket.socket, count: int) -> None:
    """Receive `count` pings, nothing else, and answer each with its pong."""
    for _ in range(count):
        opcode, payload = read_frame(raw)
        assert opcode == 0x9, (opcode, payload)
        raw.sendall(frame(0xA, payload))


def test_shutdown_closes_every_tail_with_1012_and_exits_cleanly(tables: Backend, tmp_path: Path) -> None:
    with serving(tmp_path, tables.url) as (base, server):
        write(base, 2, "start")
        since = newest_cursor(base, 2)
        stack = contextlib.ExitStack()
        tails = [stack.enter_context(open_tail(base, run, since if run == 2 else None)) for run in (1, 2, 2)]
        write(base, 2, "before the stop")
        assert next_line(tails[1])["detail"]["text"] == "before the stop"
        server.send_signal(signal.SIGTERM)
        for ws in tails:
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    ws.recv(timeout=PATIENCE)
            assert (
                closed.value.rcvd is not None and closed.value.rcvd.code == 1012
            )  # service restart: reconnect
        stack.close()
        server.wait(timeout=PATIENCE)
    log = (tmp_path / "serve.log").read_text()
    assert "Application shutdown complete." in log
    assert "Traceback" not in log and " ERROR " not in log, log


def frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame."""
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x80 | opcode])
    head += bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + struct.pack("!H", size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(raw: socket.socket) -> tuple[int, bytes]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = raw.recv(n - len(data))
            assert chunk, "closed"
            data += chunk
        return data

    first, size = exactly(2)
    size &= 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", exactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", exactly(8))
    return first & 0x0F, exactly(size)
