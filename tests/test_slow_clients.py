"""Slow and idle clients, against a real `python -m gql serve`: each is closed within its timeout.

No speed is asserted: each socket must be closed by the server well before a
generous bound, and a normal request is answered while they are open. A client
slow to send its head or to read is the reverse proxy's (tests/test_proxy.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gql.settings import Settings, SettingsError

from . import local
from .conftest import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 1.0  # each of the body and keep-alive timeouts, in seconds
BOUND = 20.0  # a socket still open this long after the client began was never closed
HEAD = b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
QUERY = b'{"query": "{ __typename }"}'


@pytest.fixture
def server(tmp_path: Path) -> Iterator[int]:
    """`python -m gql serve` on this checkout's code, with one-second timeouts."""
    with serving(tmp_path, RUNLOG_BODY_TIMEOUT=str(TIMEOUT), RUNLOG_KEEPALIVE_TIMEOUT=str(TIMEOUT)) as (
        port,
        _process,
    ):
        yield port


@contextlib.contextmanager
def serving(tmp_path: Path, **settings: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`python -m gql serve` on an SQLite file in `tmp_path` with these variables: its port and process."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.environ.get("RUNLOG_TEST_SERVE_PATH", str(ROOT)),
        "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}",
        **settings,
    }
    log = tmp_path / "serve.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gql", "serve", "--port", str(port)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", process)  # type: ignore[arg-type]
        yield port, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text()


def until_closed(conn: socket.socket, trickle: bytes = b"", sent: threading.Event | None = None) -> bytes:
    """Read until the server closes `conn`, sending `trickle` a byte every 0.2 s meanwhile.

    Fails if the connection is still open after BOUND seconds. `sent` is set
    first: what the caller sent before is on its way.
    """
    if sent is not None:
        sent.set()
    received = b""
    deadline = time.monotonic() + BOUND
    position = 0
    while time.monotonic() < deadline:
        readable, _, _ = select.select([conn], [], [], 0.2)
        if readable:
            try:
                data = conn.recv(65536)
            except ConnectionResetError:
                return received
            if not data:
                return received
            received += data
        elif position < len(trickle):
            try:
                conn.send(trickle[position : position + 1])
            except (BrokenPipeError, ConnectionResetError):
                return received
            position += 1
    pytest.fail(f"the server kept the connection open for {BOUND}s; it received {received[:200]!r}")


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def trickles_its_body(port: int, sent: threading.Event) -> bytes:
    with connect(port) as conn:
        conn.sendall(HEAD + f"Content-Length: {len(QUERY) + 500}\r\n\r\n".encode())
        return until_closed(conn, trickle=QUERY + b" " * 500, sent=sent)


def idles_after_a_request(port: int, sent: threading.Event) -> bytes:
    with connect(port) as conn:
        conn.sendall(HEAD + f"Content-Length: {len(QUERY)}\r\n\r\n".encode() + QUERY)
        return until_closed(conn, sent=sent)


SLOW: dict[str, Callable[[int, threading.Event], bytes]] = {
    "trickles its body": trickles_its_body,
    "idles after a request": idles_after_a_request,
}


def test_slow_and_idle_clients_are_closed_while_others_are_answered(server: int) -> None:
    answers: dict[str, bytes | BaseException] = {}

    sent = {name: threading.Event() for name in SLOW}

    def run(name: str, client: Callable[[int, threading.Event], bytes]) -> None:
        try:
            answers[name] = client(server, sent[name])
        except BaseException as exc:  # reported below, in the test's thread
            answers[name] = exc
            sent[name].set()

    threads = [threading.Thread(target=run, args=item) for item in SLOW.items()]
    for thread in threads:
        thread.start()
    for name, event in sent.items():  # the slow clients are connected and sending
        assert event.wait(BOUND), f"{name}: never connected"
    answered = local.post(
        f"http://127.0.0.1:{server}/graphql", content=QUERY, headers={"content-type": "application/json"}
    )
    assert answered.json() == {"data": {"__typename": "Query"}}
    for thread in threads:
        thread.join(BOUND + 5)
    for name, answer in answers.items():
        assert not isinstance(answer, BaseException), f"{name}: {answer}"
    assert set(answers) == set(SLOW)
    # A request that was answered is not cut; a body too slow is told why.
    assert answers["idles after a request"].startswith(b"HTTP/1.1 200 ")  # type: ignore[union-attr]
    body_too_slow = answers["trickles its body"]
    assert isinstance(body_too_slow, bytes) and body_too_slow.startswith(b"HTTP/1.1 408 "), body_too_slow[
        :300
    ]
    assert b"RUNLOG_BODY_TIMEOUT" in body_too_slow and b"x-request-id" in body_too_slow.lower()
    # The server is still there for everyone else.
    again = local.post(
        f"http://127.0.0.1:{server}/graphql", content=QUERY, headers={"content-type": "application/json"}
    )
    assert again.status_code == 200


