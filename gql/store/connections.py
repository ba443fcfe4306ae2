"""Pooled connections: reads on the driver's own connection, and holding one connection across calls."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import BindParameter, Executable, NullPool, Select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql.visitors import iterate

from .. import tracing
from ..compat.sqlalchemy import greenlet_spawn
from ..db import (
    mark_pool_stale,
    pool_generation,
    pool_state,
)

log = logging.getLogger("gql.store")


async def read_rows(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None = None
) -> Sequence[Any]:
    """The rows of one read, retried once on a connection the server had closed."""
    # The pool does not ping before checkout (db.py), and a read changes nothing.
    raw = None
    direct, spans = direct_path(engine)
    if direct:
        raw = _raw_statement(engine, statement, values)
    try:
        if raw is not None:
            return await _read_raw(engine, raw, values, spans)
        return await _read(engine, statement, values)
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    if raw is not None:
        return await _read_raw(engine, raw, values, spans)
    return await _read(engine, statement, values)


async def _read(engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None) -> Sequence[Any]:
    """The rows of `statement`, through SQLAlchemy; a SQLite read cancelled is interrupted in the database."""
    async with engine.connect() as conn:
        if engine.dialect.name != "sqlite":
            return (await conn.execute(statement, values)).all()
        # aiosqlite runs it on a thread of its own, which a cancelled await leaves running,
        # with the connection: it is interrupted there, and the connection goes back fit for use.
        driver: Any = (await conn.get_raw_connection()).driver_connection
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


def direct_path(engine: AsyncEngine) -> tuple[bool, tracing.SqlSpans | None]:
    """Whether statements go to the driver directly, past SQLAlchemy, and the spans to make of them."""
    if engine.dialect.name == "sqlite":
        return False, None
    return True, pool_state(engine).spans


class _Slot(NamedTuple):
    """A sample value standing for `values[name]`, or `values[name][item]` of a list."""

    name: str
    item: int | None


class _RawStatement(NamedTuple):
    sql: str
    sources: tuple[_Slot, ...]  # where each positional parameter of `sql` comes from, in order

    def parameters(self, values: dict[str, Any] | None) -> list[Any] | None:
        """The driver's parameters for `sql`, from the values the statement was given."""
        if not values:
            return None
        return [values[name] if item is None else values[name][item] for name, item in self.sources]


def _raw_statement(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None
) -> _RawStatement | None:
    """`statement` as the driver's SQL for these values' shape, or None where it needs SQLAlchemy."""
    # Each value's name, and a list's length: `IN (...)` is written out per length.
    shape = tuple((k, len(v) if type(v) is list else -1) for k, v in values.items()) if values else ()
    return _compiled_raw(engine.sync_engine.dialect, statement, shape)


@functools.lru_cache(maxsize=1024)
def _compiled_raw(dialect: Any, statement: Any, shape: tuple[tuple[str, int], ...]) -> _RawStatement | None:
    """What SQLAlchemy would send for `statement`, or None where a type needs converting."""
    if dialect.paramstyle != "format":
        return None
    for element in iterate(statement):
        if isinstance(element, BindParameter) and element.type.bind_processor(dialect) is not None:
            return None
    if isinstance(statement, Select):
        for column in statement.selected_columns:
            if column.type.result_processor(dialect, None) is not None:
                return None
    # Each value stood for by a slot: the expanded statement's parameters, in order, name them.
    sample = {
        name: [_Slot(name, item) for item in range(size)] if size >= 0 else _Slot(name, None)
        for name, size in shape
    }
    expanded = statement.compile(dialect=dialect).construct_expanded_state(sample)
    sources = expanded.positional_parameters or ()
    if not all(type(source) is _Slot for source in sources):
        # A value the statement holds itself (a literal such as
        # COALESCE's 0), not one of `values`: SQLAlchemy binds it.
        return None
    return _RawStatement(expanded.statement, tuple(sources))


async def raw_checkout(engine: AsyncEngine) -> Any:
    """The pool's own connection (`AsyncEngine.raw_connection`), failing as engine.connect() fails."""
    dialect = engine.dialect
    try:
        return await engine.raw_connection()
    except dialect.loaded_dbapi.Error as exc:
        raise sa_exc.DBAPIError.instance(
            None,
            None,
            exc,
            dialect.loaded_dbapi.Error,
            connection_invalidated=dialect.is_disconnect(exc, None, None),
        ) from exc


class HeldConnection:
    """One pooled connection kept from one statement to the next, saving a checkout and a return.

    `keep` it after a statement it answered; `take` hands it out again only for the same engine,
    in the same pool generation (`db.pool_generation`), for at most MAX_USES statements.
    """

    MAX_USES = 100  # so that pool_recycle applies at the next checkout

    __slots__ = ("closed", "engine", "generation", "only", "pooled", "uses")

    def __init__(self, only: AsyncEngine | None = None) -> None:
        self.pooled: Any = None
        self.only = only  # the one engine whose connections are kept, when set
        self.engine: AsyncEngine | None = None
        self.uses = 0  # statements answered on the connection kept
        self.generation = 0  # the pool's, when it was kept
        self.closed = False

    def holds(self) -> bool:
        return self.pooled is not None

    async def take(self, engine: AsyncEngine) -> Any:
        """The connection kept, now the caller's alone; None when there is none to use."""
        if self.pooled is None or self.engine is not engine:
            return None  # none, or another engine's (a replica's): left for its own reads
        pooled, self.pooled = self.pooled, None
        if self.uses >= self.MAX_USES or self.generation != pool_generation(engine):
            self.uses = 0
            await greenlet_spawn(pooled.close)
            return None
        return pooled

    def keep(self, pooled: Any, engine: AsyncEngine) -> bool:
        """Keep `pooled`, which has just answered a statement; False when the caller is to put it back."""
        if self.closed or self.pooled is not None or (self.only is not None and engine is not self.only):
            return False
        if self.engine is not engine:
            self.engine, self.uses = engine, 0
        self.generation = pool_generation(engine)  # known good now
        self.pooled = pooled
        self.uses += 1
        return True

    async def release(self, *, close: bool = False) -> None:
        """Give the connection kept back to the pool; with `close`, keep none from here on."""
        pooled, self.pooled = self.pooled, None
        self.uses = 0
        self.closed = self.closed or close
        if pooled is not None:
            await greenlet_spawn(pooled.close)


