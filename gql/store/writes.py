"""Writing lines and their words: grouped INSERTs and keyed writes, each by its deadline; forgetting keys."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    TextClause,
    bindparam,
    delete,
    select,
    text,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .. import metrics
from . import connections
from .connections import HeldConnection
from .db import SQLITE_AT_ORDER, SQLITE_BUSY_TIMEOUT, event_run_log, event_run_log_keys, pool_state
from .errors import (
    KeyReused,
    NotStored,
    OutcomeUnknown,
    answered_by_database,
    is_conflict,
    is_unavailable,
    one_line_reason,
)
from .statements import rows_insert_sql
from .values import NewLine, utc_now_millis
from .words import Send, keep_words

log = logging.getLogger("gql.store")

_l = event_run_log

# Least time worth starting a statement with: with less left, a line is not sent at all.
MIN_STATEMENT_SECONDS = 0.05
# How long past its deadline a line's caller waits for the answer: the bound when the database stops.
ANSWER_GRACE_SECONDS = 1.0


def _bound(engine: AsyncEngine, seconds: float) -> str | None:
    """MariaDB's statement bound for `seconds` left, in tenths (rounded down: never past the deadline)."""
    if not getattr(engine.dialect, "is_mariadb", False):
        return None
    return f"{max(int(seconds * 10) / 10, MIN_STATEMENT_SECONDS):.2f}"


_COLUMNS = ("run_id", "step_id", "kind", "phase", "detail", "at")
# The text SQLAlchemy's DateTime stores on SQLite, which a driver-level statement is given.
_SQLITE_AT = "%Y-%m-%d %H:%M:%S.%f"


async def _store_lines(send: Send, engine: AsyncEngine, lines: Sequence[NewLine], deadline: float) -> None:
    """INSERT `lines`, stamped now, then their words (store/words.py), on `send`'s open transaction.

    Each statement is bounded to what is left of `deadline` (see `_bound`).
    """
    loop = asyncio.get_running_loop()
    sqlite = engine.dialect.name == "sqlite"
    at = utc_now_millis()
    stamp = at.strftime(_SQLITE_AT) if sqlite else at
    values = [v for ln in lines for v in (ln.run_id, ln.step_id, ln.kind, ln.phase, ln.detail, stamp)]
    mark = "?" if sqlite else "%s"
    # Each line's id and `at` as reads order it: the words' key.
    returning = f"id, {SQLITE_AT_ORDER}" if sqlite else "id, at"
    bound = _bound(engine, deadline - loop.time())
    returned = await send(rows_insert_sql(_l.name, _COLUMNS, len(lines), mark, bound, returning), values)
    await keep_words(send, lines, returned, mark=mark, bound=_bound(engine, deadline - loop.time()))


def _sending(conn: AsyncConnection) -> Send:
    """`Send` on a SQLAlchemy connection: the statement as the driver takes it."""

    async def send(sql: str, values: list[Any]) -> Sequence[Any]:
        result = await conn.exec_driver_sql(sql, tuple(values))
        return result.all() if result.returns_rows else ()

    return send


@dataclass
class _Progress:
    """How far a write got: what its failure means depends on it."""

    sent: bool = False  # a statement of it reached the driver
    committing: bool = False  # its COMMIT was sent
    done: bool = False  # the database answered that it was stored


async def insert_lines(
    engine: AsyncEngine, lines: Sequence[NewLine], *, deadline: float, held: HeldConnection | None = None
) -> None:
    """Store `lines`, stamped with now, and their words in one transaction, ended by `deadline` (loop time).

    Raises NotStored or OutcomeUnknown. With `held`, the statements go on the connection it keeps (MariaDB).
    On MariaDB `engine` is the writes' pool (`create_engine(..., writes=True)`), whose connections
    do not autocommit; on another pool the lines and their words would not be one transaction.
    """
    _require_writes_pool(engine)
    if engine.dialect.name != "sqlite":
        await _retrying_conflicts(deadline, functools.partial(_insert_once, engine, lines, deadline, held))
        return
    run = functools.partial(_run_insert, lines, deadline)
    await _retrying_conflicts(deadline, functools.partial(_bounded_once, engine, deadline, run))


def _require_writes_pool(engine: AsyncEngine) -> None:
    if engine.dialect.name != "sqlite" and not pool_state(engine).writes:
        raise ValueError("a write on MariaDB needs the writes' pool: create_engine(..., writes=True)")


