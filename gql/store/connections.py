"""Pooled connections: reads retried once on a closed connection, and one connection held across calls."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import Executable, NullPool, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .db import pool_generation

log = logging.getLogger("gql.store")


async def read_rows(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None = None
) -> Sequence[Any]:
    """The rows of one read, retried once on a connection the server had closed."""
    # The pool does not ping before checkout (db.py), and a read changes nothing.
    try:
        return await _read(engine, statement, values)
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    return await _read(engine, statement, values)


async def _read(engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None) -> Sequence[Any]:
    """The rows of `statement`; a read cancelled mid-statement is ended in the database too."""
    async with connection(engine, _held.get()) as conn:
        driver: Any = (await conn.get_raw_connection()).driver_connection
        if engine.dialect.name != "sqlite":
            try:
                return (await conn.execute(statement, values)).all()
            except asyncio.CancelledError:
                # SQLAlchemy throws the connection away, but closing the socket does not
                # stop the server's statement (a scan, a lock wait).
                kill_statement(engine, driver.thread_id())
                raise
        # aiosqlite runs it on a thread of its own, which a cancelled await leaves running,
        # with the connection: it is interrupted there, and the connection goes back fit for use.
        reading = asyncio.ensure_future(conn.execute(statement, values))
        try:
            return (await asyncio.shield(reading)).all()
        except asyncio.CancelledError:
            while not reading.done():
                await driver.interrupt()  # a no-op between the statement's calls to the thread
                await asyncio.wait([reading], timeout=INTERRUPT_EVERY)
            reading.exception()  # "interrupted": seen, so that asyncio does not report it
            raise


INTERRUPT_EVERY = 0.05  # seconds between interrupts of a cancelled SQLite read until it ends


@asynccontextmanager
async def connection(
    engine: AsyncEngine, held: HeldConnection | None = None, *, checkout_by: float | None = None
) -> AsyncIterator[AsyncConnection]:
    """A connection of `engine`'s pool: `held`'s if it keeps one, else one checked out by `checkout_by`.

    `checkout_by` is event loop time. At the end it goes back to `held` when it answered without
    an error, else to the pool.
    """
    conn = None if held is None else await held.take(engine)
    if conn is None:
        conn = engine.connect()
        async with asyncio.timeout_at(checkout_by):
            await conn.start()
    try:
        yield conn
    except BaseException:
        await conn.close()  # SQLAlchemy has thrown it away already if it was left unfit
        raise
    if held is None or not held.keep(conn, engine):
        await conn.close()


class HeldConnection:
    """One pooled connection kept from one statement to the next, saving a checkout and a return.

    `keep` it after a statement it answered; `take` hands it out again only for the same engine,
    in the same pool generation (`db.pool_generation`), for at most MAX_USES statements.
    """

    MAX_USES = 100  # so that pool_recycle applies at the next checkout

    __slots__ = ("closed", "conn", "engine", "generation", "only", "uses")

    def __init__(self, only: AsyncEngine | None = None) -> None:
        self.conn: AsyncConnection | None = None
        self.only = only  # the one engine whose connections are kept, when set
        self.engine: AsyncEngine | None = None
        self.uses = 0  # statements answered on the connection kept
        self.generation = 0  # the pool's, when it was kept
        self.closed = False

    def holds(self) -> bool:
        return self.conn is not None

    async def take(self, engine: AsyncEngine) -> AsyncConnection | None:
        """The connection kept, now the caller's alone; None when there is none to use."""
        if self.conn is None or self.engine is not engine:
            return None  # none, or another engine's (a replica's): left for its own reads
        conn, self.conn = self.conn, None
        if self.uses >= self.MAX_USES or self.generation != pool_generation(engine):
            self.uses = 0
            await conn.close()
            return None
        return conn

    def keep(self, conn: AsyncConnection, engine: AsyncEngine) -> bool:
        """Keep `conn`, which has just answered a statement; False when the caller is to close it."""
        if self.closed or self.conn is not None or (self.only is not None and engine is not self.only):
            return False
        if self.engine is not engine:
            self.engine, self.uses = engine, 0
        self.generation = pool_generation(engine)  # known good now
        self.conn = conn
        self.uses += 1
        return True

    async def release(self, *, close: bool = False) -> None:
        """Give the connection kept back to the pool; with `close`, keep none from here on."""
        conn, self.conn = self.conn, None
        self.uses = 0
        self.closed = self.closed or close
        if conn is not None:
            await conn.close()


_held: contextvars.ContextVar[HeldConnection | None] = contextvars.ContextVar("store_held", default=None)


class one_connection:  # used as a context manager, named as one
    """Within it, this task's reads of `engine` share one `HeldConnection`, given back at its end.

    Not for a call that waits between its reads (the long poll): it would hold a connection meanwhile.
    """

    __slots__ = ("_held", "_token")

    def __init__(self, engine: AsyncEngine) -> None:
        self._held = HeldConnection(only=engine)

    async def __aenter__(self) -> None:
        self._token = _held.set(self._held)

    async def __aexit__(self, *_: object) -> None:
        _held.reset(self._token)
        await self._held.release(close=True)


KILL_TIMEOUT = 5.0  # seconds to connect and send the KILL
_killing: set[asyncio.Task[None]] = set()  # kept from the collector until done


def kill_statement(engine: AsyncEngine, thread_id: int) -> None:
    """End MariaDB connection `thread_id` and its statement, soon, on a connection outside the pool."""
    task = asyncio.get_running_loop().create_task(_kill(engine, thread_id), name=f"runlog-kill-{thread_id}")
    _killing.add(task)
    task.add_done_callback(_killing.discard)


async def kills_sent() -> None:
    """Wait for the KILLs this event loop is still sending (each ends within KILL_TIMEOUT).

    For a service's end, before its engines close: a KILL cut off there leaves its statement running
    at the server, and its connection to the collector.
    """
    loop = asyncio.get_running_loop()
    # _killing holds other loops' tasks too where one process runs several (the tests' apps).
    if sending := [task for task in _killing if task.get_loop() is loop]:
        await asyncio.wait(sending)


async def _kill(engine: AsyncEngine, thread_id: int) -> None:
    # Its own connection, not the pool's: the pool may be full of the readers being cancelled.
    killer = create_async_engine(
        engine.url, poolclass=NullPool, connect_args={"connect_timeout": int(KILL_TIMEOUT)}
    )
    try:
        async with asyncio.timeout(KILL_TIMEOUT), killer.connect() as conn:
            await conn.execute(text(f"KILL CONNECTION {int(thread_id)}"))
    except Exception as exc:
        orig = getattr(exc, "orig", exc)
        code = getattr(orig, "args", (None,))[:1]
        if code != (1094,):  # unknown thread: it had ended by itself
            log.warning("a cancelled read's statement (connection %d) was not killed: %s", thread_id, exc)
    finally:
        await killer.dispose()
