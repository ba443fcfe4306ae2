"""Pooled connections: reads on the driver's own connection, and holding one connection across calls."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    Executable,
    Select,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from .. import tracing
from ..db import (
    mark_pool_stale,
    pool_generation,
)


async def read_rows(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None = None
) -> Sequence[Any]:
    """The rows of one read, retried once on a connection the server had closed.

    The pool does not ping a connection before handing it out (db.py), so a
    connection closed by the server since its last use (wait_timeout, a
    restart, KILL) fails on first use. The pool's connections are then marked
    stale (as SQLAlchemy does on a disconnect it sees); a read changes nothing,
    so it is sent again, once, on a fresh one. Any other failure is the
    caller's to handle.
    """
    raw = None
    direct, spans = direct_path(engine)
    if direct:
        raw = _raw_statement(engine, statement, values)
    try:
        if raw is not None:
            return await _read_raw(engine, raw, values, spans)
        async with engine.connect() as conn:
            return (await conn.execute(statement, values)).all()
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    if raw is not None:
        return await _read_raw(engine, raw, values, spans)
    async with engine.connect() as conn:
        return (await conn.execute(statement, values)).all()


def direct_path(engine: AsyncEngine) -> tuple[bool, tracing.SqlSpans | None]:
    """Whether statements may go to the driver directly, past SQLAlchemy, and the spans to make of them.

    A listener to the statements (a test counting round trips) sees them only
    through SQLAlchemy's execution: it keeps them. The OpenTelemetry tracer
    alone does not (gql/tracing.py): the direct path makes its spans.
    `dispatch` is SQLAlchemy's event registry; no public call says whether it
    is empty.
    """
    if engine.dialect.name == "sqlite":
        return False, None
    if not engine.sync_engine.dispatch.before_cursor_execute:
        return True, None
    spans = tracing.direct_spans(engine.sync_engine)
    return spans is not None, spans


class _RawStatement(NamedTuple):
    sql: str
    # Where each positional parameter comes from: a value's name, and its
    # index when the value is an expanded list (`IN (...)`).
    sources: tuple[tuple[str, int | None], ...]


def _raw_statement(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None
) -> _RawStatement | None:
    """`statement` as the driver's SQL for these values' shape, or None where it needs SQLAlchemy."""
    # Each value's name, and a list's length: `IN (...)` is written out per length.
    shape = tuple((k, len(v) if type(v) is list else -1) for k, v in values.items()) if values else ()
    return _compiled_raw(engine.sync_engine.dialect, statement, shape)


@functools.lru_cache(maxsize=1024)
def _compiled_raw(
    dialect: Any, statement: Executable, shape: tuple[tuple[str, int], ...]
) -> _RawStatement | None:
    """Compile once per statement and list sizes: what SQLAlchemy would send, with no types to apply.

    Only for statements whose parameters and columns need no conversion by
    SQLAlchemy (none on MariaDB for what the reads select); anything else
    keeps SQLAlchemy's execution.
    """
    sample = {name: [0] * size if size >= 0 else None for name, size in shape}
    bound: Any = statement.params(sample) if sample and isinstance(statement, Select) else statement
    compiled = bound.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    if dialect.paramstyle != "format":
        return None
    for bind in compiled.binds.values():
        if bind.type.bind_processor(dialect) is not None:
            return None
    if isinstance(statement, Select):
        for column in statement.selected_columns:
            if column.type.result_processor(dialect, None) is not None:
                return None
    sources: list[tuple[str, int | None]] = []
    names = {name for name, _ in shape}
    lists = {name for name, size in shape if size >= 0}
    for name in compiled.positiontup or ():
        base, _, index = name.rpartition("_")
        if name not in lists and base in lists and index.isdigit():
            sources.append((base, int(index) - 1))
        elif name in names:
            sources.append((name, None))
        else:
            # A value the statement holds itself (a literal such as
            # COALESCE's 0), not one of `values`: SQLAlchemy binds it.
            return None
    return _RawStatement(compiled.string, tuple(sources))


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


class _Held:
    """The pooled connection the reads of one engine take in turn, within `one_connection`."""

    __slots__ = ("busy", "done", "engine", "pooled")

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.pooled: Any = None
        self.busy = False  # a read is on it: another read (another task) takes its own
        self.done = False  # `one_connection` has ended: a read still on it puts it back


_held: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("store_held", default=None)


class one_connection:  # used as a context manager, named as one
    """Within it, this task's direct reads of `engine` take one pooled connection, put back at its end.

    A page and its blocking runs are two reads: one checkout and return
    instead of two bought 1.045 to 1.061x less CPU per 50-line RunLog page
    (one process, 8 clients, alternating rounds with and without, two
    runs on a loaded machine). Only
    what `_read_raw` runs shares it, one read at a time (a read while
    another is on it takes its own); a failed or cancelled read leaves it, as
    it would a connection of its own, and the next read takes a fresh one.
    Not for a call that waits between its reads (the long poll): the
    connection would be held from the pool meanwhile.
    """

    __slots__ = ("_held", "_token")

    def __init__(self, engine: AsyncEngine) -> None:
        self._held = _Held(engine)

    async def __aenter__(self) -> None:
        self._token = _held.set(self._held)

    async def __aexit__(self, *_: object) -> None:
        _held.reset(self._token)
        held = self._held
        held.done = True
        pooled, held.pooled = held.pooled, None
        if pooled is not None and not held.busy:
            await greenlet_spawn(pooled.close)


async def _read_raw(
    engine: AsyncEngine, raw: _RawStatement, values: dict[str, Any] | None, spans: tracing.SqlSpans | None
) -> Sequence[Any]:
    """Run `raw` on a pooled aiomysql connection, taken from the pool as the driver's own.

    Buys 1.07 to 1.10x less CPU per 50-line RunLog page (SQLAlchemy's
    per-statement execution and its greenlet adapter skipped), measured as
    time.process_time over 2,000 shipped RunLog requests, 8 at a time,
    through the ASGI app on MariaDB (three alternating runs). The connection
    is the pool's (`AsyncEngine.raw_connection`), not an `AsyncConnection`
    around it: a 50-line page's read and its blocking runs' read took 3.37 ms
    of CPU through `engine.connect()`, 2.93 ms this way (median of 12
    alternating rounds of 300, in one process, on a loaded machine: the
    ratio, not the figures). What SQLAlchemy would do on a
    failure is kept: a disconnect invalidates the connection and marks the
    pool's others stale, any failure is raised as SQLAlchemy's DBAPIError,
    and a connection left mid-statement (cancelled by the read's timeout) is
    thrown away.
    """
    params = (
        [values[name] if index is None else values[name][index] for name, index in raw.sources]
        if values
        else None
    )
    dialect = engine.dialect
    held = _held.get()
    if held is not None and (held.engine is not engine or held.busy or held.done):
        held = None  # another engine's (a replica's), or on another read: a connection of its own
    pooled = held.pooled if held is not None and held.pooled is not None else await raw_checkout(engine)
    if held is not None:
        held.pooled = pooled
        held.busy = True
    # Back to the pool in a greenlet: a connection past the pool's size is
    # closed there, which the async driver does only inside one.
    put_back: Callable[[], None] = pooled.close
    kept = held is not None  # left held, for the next read, unless this one fails
    driver: Any = pooled.driver_connection
    try:
        if spans is not None:
            with spans.statement(raw.sql):
                return await fetch(driver, raw.sql, params)
        return await fetch(driver, raw.sql, params)
    except Exception as exc:
        kept = False
        if not isinstance(exc, dialect.loaded_dbapi.Error):
            put_back = functools.partial(pooled.invalidate, exc)
            raise
        disconnect = dialect.is_disconnect(exc, None, None)
        if disconnect:
            mark_pool_stale(engine)
            put_back = functools.partial(pooled.invalidate, exc)
        raise sa_exc.DBAPIError.instance(
            raw.sql, params, exc, dialect.loaded_dbapi.Error, connection_invalidated=disconnect
        ) from exc
    except BaseException:
        # Cancelled mid-statement: what is left on the wire is unknown.
        kept = False
        put_back = pooled.invalidate
        raise
    finally:
        if held is not None:
            held.busy = False
            if not kept or held.done:
                kept = False
                if held.pooled is pooled:
                    held.pooled = None
        if not kept:
            await greenlet_spawn(put_back)  # invalidate() checks the connection in as well


async def fetch(driver: Any, sql: str, params: list[Any] | None) -> Sequence[Any]:
    async with driver.cursor() as cursor:
        await cursor.execute(sql, params)
        return await cursor.fetchall()  # type: ignore[no-any-return]


class HeldConnection:
    """A pooled connection kept from one batch INSERT to the next (`insert_lines`' `held`).

    A writer that has another batch waiting when one is answered sends it on
    the same connection: a checkout and a return to the pool cost about 29 us
    of CPU (the pool's bookkeeping, each in a greenlet), a third of what the
    INSERT's own round trip costs. It is kept only after an INSERT it
    answered, and given back after MAX_HELD_BATCHES batches (so that
    pool_recycle applies at the next checkout), once the pool has thrown a
    connection away or been marked stale since (`db.pool_generation`: the
    pool would have replaced this one), and by `release`, which its owner
    calls when no batch is left to send; a failure gives it back (or throws
    it away) as before.
    """

    MAX_HELD_BATCHES = 100

    def __init__(self) -> None:
        self.pooled: Any = None
        self.batches = 0  # sent on the connection kept
        self.generation = 0  # the pool's, when it was kept

    async def take(self, engine: AsyncEngine) -> Any:
        """The connection kept, now the caller's; None when there is none to use."""
        pooled, self.pooled = self.pooled, None
        if pooled is not None and (
            self.batches >= self.MAX_HELD_BATCHES or self.generation != pool_generation(engine)
        ):
            await self.release(pooled)
            return None
        return pooled

    def keep(self, pooled: Any, engine: AsyncEngine) -> None:
        """Keep `pooled`, which has just answered a batch, for the next one."""
        self.generation = pool_generation(engine)  # known good now
        self.pooled = pooled
        self.batches += 1

    async def release(self, pooled: Any = None) -> None:
        """Give the connection kept (or `pooled`) back to the pool."""
        pooled = pooled or self.pooled
        self.pooled = None
        self.batches = 0
        if pooled is not None:
            await greenlet_spawn(pooled.close)
