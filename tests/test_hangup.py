"""A request whose client leaves stops at once, its statement with it, and its connection goes back."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql
import sqlalchemy as sa

from .conftest import Api, Backend

PAGE = {"query": "{ runLog(runId: 1, limit: 50) { nodes { id } } }"}
DEADLINE = 30.0  # seconds an awaited event may take on a loaded machine before the test fails
SQLITE_LINES = 1_000_000


@contextmanager
def _held_page_read(backend: Backend) -> Iterator[None]:
    """A page of run 1 reads for a long time while the block runs.

    MariaDB: the table is locked, so the page's statement waits at the server. SQLite, where a
    reader waiting on a lock cannot be interrupted: run 1 is a million lines with no index, so
    the page's statement sorts them all.
    """
    if backend.name == "sqlite":
        for (index,) in backend.rows(
            "SELECT name FROM sqlite_master "
            "WHERE type = 'index' AND tbl_name = 'event_run_log' AND sql IS NOT NULL"
        ):
            backend.execute(f"DROP INDEX {index}")
        backend.execute(
            "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :lines) "
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
            "SELECT 1, n % 40, 'note', n % 5, '{\"text\":\"x\"}', "
            "datetime('2026-11-01', '+' || n || ' seconds') FROM seq",
            lines=SQLITE_LINES,
        )
        yield
        return
    backend.execute(
        "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (1, 'note', '{}', '2026-11-01')"
    )
    locker = _mariadb(backend)
    try:
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES event_run_log WRITE")
        yield
    finally:
        with locker.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        locker.close()


def _mariadb(backend: Backend) -> Any:
    url = sa.make_url(backend.url)
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
        autocommit=True,
    )


def _reading(backend: Backend) -> set[int]:
    """MariaDB: the connections whose statement reads event_run_log now."""
    conn = _mariadb(backend)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE DB = DATABASE() AND INFO LIKE %s AND ID <> CONNECTION_ID()",
                ("%FROM event_run_log%",),
            )
            return {row[0] for row in cur.fetchall()}
    finally:
        conn.close()


def _wait_for(what: str, found: Any) -> Any:
    """`found()` once true; polled, as MariaDB tells no one when a statement starts or ends."""
    deadline = time.monotonic() + DEADLINE
    while not (value := found()):
        assert time.monotonic() < deadline, f"still not {what} after {DEADLINE} s"
        time.sleep(0.05)
    return value


def _scope(api: Api, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": dict(api.client.app_state),  # as uvicorn copies the lifespan's state
        "app": api.client.app,
    }


def test_a_page_whose_client_leaves_stops_its_statement_and_frees_its_connection(
    make_api: Any, tables: Backend
) -> None:
    api = make_api(read_timeout=60)
    engine = api.client.app_state["engine"]
    failed: list[BaseException] = []  # what the database answered the statements that failed
    sa.event.listen(
        engine.sync_engine, "handle_error", lambda context: failed.append(context.original_exception)
    )
    started = threading.Event()  # SQLite: the page's statement is about to go
    sa.event.listen(
        engine.sync_engine,
        "before_cursor_execute",
        lambda _c, _cu, sql, *_: "event_run_log" in sql and started.set(),
    )
    body = json.dumps(PAGE).encode()
    sent: list[Any] = []
    gone: asyncio.Event | None = None

    async def receive() -> dict[str, Any]:
        nonlocal gone
        if gone is None:
            gone = asyncio.Event()
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    async def leave() -> None:
        assert gone is not None
        gone.set()

    with _held_page_read(tables):
        answered = api.client.portal.start_task_soon(api.client.app, _scope(api, body), receive, send)
        if tables.name == "mariadb":
            reading = _wait_for("reading", lambda: _reading(tables))
        else:
            assert started.wait(DEADLINE), "the page's statement never went"
        api.client.portal.call(leave)
        answered.result(DEADLINE)  # the request has ended
        assert sent == []  # no one to answer
        assert engine.pool.checkedout() == 0  # its connection went back
        if tables.name == "mariadb":
            # Gone while the lock it waited on is still held.
            _wait_for("gone", lambda: not _reading(tables) & reading)
        else:
            assert any("interrupted" in str(exc) for exc in failed), failed
    assert api.write(2, "note", {"text": "after"}) is True
