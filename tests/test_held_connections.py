"""One way to hold a pooled connection (store.HeldConnection), one rule for every owner.

Its owners: the reads of one runLog field (`store.one_connection`), a write
task's consecutive batches, and the write queue's spare. A connection kept
is used again only while the pool has found no dead connection since
(`db.pool_generation`), for its own engine, a bounded number of times.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from gql import store
from gql.store.connections import read_rows
from gql.store.db import create_engine, mark_pool_stale

from .conftest import Backend


def test_a_kept_connection_is_given_back_once_the_pool_has_found_a_dead_one(tables: Backend) -> None:
    """Marked stale, or a connection thrown away elsewhere: the next take gets none, and nothing stays out."""

    async def run() -> tuple[bool, bool, bool, bool, bool, int]:
        engine = create_engine(tables.settings())
        other_engine = create_engine(tables.settings())
        try:
            held = store.HeldConnection()
            assert held.keep(await engine.connect(), engine)
            fresh = await held.take(engine)
            assert not held.holds()  # taken: a second caller meanwhile checks out its own
            # Another engine's reads (a replica's) neither take nor disturb it.
            assert held.keep(fresh, engine)
            untouched = await held.take(other_engine) is None and held.holds()
            await held.release()
            # Used up: once it has answered MAX_USES statements it goes back, so pool_recycle applies.
            pooled = await engine.connect()
            for _ in range(store.HeldConnection.MAX_USES - 1):
                assert held.keep(pooled, engine)
                pooled = await held.take(engine)
                assert pooled is not None
            assert held.keep(pooled, engine)
            used_up = await held.take(engine)
            assert held.keep(await engine.connect(), engine)
            mark_pool_stale(engine)
            after_stale = await held.take(engine)
            assert held.keep(await engine.connect(), engine)
            other = await engine.connect()
            await other.invalidate()  # as a failed statement elsewhere does
            await other.close()
            after_invalidate = await held.take(engine)
            # Released for good: nothing more is kept.
            await held.release(close=True)
            last = await engine.connect()
            refused = not held.keep(last, engine)
            await last.close()
            return (
                fresh is not None and untouched,
                after_stale is None,
                after_invalidate is None,
                used_up is None,
                refused,
                engine.sync_engine.pool.checkedout(),
            )
        finally:
            await engine.dispose()
            await other_engine.dispose()

    assert asyncio.run(run()) == (True, True, True, True, True, 0)


def test_a_runlog_fields_reads_check_out_anew_once_the_pool_has_found_a_dead_one(tables: Backend) -> None:
    """Within one_connection, a read after a connection was thrown away elsewhere does not reuse it."""
    tables.create_tables()
    tables.execute("INSERT INTO event_run_log (run_id, kind, at) VALUES (7, 'note', '2026-03-01 12:00:00')")

    async def run() -> tuple[int, int, int]:
        engine = create_engine(tables.settings())
        checkouts: list[Any] = []
        sa.event.listen(engine.sync_engine, "checkout", lambda *args: checkouts.append(1))

        async def read() -> None:
            page = await store.read_page(engine, run_id=7, kinds=None, limit=5, after=None)
            assert len(page.lines) == 1

        try:
            async with store.one_connection(engine):
                await read()
                await read()  # on the connection the first kept
                kept = len(checkouts)
                other = await engine.connect()
                await other.invalidate()  # as a failed statement elsewhere does
                await other.close()
                after_invalidate = len(checkouts)
                await read()
                return kept, len(checkouts) - after_invalidate, engine.sync_engine.pool.checkedout()
        finally:
            await engine.dispose()

    kept, anew, _ = asyncio.run(run())
    assert kept == 1
    assert anew == 1


def test_once_one_read_meets_a_closed_connection_the_pools_others_are_replaced(mariadb: Backend) -> None:
    """The server closed every pooled connection (a restart, KILL): one read retries, then writes all land.

    SQLAlchemy invalidates the pool on the first disconnect it meets; without that, each write
    after the read would meet a dead connection.
    """
    mariadb.create_tables()

    async def run() -> tuple[list[Any], int]:
        engine = create_engine(mariadb.settings(), writes=True)
        try:
            pooled = [await engine.connect() for _ in range(3)]
            ids = []
            for connection in pooled:
                ids.append((await connection.exec_driver_sql("SELECT CONNECTION_ID()")).scalar())
            for connection in pooled:
                await connection.close()
            for thread in ids:
                mariadb.execute(f"KILL {int(thread)}")
            rows = await read_rows(engine, sa.select(sa.literal_column("1")))
            loop = asyncio.get_running_loop()
            for _ in range(3):
                await store.insert_lines(
                    engine, [store.NewLine(run_id=7, kind="note")], deadline=loop.time() + 5
                )
            return list(rows), 3
        finally:
            await engine.dispose()

    rows, writes = asyncio.run(run())
    assert [tuple(row) for row in rows] == [(1,)]
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log WHERE run_id = 7") == writes
