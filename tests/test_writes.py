"""Grouped writes: concurrent lines share an INSERT, each caller hears about its own line."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from gql import store
from gql.domain import writes
from gql.settings import Settings
from gql.store.db import create_engine

from .conftest import Backend, sent_statements


def _in(seconds: float) -> float:
    """A deadline `seconds` from now, on the running loop's clock."""
    return asyncio.get_running_loop().time() + seconds


def test_concurrent_lines_share_inserts_and_are_all_stored(tables: Backend) -> None:
    async def run() -> int:
        settings = tables.settings()
        engine = create_engine(settings, writes=True)  # the writes' pool, as the app's
        writer = writes.Writer(engine, settings)
        try:
            with sent_statements(engine) as statements:
                lines = [store.NewLine(run_id=3, kind="note", detail=f'{{"text": "{i}"}}') for i in range(40)]
                await asyncio.gather(*(writer.write_line(line, deadline=_in(3)) for line in lines))
        finally:
            await engine.dispose()
        return sum("INSERT INTO event_run_log " in statement for statement in statements)

    inserts = asyncio.run(run())
    stored = tables.rows("SELECT detail FROM event_run_log")
    # Several batches may be at the database at once: the order of ids is theirs.
    assert sorted(row.detail for row in stored) == sorted(f'{{"text": "{i}"}}' for i in range(40))
    assert 0 < inserts < 40


def test_consecutive_batches_go_on_one_connection_which_goes_back_after(mariadb: Backend) -> None:
    """A batch that waits when one is answered goes on the same connection, without a checkout.

    MariaDB alone: SQLite's INSERTs go through SQLAlchemy, a checkout each.
    """
    mariadb.create_tables()
    tables = mariadb
    batches: list[int] = []

    def counting(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if "INTO event_run_log (" in sql:  # a batch's lines (its words and COMMIT go with them)
            batches.append(1)

    async def run() -> tuple[int, int]:
        settings = tables.settings()
        engine = create_engine(settings, writes=True)  # the writes' pool, as the app's
        writer = writes.Writer(engine, settings)
        checkouts: list[int] = []
        sa.event.listen(engine.sync_engine, "checkout", lambda *args: checkouts.append(1))
        sa.event.listen(engine.sync_engine, "before_cursor_execute", counting)
        checked_in = asyncio.Event()
        sa.event.listen(engine.sync_engine, "checkin", lambda *args: checked_in.set())

        async def write_some(number: int) -> None:
            for i in range(15):
                line = store.NewLine(run_id=5, kind="note", detail=f'{{"text": "{number}.{i}"}}')
                await writer.write_line(line, deadline=_in(5))

        try:
            await asyncio.gather(*(write_some(n) for n in range(8)))
            # The last batch's connection goes back after its answer: wait for
            # the checkins (a generous bound), then count.
            while engine.sync_engine.pool.checkedout():
                checked_in.clear()
                async with asyncio.timeout(10):
                    await checked_in.wait()
            return len(checkouts), engine.sync_engine.pool.checkedout()
        finally:
            await engine.dispose()

    checkouts, still_out = asyncio.run(run())
    stored = tables.rows("SELECT detail FROM event_run_log WHERE run_id = 5")
    assert len(stored) == 8 * 15
    assert checkouts < len(batches), (checkouts, len(batches))
    assert still_out == 0


def test_a_line_the_database_refuses_does_not_take_its_group_with_it(tables: Backend) -> None:
    async def run() -> list[Any]:
        settings = tables.settings()
        engine = create_engine(settings, writes=True)  # the writes' pool, as the app's
        writer = writes.Writer(engine, settings)
        try:
            lines = [store.NewLine(run_id=4, kind="note", phase=i) for i in range(5)]
            # Out of range for the INT column: MariaDB refuses it, SQLite keeps it.
            lines.insert(2, store.NewLine(run_id=4, kind="note", phase=2**40))
            return await asyncio.gather(
                *(writer.write_line(line, deadline=_in(3)) for line in lines),
                return_exceptions=True,
            )
        finally:
            await engine.dispose()

    results = asyncio.run(run())
    phases = sorted(row.phase for row in tables.rows("SELECT phase FROM event_run_log"))
    if tables.name == "mariadb":
        assert isinstance(results[2], Exception)
        assert [r for i, r in enumerate(results) if i != 2] == [None] * 5
        assert phases == [0, 1, 2, 3, 4]
    else:
        assert results == [None] * 6


def test_a_line_whose_caller_gave_up_is_not_sent() -> None:
    async def run() -> list[store.NewLine]:
        queue = writes._Queue.__new__(writes._Queue)
        queue.waiting = writes.deque()
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()
        gone.cancel()
        kept: asyncio.Future[None] = loop.create_future()
        queue.waiting.extend(
            [
                writes._Entry(store.NewLine(run_id=1, kind="note"), _in(3), gone),
                writes._Entry(store.NewLine(run_id=2, kind="note"), _in(3), kept),
            ]
        )
        return [entry.line for entry in queue._take()]

    assert [line.run_id for line in asyncio.run(run())] == [2]


def test_each_waiting_line_is_answered_at_its_own_deadline_in_their_order() -> None:
    """The queue's one timer answers a line that came later with an earlier deadline first."""

    async def run() -> list[str]:
        engine = create_engine(Settings(database_url="sqlite+aiosqlite://"))
        queue = writes._Queue(engine, 0)  # no batch may go: every line waits
        answered: list[str] = []

        async def write(name: str, seconds: float) -> None:
            try:
                await queue.write(store.NewLine(run_id=1, kind="note"), _in(seconds))
            except store.NotStored as exc:
                answered.append(f"{name}: {exc}")

        late = asyncio.ensure_future(write("late", 0.4))
        await asyncio.sleep(0)  # not a wait: one turn of the loop, so "late" is queued first
        await asyncio.gather(late, write("soon", 0.1), write("between", 0.2))
        return answered

    reason = "its deadline came while it waited for the database"
    assert asyncio.run(run()) == [f"soon: {reason}", f"between: {reason}", f"late: {reason}"]


@pytest.mark.parametrize("size", [writes.MAX_LINES + 5])
def test_a_group_is_bounded(size: int) -> None:
    async def run() -> list[int]:
        queue = writes._Queue.__new__(writes._Queue)
        queue.waiting = writes.deque()
        loop = asyncio.get_running_loop()
        for i in range(size):
            line = store.NewLine(run_id=i + 1, kind="note", detail="x" * 10)
            queue.waiting.append(writes._Entry(line, _in(3), loop.create_future()))
        return [len(queue._take()), len(queue._take())]

    assert asyncio.run(run()) == [writes.MAX_LINES, 5]


@pytest.mark.mariadb
def test_a_write_on_the_readers_pool_is_refused_and_stores_nothing(mariadb: Backend) -> None:
    """The readers' pool autocommits: a line and its words (and its key) would not be one transaction."""
    mariadb.create_tables()
    line = store.NewLine(run_id=3, kind="note", detail='{"text": "x"}')

    async def run() -> None:
        engine = create_engine(mariadb.settings())  # the readers' pool
        try:
            with pytest.raises(ValueError, match="needs the writes' pool"):
                await store.insert_lines(engine, [line], deadline=_in(3))
            with pytest.raises(ValueError, match="needs the writes' pool"):
                await store.insert_keyed(engine, line, key_digest="k", line_digest="l", deadline=_in(3))
        finally:
            await engine.dispose()

    asyncio.run(run())
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 0
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log_keys") == 0