async def _insert_once(
    engine: AsyncEngine, lines: Sequence[NewLine], deadline: float, held: HeldConnection | None
) -> None:
    """`_bounded_once` for `insert_lines` on MariaDB: on `held`'s connection, one transaction, no BEGIN."""
    # The writes' pool does not autocommit (db.py): the first INSERT opens the transaction at the
    # database, no BEGIN is sent, and SQLAlchemy's commit (the driver's) ends it.
    loop = asyncio.get_running_loop()
    progress = _Progress()
    try:
        async with (
            asyncio.timeout_at(deadline + ANSWER_GRACE_SECONDS),
            connections.connection(engine, held, checkout_by=deadline) as conn,
        ):
            if deadline - loop.time() < MIN_STATEMENT_SECONDS:
                raise NotStored("the line's deadline came before a database connection was free")
            progress.sent = True
            try:
                await _store_lines(_sending(conn), engine, lines, deadline)
                progress.committing = True
                await conn.commit()
            except BaseException:
                await conn.invalidate()  # never pooled in a transaction
                raise
            progress.done = True
    except Exception as exc:
        _account(exc, progress, engine.dialect.name)


async def _run_insert(
    lines: Sequence[NewLine], deadline: float, conn: AsyncConnection, _seconds: float, progress: _Progress
) -> None:
    progress.sent = True
    await _store_lines(_sending(conn), conn.engine, lines, deadline)
    progress.committing = True
    await conn.commit()
    progress.done = True


async def insert_keyed(
    engine: AsyncEngine,
    line: NewLine,
    *,
    key_digest: str,
    line_digest: str,
    also_matches: str | None = None,
    deadline: float,
) -> bool:
    """Store `line` under an idempotency key, in one transaction; False when the key already stored it.

    A stored `also_matches` digest counts as this line too. Raises KeyReused, NotStored or OutcomeUnknown.
    On MariaDB `engine` is the writes' pool, as for `insert_lines`.
    """
    _require_writes_pool(engine)
    keys = event_run_log_keys
    outcome: list[bool] = []

    async def run(conn: AsyncConnection, seconds: float, progress: _Progress) -> None:
        now = utc_now_millis()
        key_statement = _key_text(_bound(conn.engine, seconds))
        progress.sent = True
        try:
            # The key first: a second writer with the same key waits here on
            # the first one's row lock, then finds the key once it commits.
            await conn.execute(key_statement, {"r": line.run_id, "k": key_digest, "l": line_digest, "c": now})
        except sa_exc.IntegrityError:
            await conn.rollback()
            stored_digest = (
                await conn.execute(
                    select(keys.c.line_digest).where(
                        keys.c.run_id == line.run_id, keys.c.key_digest == key_digest
                    )
                )
            ).scalar()
            await conn.rollback()
            if stored_digest is None:
                raise
            if stored_digest not in (line_digest, also_matches):
                raise KeyReused("its idempotency key already stored a different line of this run") from None
            outcome.append(False)
            progress.done = True
            return
        # Stamped now, not before the key: the key may have waited for another
        # writer's lock on it, and a line stamped before the wait would land
        # behind lines committed meanwhile, between two lines a reader paging
        # back from the newest has already read: no page would show it.
        await _store_lines(_sending(conn), conn.engine, [line], deadline)
        progress.committing = True
        await conn.commit()
        outcome.append(True)
        progress.done = True

    await _retrying_conflicts(deadline, functools.partial(_bounded_once, engine, deadline, run))
    return outcome[0]


@functools.lru_cache(maxsize=64)
def _key_text(bound: str | None) -> TextClause:
    keys = event_run_log_keys
    sql = (  # our own table name; every value is a bound parameter
        f"INSERT INTO {keys.name} (run_id, key_digest, line_digest, created_at) VALUES (:r, :k, :l, :c)"  # noqa: S608
    )
    if bound is not None:
        sql = f"SET STATEMENT max_statement_time={bound} FOR {sql}"
    return text(sql).bindparams(bindparam("c", type_=keys.c.created_at.type))


async def _retrying_conflicts(deadline: float, attempt: Callable[[], Awaitable[None]]) -> None:
    """`attempt`, tried again while a deadlock (1213) rolled it back whole and the deadline allows.

    On Galera, 1213 is also a certification conflict with a write through another node.
    """
    loop = asyncio.get_running_loop()
    retries = 0
    while True:
        try:
            return await attempt()
        except NotStored as exc:
            if not (exc.refused_by_database and is_conflict(exc.__cause__)):
                raise
            pause = random.uniform(0.002, 0.01) * 2 ** min(retries, 5)  # noqa: S311 (not a secret)
            if deadline - loop.time() - pause < 2 * MIN_STATEMENT_SECONDS:
                raise
        await asyncio.sleep(pause)
        retries += 1