_held: contextvars.ContextVar[HeldConnection | None] = contextvars.ContextVar("store_held", default=None)


class one_connection:  # used as a context manager, named as one
    """Within it, this task's direct reads of `engine` share one `HeldConnection`, given back at its end.

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


class on_driver:  # used as a context manager, named as one
    """A pooled connection for statements sent to the driver directly, given back as SQLAlchemy would.

    `async with on_driver(engine, spans, held) as on: rows = await on.fetch(sql, params)`.
    The connection comes from `held`, else from the pool, waited for until `checkout_by`
    (event loop time). A driver error leaves as SQLAlchemy's DBAPIError.
    """

    # A class, not contextlib's decorator, whose generator costs a write more CPU.
    __slots__ = (
        "answered",
        "checkout_by",
        "driver",
        "engine",
        "held",
        "in_transaction",
        "kill",
        "params",
        "pooled",
        "sending",
        "spans",
        "sql",
    )

    def __init__(
        self,
        engine: AsyncEngine,
        spans: tracing.SqlSpans | None,
        held: HeldConnection | None = None,
        *,
        checkout_by: float | None = None,
        kill: bool = False,
    ) -> None:
        self.engine = engine
        self.kill = kill  # a statement cancelled mid-flight is ended at the server too (reads)
        self.sending = False
        self.spans = spans
        self.held = held
        self.checkout_by = checkout_by
        self.sql: str | None = None  # the statement last sent, and its parameters
        self.params: list[Any] | None = None
        self.answered = False  # a statement of it has been answered
        # Set by its user between a BEGIN and the COMMIT's answer: a connection left so is never pooled.
        self.in_transaction = False

    async def __aenter__(self) -> on_driver:
        held = self.held
        pooled = None if held is None else await held.take(self.engine)
        if pooled is None:
            if self.checkout_by is None:
                pooled = await raw_checkout(self.engine)
            else:
                async with asyncio.timeout_at(self.checkout_by):
                    pooled = await raw_checkout(self.engine)
        self.pooled = pooled
        self.driver = pooled.driver_connection
        return self

    async def fetch(self, sql: str, params: list[Any] | None) -> Sequence[Any]:
        """Send `sql` and read its rows."""
        self.sql, self.params = sql, params
        self.sending = True
        if self.spans is None:
            rows = await fetch(self.driver, sql, params)
        else:
            with self.spans.statement(sql):
                rows = await fetch(self.driver, sql, params)
        self.sending = False
        self.answered = True
        return rows

    async def __aexit__(self, _kind: object, exc: BaseException | None, _tb: object) -> None:
        engine, pooled = self.engine, self.pooled
        # Back to the pool in a greenlet: a connection past the pool's size is
        # closed there, which the async driver does only inside one.
        put_back: Callable[[], None] | None = pooled.close
        try:
            if exc is None:
                if self.answered and self.held is not None and self.held.keep(pooled, engine):
                    put_back = None  # kept, for the next statement
                return
            dialect = engine.dialect
            if not isinstance(exc, dialect.loaded_dbapi.Error):
                # Cancelled or failed mid-statement: what is left on the wire is unknown.
                put_back = functools.partial(pooled.invalidate, exc if isinstance(exc, Exception) else None)
                if self.kill and self.sending:
                    # Closing the socket does not stop the server's statement (a scan, a lock wait).
                    kill_statement(engine, self.driver.thread_id())
                return
            disconnect = dialect.is_disconnect(exc, None, None)
            if disconnect:
                mark_pool_stale(engine)
            if disconnect or self.in_transaction:
                put_back = functools.partial(pooled.invalidate, exc)
            raise sa_exc.DBAPIError.instance(
                self.sql, self.params, exc, dialect.loaded_dbapi.Error, connection_invalidated=disconnect
            ) from exc
        finally:
            if put_back is not None:
                await greenlet_spawn(put_back)  # invalidate() checks the connection in as well


async def _read_raw(
    engine: AsyncEngine, raw: _RawStatement, values: dict[str, Any] | None, spans: tracing.SqlSpans | None
) -> Sequence[Any]:
    """Run `raw` on the driver directly, past SQLAlchemy's per-statement execution."""
    async with on_driver(engine, spans, _held.get(), kill=True) as on:
        return await on.fetch(raw.sql, raw.parameters(values))


KILL_TIMEOUT = 5.0  # seconds to connect and send the KILL
_killing: set[asyncio.Task[None]] = set()  # kept from the collector until done


def kill_statement(engine: AsyncEngine, thread_id: int) -> None:
    """End MariaDB connection `thread_id` and its statement, soon, on a connection outside the pool."""
    task = asyncio.get_running_loop().create_task(_kill(engine, thread_id), name=f"runlog-kill-{thread_id}")
    _killing.add(task)
    task.add_done_callback(_killing.discard)


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


async def fetch(driver: Any, sql: str, params: list[Any] | None) -> Sequence[Any]:
    async with driver.cursor() as cursor:
        await cursor.execute(sql, params)
        return await cursor.fetchall()  # type: ignore[no-any-return]
