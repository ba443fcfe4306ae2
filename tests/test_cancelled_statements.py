"""A statement cancelled mid-flight (its deadline) never leaves its connection to the next caller unfit.

A SQLite read is interrupted in the database, and its connection kept; any other is thrown away.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gql.edge.app import create_app
from gql.store import connections
from gql.store.connections import read_rows
from gql.store.db import create_engine, pool_generation, transaction

from .conftest import Backend
from .faultproxy import FaultProxy

# Each runs well past the 0.05 s deadline the tests give it.
SLOW = {
    "mariadb": "SELECT SLEEP(5)",
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
    "SELECT COUNT(*) FROM c",
}

BUSY = "SELECT BENCHMARK(2000000000, MD5('runlog'))"  # minutes of CPU, unless killed
STILL_RUNNING = (
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
    "WHERE DB = DATABASE() AND INFO LIKE 'SELECT BENCH%' AND COMMAND <> 'Killed'"
)


async def _read(engine: AsyncEngine, sql: str) -> None:
    await read_rows(engine, text(sql))  # on MariaDB, on the driver's own connection


async def _in_transaction(engine: AsyncEngine, sql: str) -> None:
    async with transaction(engine, "READ COMMITTED") as conn:
        await conn.execute(text(sql))


def _checked_out(engine: AsyncEngine) -> list[Any]:
    """The driver connection of each checkout from now on, in order."""
    seen: list[Any] = []
    event.listen(
        engine.sync_engine, "checkout", lambda dbapi, _record, _proxy: seen.append(dbapi.driver_connection)
    )
    return seen


async def _next_checkouts_are_fresh(engine: AsyncEngine, cancelled: Any, seen: list[Any]) -> None:
    for _ in range(3):
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
        assert seen[-1] is not cancelled


async def _cut_off(engine: AsyncEngine, read: Awaitable[Any], *, after: str, seconds: float) -> None:
    """Await `read`, cut off by a deadline `seconds` after `engine`'s next `after` event."""
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as deadline:
            loop = asyncio.get_running_loop()
            event.listen(
                engine.sync_engine, after, lambda *_: deadline.reschedule(loop.time() + seconds), once=True
            )
            await read


@pytest.mark.parametrize("run", [_read, _in_transaction], ids=["read", "transaction"])
def test_a_statement_cancelled_at_its_deadline_leaves_its_connection_to_no_one(
    tables: Backend, run: Callable[[AsyncEngine, str], Awaitable[None]]
) -> None:
    async def main() -> None:
        engine = create_engine(tables.settings(pool_size=1))
        seen = _checked_out(engine)
        try:
            generation = pool_generation(engine)
            # The deadline runs from the checkout: connecting first may take longer on a loaded machine.
            await _cut_off(engine, run(engine, SLOW[tables.name]), after="checkout", seconds=0.05)
            cancelled = seen[-1]
            if tables.name == "sqlite" and run is _read:
                # Interrupted in the database (store.connections): the connection is fit for the next.
                async with engine.connect() as conn:
                    assert (await conn.execute(text("SELECT 1"))).scalar() == 1
                assert seen[-1] is cancelled
                return
            await _next_checkouts_are_fresh(engine, cancelled, seen)
            assert pool_generation(engine) > generation  # the pool threw it away
        finally:
            await engine.dispose()

    asyncio.run(main())


@pytest.mark.mariadb
def test_a_connection_cancelled_while_it_set_its_isolation_level_is_not_handed_out_again(
    mariadb: Backend,
) -> None:
    """The first round trip of `db.transaction` (SET autocommit, isolation) hangs, and the deadline cuts it.

    Before, that connection went back to the pool closed, and the next caller
    failed on it: "InterfaceError: Cancelled during execution".
    """
    mariadb.create_tables()
    with FaultProxy("127.0.0.1", sa.make_url(mariadb.url).port or 3306) as proxy:
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)

        async def main() -> None:
            engine = create_engine(
                mariadb.settings(database_url=url.render_as_string(hide_password=False), pool_size=1)
            )
            seen = _checked_out(engine)
            try:
                async with engine.connect() as conn:  # the pool's one connection, open
                    await conn.execute(text("SELECT 1"))
                generation = pool_generation(engine)
                proxy.hang()
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.3), transaction(engine, "READ COMMITTED"):
                        pass
                proxy.recover()
                await _next_checkouts_are_fresh(engine, seen[-1], seen)
                assert pool_generation(engine) > generation
            finally:
                await engine.dispose()

        asyncio.run(main())


@pytest.mark.mariadb
# A killed or thrown-away aiomysql connection may be left to the collector after the loop has
# closed, and Python warns about its socket: collected here (below), so the warning is this
# test's, and ignored: what the test asserts is that the statement is gone at the server.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_read_cancelled_mid_statement_is_killed_at_the_server(mariadb: Backend) -> None:
    """Closing its socket does not stop a statement that never looks at it (a scan, BENCHMARK): KILL does."""

    async def main() -> None:
        engine = create_engine(mariadb.settings(pool_size=1))
        try:
            await _cut_off(engine, read_rows(engine, text(BUSY)), after="before_cursor_execute", seconds=0.2)
            await connections.kills_sent()  # each once answered
            assert mariadb.scalar(STILL_RUNNING) == 0
        finally:
            await engine.dispose()

    asyncio.run(main())
    gc.collect()


@pytest.mark.mariadb
# As above: the cancelled read's own connection may be left to the collector.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_read_cancelled_as_the_service_stops_is_killed_before_it_has_stopped(mariadb: Backend) -> None:
    """The service's end waits for the KILL it is sending: none is cut off with the event loop."""
    mariadb.create_tables()
    app = create_app(mariadb.settings())

    async def main() -> None:
        async with app.router.lifespan_context(app) as state:
            engine = state["engine"]
            await _cut_off(engine, read_rows(engine, text(BUSY)), after="before_cursor_execute", seconds=0.2)
            # The service stops now, with the read's KILL on its way.

    try:
        asyncio.run(main())
        assert mariadb.scalar(STILL_RUNNING) == 0
    finally:
        for (thread_id,) in mariadb.rows(STILL_RUNNING.replace("COUNT(*)", "ID")):
            mariadb.execute(f"KILL {int(thread_id)}")  # not left burning a core when this fails
    gc.collect()