async def _bounded_once(
    engine: AsyncEngine,
    deadline: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
) -> None:
    """Check out a connection by `deadline`, then `run` a write bounded to end by it, in one transaction.

    The pool's connections begin one by themselves: SQLite's driver before the first write, and
    the writes' pool on MariaDB (it does not autocommit) at the first statement.
    """
    loop = asyncio.get_running_loop()
    name = engine.dialect.name
    progress = _Progress()
    try:
        async with asyncio.timeout_at(deadline + ANSWER_GRACE_SECONDS):
            conn = engine.connect()
            try:
                async with asyncio.timeout_at(deadline):
                    await conn.start()
                seconds = deadline - loop.time()
                if seconds < MIN_STATEMENT_SECONDS:
                    raise NotStored("the line's deadline came before a database connection was free")
                if name == "sqlite":
                    await _sqlite_bounded(conn, seconds, run, progress)
                else:
                    await run(conn, seconds, progress)
            finally:
                if conn.sync_connection is not None:  # it was checked out
                    await conn.close()
    except Exception as exc:
        _account(exc, progress, name)


def _account(exc: Exception, progress: _Progress, dialect_name: str) -> None:
    """Raise what `exc` means for a write that got as far as `progress`; return if it was stored anyway."""
    if isinstance(exc, TimeoutError):
        if progress.done:
            _stored_anyway(exc)  # only handing the connection back was slow
            return
        if not progress.sent:
            raise NotStored("no database connection within the line's deadline") from None
        # A dropped connection rolls a transaction back until its COMMIT is sent.
        if not progress.committing:
            raise NotStored("the database did not answer before the commit; nothing was committed") from None
        raise OutcomeUnknown("the database did not answer the statement in time") from None
    if isinstance(exc, NotStored | OutcomeUnknown | KeyReused):
        raise exc
    if progress.done:
        _stored_anyway(exc)
        return
    if not progress.sent:
        raise NotStored(one_line_reason(exc)) from exc
    if answered_by_database(exc, dialect_name) or not progress.committing:
        raise NotStored(
            one_line_reason(exc), refused_by_database=True, transient=is_unavailable(exc)
        ) from exc
    raise OutcomeUnknown(one_line_reason(exc)) from exc


def _stored_anyway(exc: Exception) -> None:
    metrics.swallowed("store.after_write")
    log.warning("a write was stored; what failed after it is not its caller's: %s", one_line_reason(exc))


async def _sqlite_bounded(
    conn: AsyncConnection,
    seconds: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
    progress: _Progress,
) -> None:
    """Run `run` with SQLite's busy timeout set to `seconds`, then put the connection's back."""
    # The busy handler waits in aiosqlite's thread, out of asyncio timeouts' reach. The one to
    # put back is the one the connection was opened with (db.py), known without a round trip.
    before = conn.info[SQLITE_BUSY_TIMEOUT]
    await conn.exec_driver_sql(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 1)}")
    try:
        await run(conn, seconds, progress)
    finally:
        try:
            await conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(before or 0)}")
        except Exception as exc:  # a connection that broke is thrown away anyway
            metrics.swallowed("store.busy_timeout")
            log.warning("restoring SQLite's busy_timeout failed: %s", one_line_reason(exc))


async def forget_keys(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> int:
    """Delete at most `limit` idempotency keys stored before `before`; answer how many."""
    keys = event_run_log_keys
    async with engine.begin() as conn:
        found = (
            await conn.execute(
                select(keys.c.run_id, keys.c.key_digest).where(keys.c.created_at < before).limit(limit)
            )
        ).all()
        for run_id, key_digest in found:
            await conn.execute(delete(keys).where(keys.c.run_id == run_id, keys.c.key_digest == key_digest))
    return len(found)


async def detail_capacity(engine: AsyncEngine) -> int | None:
    """The most bytes the `detail` column holds (an older table's may be TEXT); None for SQLite's no limit."""
    if engine.dialect.name == "sqlite":
        return None
    async with engine.connect() as conn:
        octets = (
            await conn.execute(
                text(
                    "SELECT CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t AND COLUMN_NAME = 'detail'"
                ),
                {"t": _l.name},
            )
        ).scalar()
    return None if octets is None else int(octets)
