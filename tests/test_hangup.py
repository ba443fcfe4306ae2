"""A request whose client leaves stops at once, its statement with it, and its connection goes back."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from gql.domain.writes import IN_FLIGHT

from .conftest import Api, Backend, _mariadb_connect

PAGE = "{ runLog(runId: 1, limit: 50) { nodes { id } } }"
CURSOR = "{ runLog(runId: 7, limit: 1) { pageInfo { startCursor } } }"
LONG_POLL = (
    "query P($before: String) { runLog(runId: 7, before: $before, wait: 30) "
    "{ nodes { detail { ... on NoteDetail { text } } } } }"
)
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
    return _mariadb_connect(sa.make_url(backend.url).database)


def _reading(backend: Backend) -> set[int]:
    """MariaDB: the connections whose statement reads event_run_log now."""
    return _statements(backend, "%FROM event_run_log%")


def _statements(backend: Backend, like: str) -> set[int]:
    """MariaDB: the connections whose statement now is `like` (a LIKE pattern)."""
    conn = _mariadb(backend)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE DB = DATABASE() AND INFO LIKE %s AND ID <> CONNECTION_ID()",
                (like,),
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


class _Client:
    """A client of the app, in process, that sends `query` and leaves when told."""

    def __init__(self, api: Api, query: str, variables: dict[str, Any] | None = None) -> None:
        self.api = api
        self.body = json.dumps({"query": query, "variables": variables or {}}).encode()
        self.sent: list[Any] = []  # what the app answered
        self.gone: asyncio.Event | None = None
        self.answered = api.client.portal.start_task_soon(
            api.client.app, self._scope(), self.receive, self.send
        )

    async def receive(self) -> dict[str, Any]:
        if self.gone is None:
            self.gone = asyncio.Event()
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        """Hang up, and wait for the request to end."""

        async def hang_up() -> None:
            assert self.gone is not None
            self.gone.set()

        self.api.client.portal.call(hang_up)
        self.answered.result(DEADLINE)

    def _scope(self) -> dict[str, Any]:
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
                (b"content-length", str(len(self.body)).encode()),
            ],
            "client": ("127.0.0.1", 1),
            "server": ("testserver", 80),
            "state": dict(self.api.client.app_state),  # as uvicorn copies the lifespan's state
            "app": self.api.client.app,
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
    with _held_page_read(tables):
        client = _Client(api, PAGE)
        if tables.name == "mariadb":
            reading = _wait_for("reading", lambda: _reading(tables))
        else:
            assert started.wait(DEADLINE), "the page's statement never went"
        client.leave()
        assert client.sent == []  # no one to answer
        assert engine.pool.checkedout() == 0  # its connection went back
        if tables.name == "mariadb":
            # Gone while the lock it waited on is still held.
            _wait_for("gone", lambda: not _reading(tables) & reading)
        else:
            assert any("interrupted" in str(exc) for exc in failed), failed
    assert api.write(2, "note", {"text": "after"}) is True


def test_a_long_poll_whose_client_leaves_frees_its_place(make_api: Any) -> None:
    api = make_api(max_waits=1)
    assert api.write(7, "note", {"text": "first"})
    cursor = api.data(CURSOR)["runLog"]["pageInfo"]["startCursor"]
    watcher = api.client.app_state["watcher"]
    client = _Client(api, LONG_POLL, {"before": cursor})
    _wait_for("waiting", lambda: watcher.waits == 1)
    client.leave()
    assert client.sent == []
    assert watcher.waits == 0
    # Its place is free: another long poll waits, and is answered by the next line.
    answered: list[Any] = []
    waiting = threading.Thread(target=lambda: answered.append(api.data(LONG_POLL, {"before": cursor})))
    waiting.start()
    _wait_for("waiting", lambda: watcher.waits == 1)
    assert api.write(7, "note", {"text": "second"}) is True
    waiting.join(DEADLINE)
    assert [node["detail"]["text"] for node in answered[0]["runLog"]["nodes"]] == ["second"]


WRITE = 'mutation W($text: String!) { writeRunLog(runId: 8, kind: "note", detail: {text: $text}) }'


@contextmanager
def _held_writes(backend: Backend) -> Iterator[None]:
    """Writes to event_run_log wait while the block runs: the table is locked (MariaDB) or held
    by another writer's transaction (SQLite)."""
    if backend.name == "mariadb":
        locker = _mariadb(backend)
        with locker.cursor() as cur:
            cur.execute("LOCK TABLES event_run_log WRITE")
        try:
            yield
        finally:
            with locker.cursor() as cur:
                cur.execute("UNLOCK TABLES")
            locker.close()
        return
    holder = sqlite3.connect(sa.make_url(backend.url).database or "", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_write_whose_client_leaves_is_stored_all_the_same(make_api: Any, tables: Backend) -> None:
    api = make_api(write_timeout=60)
    writer = api.client.app_state["writer"]
    at_database = 1 if tables.name == "sqlite" else IN_FLIGHT  # batches at the database at once
    with _held_writes(tables):
        # Lines that wait at the database, so the next one waits in the writer's queue.
        waiting = [_Client(api, WRITE, {"text": f"waits {n}"}) for n in range(at_database)]
        _wait_for("at the database", lambda: writer.lines_waiting() == 0)
        if tables.name == "mariadb":
            _wait_for(
                "inserting", lambda: len(_statements(tables, "%INSERT INTO event_run_log%")) == IN_FLIGHT
            )
        client = _Client(api, WRITE, {"text": "left behind"})
        _wait_for("queued", lambda: writer.lines_waiting() == 1)
        client.leave()
        assert client.sent == []  # no one to answer
    # The runner's line is kept: stored once the table is free, not dropped with its client.
    for stays in waiting:
        stays.answered.result(DEADLINE)
    texts = "SELECT detail FROM event_run_log WHERE run_id = 8"
    _wait_for("stored", lambda: any("left behind" in detail for (detail,) in tables.rows(texts)))