def test_the_timeouts_and_the_connection_cap_are_settings() -> None:
    settings = Settings.from_env(
        {
            "RUNLOG_HEADER_TIMEOUT": "4",
            "RUNLOG_BODY_TIMEOUT": "20",
            "RUNLOG_KEEPALIVE_TIMEOUT": "2.5",
            "RUNLOG_MAX_CONNECTIONS": "50",
        }
    )
    assert (settings.header_timeout, settings.body_timeout, settings.keepalive_timeout) == (4, 20, 2.5)
    assert settings.max_connections == 50
    defaults = Settings.from_env({})
    assert (defaults.header_timeout, defaults.body_timeout, defaults.keepalive_timeout) == (10, 30, 5)
    assert defaults.max_connections == 1000
    for key in ("RUNLOG_HEADER_TIMEOUT", "RUNLOG_BODY_TIMEOUT", "RUNLOG_KEEPALIVE_TIMEOUT"):
        with pytest.raises(SettingsError, match=key):
            Settings.from_env({key: "inf"})
    with pytest.raises(SettingsError, match="RUNLOG_MAX_CONNECTIONS"):
        Settings.from_env({"RUNLOG_MAX_CONNECTIONS": "0"})


def test_serve_passes_the_bounds_to_uvicorn() -> None:
    import uvicorn

    from gql.edge import server

    settings = Settings(keepalive_timeout=4, ws_ping_interval=6)
    config = uvicorn.Config("gql.edge.app:create_app", factory=True, **server.uvicorn_options(settings))
    config.load()  # each option one uvicorn documents: an unknown protocol name fails here
    assert (config.timeout_keep_alive, config.ws_ping_interval, config.ws_ping_timeout) == (4, 6, 6)
    assert config.limit_concurrency is None  # the app's cap (InFlightCap) lets the health checks past


SLOW_EXPORTS = 10
# What ten exports whose clients read nothing may add to the server's memory, all together: each
# holds one page of at most 1 MiB of details (gql/edge/export.py), where each held ~40 MB before.
SLOW_EXPORTS_BOUND_KB = 120 * 1024


def _rss_kb(process: subprocess.Popen[bytes]) -> int:
    with open(f"/proc/{process.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_exports_whose_clients_read_nothing_hold_a_bounded_memory_and_are_dropped(tmp_path: Path) -> None:
    import sqlite3

    import sqlalchemy as sa

    from gql.store.db import metadata

    # 600 lines of 60 KB details: 36 MB, which a client that reads nothing never takes (a socket
    # buffers at most net.ipv4.tcp_wmem's most, 4 MB on Debian's defaults), and 10 such exports
    # buffered whole would be three times the bound.
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'runlog.db'}")
    metadata.create_all(engine)
    engine.dispose()
    text = json.dumps({"text": "n" * 60_000})
    lines = 600
    with sqlite3.connect(tmp_path / "runlog.db") as db:
        db.executemany(
            "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (1, 'note', ?, ?)",
            [
                (text, f"2026-05-01 10:{i // 60000:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}")
                for i in range(lines)
            ],
        )
    with serving(
        tmp_path, RUNLOG_MAX_EXPORTS=str(SLOW_EXPORTS), RUNLOG_SEND_TIMEOUT="3", RUNLOG_WS_PING_INTERVAL="3"
    ) as (port, process):
        before = _rss_kb(process)
        clients = []
        for _ in range(SLOW_EXPORTS):
            conn = connect(port)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sendall(b"GET /runs/1/log.ndjson HTTP/1.1\r\nHost: localhost\r\n\r\n")
            clients.append(conn)
        log = tmp_path / "serve.log"
        most = before
        deadline = time.monotonic() + 120
        # Until the server has dropped every one of them, its memory sampled meanwhile.
        while log.read_text().count("its client took nothing") < SLOW_EXPORTS:
            assert time.monotonic() < deadline, "the server did not drop the clients that read nothing"
            most = max(most, _rss_kb(process))
            time.sleep(0.05)
        for conn in clients:
            conn.close()
        assert most - before < SLOW_EXPORTS_BOUND_KB, f"grew by {(most - before) // 1024} MB"
        # A client that reads takes the whole run.
        answer = local.get(f"http://127.0.0.1:{port}/runs/1/log.ndjson", timeout=120)
        assert answer.status_code == 200 and answer.content.count(b"\n") == lines
