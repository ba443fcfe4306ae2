"""Readers never starve the writers, against a real `python -m gql serve` on MariaDB.

Writes have a pool of their own; searches and exports are admitted up to their settings and a
reader refused is told when to retry; a reader whose client leaves stops, its statement with it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa

from . import local
from .conftest import Backend, free_port, wait_until_healthy

pytestmark = pytest.mark.mariadb

ROOT = Path(__file__).resolve().parent.parent
LINES = 30_000  # the large run's lines, written in one INSERT ... SELECT
DEADLINE = 30.0  # seconds an awaited event may take on a loaded machine before the test fails
SEARCH = "query S($s: String) { runLog(runId: 1, limit: 50, search: $s) { nodes { id } } }"
WRITE = 'mutation { writeRunLog(runId: 2, kind: "note", detail: {text: "under load"}) }'
WRITES = 10  # sent one after another while the readers press; each waits its turn on a saturated machine


def _large_run(backend: Backend, lines: int = LINES) -> None:
    backend.create_tables()
    backend.execute(
        "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
        "SELECT 1, seq % 40, 'note', seq % 5, "
        "CONCAT('{\"text\":\"line ', seq, ' ', REPEAT('x', 1000), '\"}'), "
        f"TIMESTAMP('2026-11-01') + INTERVAL seq SECOND FROM seq_1_to_{lines}"
    )
    backend.fold_words()  # so that a search reads the whole run's words, as after the upgrade step


@pytest.fixture
def serve(mariadb: Backend, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start `python -m gql serve` on the test database with these settings; its base URL."""
    started: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "serve.log"

    def start(**settings: Any) -> str:
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": os.environ.get("RUNLOG_TEST_SERVE_PATH", str(ROOT)),
            "RUNLOG_DATABASE_URL": mariadb.url,
            **{f"RUNLOG_{key.upper()}": str(value) for key, value in settings.items()},
        }
        with log.open("ab") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "gql", "serve", "--port", str(port)],
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        started.append(process)
        wait_until_healthy(f"http://127.0.0.1:{port}", process)  # type: ignore[arg-type]
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text()


def _server_log(tmp_path: Path) -> str:
    return (tmp_path / "serve.log").read_text()


def test_writes_answer_true_while_searches_and_abandoned_exports_read_a_large_run(
    mariadb: Backend, serve: Callable[..., str]
) -> None:
    _large_run(mariadb)
    # A small readers' pool, so that the readers press on it: 4 connections and 4 overflow.
    # A generous read timeout: a search of a loaded machine is slow, not refused.
    base = serve(pool_size=4, write_pool_size=2, max_searches=2, max_exports=2, read_timeout=60)
    done = threading.Event()
    searched: list[Any] = []
    exported: list[Any] = []
    refused: list[tuple[int, str]] = []  # each refused search's retryAfter and message

    def search() -> None:
        with local.Client(base_url=base, timeout=60) as client:
            while not done.is_set():
                body = client.post("/graphql", json={"query": SEARCH, "variables": {"s": "nowhere"}}).json()
                told = body.get("errors", [{}])[0].get("extensions", {})
                searched.append(told.get("code", "ANSWERED"))
                if told.get("code") == "TOO_MANY_SEARCHES":
                    refused.append((told["retryAfter"], body["errors"][0]["message"]))

    def abandon_exports() -> None:
        while not done.is_set():
            with (
                local.Client(base_url=base, timeout=60) as client,
                client.stream("GET", "/runs/1/log.ndjson?search=line") as response,
            ):
                if response.status_code == 200:
                    next(response.iter_raw(300))  # reads a little, then leaves
                    exported.append(200)
                else:
                    response.read()
                    exported.append(
                        (response.status_code, response.headers.get("retry-after"), response.json())
                    )

    readers = [threading.Thread(target=search) for _ in range(12)]
    readers += [threading.Thread(target=abandon_exports) for _ in range(4)]
    for reader in readers:
        reader.start()
    written: list[bool] = []
    ready: list[int] = []
    try:
        with local.Client(base_url=base, timeout=60) as client:
            # Once as many searches have been answered as there are readers, they all press on the pool.
            _wait_for("pressing", lambda: len(searched) >= len(readers))
            for _ in range(WRITES):
                written.append(client.post("/graphql", json={"query": WRITE}).json()["data"]["writeRunLog"])
                ready.append(client.get("/readyz").status_code)
    finally:
        done.set()
        for reader in readers:
            reader.join(120)
    assert written == [True] * WRITES
    assert ready == [200] * WRITES
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log WHERE run_id = 2") == WRITES
    # A refused reader is told which limit and when to retry; no reader is told the database is down.
    assert set(searched) <= {"ANSWERED", "TOO_MANY_SEARCHES"}, set(searched)
    assert "ANSWERED" in searched and "TOO_MANY_SEARCHES" in searched
    assert all(retry == 1 and "RUNLOG_MAX_SEARCHES=2" in message for retry, message in refused)
    refusals = [answer for answer in exported if answer != 200]
    assert 200 in exported
    for status, retry_after, body in refusals:
        assert (status, retry_after) == (503, "5")
        error = body["errors"][0]
        assert error["extensions"]["code"] == "TOO_MANY_EXPORTS" and "RUNLOG_MAX_EXPORTS" in error["message"]


