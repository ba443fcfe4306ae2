"""`tail.tail_lines`: a run's new lines, oldest first, each once, late commits included.

The subscription `runLogTail` serves what this yields; here it is followed
directly, with the watcher the app runs, while a second connection writes as
another process of the service would, and holds one commit open on purpose.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa

from gql import store
from gql.domain import tail
from gql.store.db import create_engine

from .conftest import Backend

# Long enough for any wait here to be a failure, not a slow machine.
LATE = "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, 'note', '{\"text\": \"late\"}', :at)"
PATIENCE = 60


def _insert(backend: Backend, text: str, at: datetime.datetime | None = None, kind: str = "note") -> int:
    """Write a line as another process would (a note with `text`, or a run.created); answer its id."""
    at = at or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    value: Any = at.isoformat(sep=" ", timespec="milliseconds") if backend.name == "sqlite" else at
    detail = {"text": text} if kind == "note" else {"eventId": text}
    with backend.sync.begin() as conn:
        result = conn.execute(
            sa.text("INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, :k, :d, :at)"),
            {"k": kind, "d": json.dumps(detail), "at": value},
        )
        return int(result.lastrowid)


async def _follow(tables: Backend, run: Any) -> None:
    settings = tables.settings(wait_interval=0.05)
    engine = create_engine(settings)
    watcher = tail.Watcher(engine, settings)
    watcher.start()
    try:
        await run(SimpleNamespace(engine=engine, settings=settings, watcher=watcher))
    finally:
        await watcher.stop()
        await engine.dispose()


async def _started(watcher: tail.Watcher) -> None:
    """Wait until a tail of run 7 is watching, and two probes have passed since (it has read "now")."""
    async with asyncio.timeout(PATIENCE):
        while 7 not in watcher._watches:  # noqa: ASYNC110 (the watcher has no event for a test to wait on)
            await asyncio.sleep(0.01)
        probes = watcher.probes
        while watcher.probes < probes + 2:  # noqa: ASYNC110 (as above)
            await asyncio.sleep(0.01)


async def _next(lines: Any) -> store.Line:
    async with asyncio.timeout(PATIENCE):
        line: store.Line = await anext(lines)
        return line


def test_a_tail_delivers_new_lines_and_a_late_commit_once_and_a_reconnect_misses_nothing(
    tables: Backend,
) -> None:
    before_tail = _insert(tables, "before the tail")

    async def run(context: Any) -> None:
        lines = tail.tail_lines(context, 7, None, None)
        first = asyncio.ensure_future(_next(lines))
        await _started(context.watcher)
        # From now on: the line already there is not delivered.
        a = await asyncio.to_thread(_insert, tables, "a")
        got = await first
        assert got.id == a and got.cursor
        # A line stamped earlier, its commit held open on a second connection.
        held = tables.sync.connect()
        transaction = held.begin()
        stamped = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(
            milliseconds=300
        )
        late_at: Any = (
            stamped.isoformat(sep=" ", timespec="milliseconds") if tables.name == "sqlite" else stamped
        )

        def hold() -> None:
            held.execute(
                sa.text(LATE),
                {"at": late_at},
            )

        if tables.name == "sqlite":  # one writer at a time: the newer line commits first
            n = await asyncio.to_thread(_insert, tables, "newer")
            await asyncio.to_thread(hold)
        else:
            await asyncio.to_thread(hold)
            n = await asyncio.to_thread(_insert, tables, "newer")
        got_n = await _next(lines)
        assert got_n.id == n
        await asyncio.to_thread(transaction.commit)
        held.close()
        late = tables.scalar("SELECT id FROM event_run_log WHERE detail LIKE '%late%'")
        got_late = await _next(lines)
        assert got_late.id == late
        m = await asyncio.to_thread(_insert, tables, "m")
        assert (await _next(lines)).id == m
        await lines.aclose()
        # A reconnect from the cursor of the line before the late one: the
        # late line and what came after, once each.
        again = tail.tail_lines(context, 7, None, got_n.cursor)
        assert [(await _next(again)).id for _ in range(2)] == [late, m]
        o = await asyncio.to_thread(_insert, tables, "o")
        assert (await _next(again)).id == o
        await again.aclose()
        # With kinds: only those lines (from now: a cursor is tied to its kinds filter).
        only = tail.tail_lines(context, 7, ["run.created"], None)
        created = asyncio.ensure_future(_next(only))
        await _started(context.watcher)
        await asyncio.to_thread(_insert, tables, "passed over")
        kept = await asyncio.to_thread(_insert, tables, "12", kind="run.created")
        assert (await created).id == kept  # oldest first: the note before it was passed over
        await only.aclose()
        assert before_tail < a

    asyncio.run(_follow(tables, run))


def test_a_tail_ends_when_the_watcher_stops(tables: Backend) -> None:
    async def run(context: Any) -> None:
        lines = tail.tail_lines(context, 7, None, None)
        waiting = asyncio.ensure_future(anext(lines, None))
        await _started(context.watcher)  # the tail waits for a line
        context.watcher.close()
        async with asyncio.timeout(PATIENCE):
            assert await waiting is None

    asyncio.run(_follow(tables, run))