def _statements(database: str) -> list[tuple[int, str]]:
    """The statements running now on `database`'s tables, by connection id (this one's left out)."""
    conn = pymysql.connect(host="127.0.0.1", port=_port(), user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT ID, INFO FROM information_schema.PROCESSLIST "
                "WHERE DB = %s AND INFO LIKE %s AND ID <> CONNECTION_ID()",
                (database, "%FROM event_run_log%"),
            )
            return list(cur.fetchall())
    finally:
        conn.close()


def _port() -> int:
    return sa.make_url(os.environ.get("RUNLOG_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/")).port or 3306


def _wait_for(what: str, found: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE
    while not (value := found()):
        assert time.monotonic() < deadline, f"still not {what} after {DEADLINE} s"
        time.sleep(0.05)
    return value


def _post(body: bytes) -> bytes:
    return (
        b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


REQUESTS = {
    "export": b"GET /runs/1/log.ndjson HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "search": _post(json.dumps({"query": SEARCH, "variables": {"s": "line 7"}}).encode()),
    "page": _post(json.dumps({"query": "{ runLog(runId: 1, limit: 50) { nodes { id } } }"}).encode()),
    "runsInFlight": _post(json.dumps({"query": "{ runsInFlight(limit: 10) { nodes { id } } }"}).encode()),
}


@pytest.mark.parametrize("request_sent", list(REQUESTS))
def test_a_reader_whose_client_leaves_ends_its_statement_at_the_server(
    mariadb: Backend, serve: Callable[..., str], tmp_path: Path, request_sent: str
) -> None:
    # A small run: the lock, not the run's size, keeps the statement waiting.
    _large_run(mariadb, lines=100)
    base = serve(read_timeout=60)  # the client's leaving ends the statement, not its deadline
    database = sa.make_url(mariadb.url).database
    assert database is not None
    # The table locked: the reader's statement waits at the server for as long as it is held.
    locker = pymysql.connect(host="127.0.0.1", port=_port(), user="root", database=database, autocommit=True)
    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES event_run_log WRITE")
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(REQUESTS[request_sent])
            waiting = _wait_for("reading", lambda: _statements(database))
        # The client has left: its statement goes, though the lock it waits on is still held.
        _wait_for("gone", lambda: not {i for i, _ in _statements(database)} & {i for i, _ in waiting})
        _wait_for("logged", lambda: "its client left" in _server_log(tmp_path))
    finally:
        with locker.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        locker.close()
    # The pool is whole: the next reader is answered.
    with local.Client(base_url=base, timeout=60) as client:
        assert (
            client.post("/graphql", json={"query": SEARCH, "variables": {"s": "line 7"}}).status_code == 200
        )
        assert client.get("/readyz").status_code == 200
