"""The run log's operations as plain async functions over an engine.

Each call takes its own connection from the pool: graphql-core resolves sibling
fields as concurrent tasks, and an SQLAlchemy connection must not be shared
between tasks. Nothing here knows about GraphQL.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Executable, Select, and_, bindparam, delete, func, or_, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .db import event_run_log, event_run_log_keys, event_runs, transaction
from .kinds import TERMINAL_STATUSES

READ_LIMIT_DEFAULT, READ_LIMIT_MAX = 500, 2000
PRUNE_LIMIT_DEFAULT, PRUNE_LIMIT_MAX = 5000, 50_000


class Line(NamedTuple):
    """One stored line, as stored: `kind` and `detail` are not interpreted here.

    A named tuple rather than a frozen dataclass: one is made for every line
    of every page, and a tuple is made in a third of the time.
    """

    id: int
    run_id: int
    step_id: int | None
    kind: str
    phase: int | None
    detail: str | None
    at: datetime.datetime  # aware, UTC


@dataclass(frozen=True, slots=True)
class NewLine:
    run_id: int
    kind: str
    step_id: int | None = None
    phase: int | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    lines: list[Line]
    has_next: bool

    @property
    def end_cursor(self) -> str | None:
        return encode_cursor(self.lines[-1]) if self.lines else None


@dataclass(frozen=True, slots=True)
class Cursor:
    at: datetime.datetime  # naive UTC, as stored
    id: int


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    status: str
    ended_at: datetime.datetime | None
    updated_at: datetime.datetime | None


class CursorError(ValueError):
    """An `after` value this service did not issue."""


def clamp_read_limit(limit: int | None) -> int:
    """Null or 0 means 500; anything else is clamped to 1..2000, as the seed does."""
    if not limit:
        return READ_LIMIT_DEFAULT
    return min(max(limit, 1), READ_LIMIT_MAX)


def clamp_prune_limit(limit: int | None) -> int:
    """Null or 0 means 5000; anything else is clamped to 1..50000."""
    if not limit:
        return PRUNE_LIMIT_DEFAULT
    return min(max(limit, 1), PRUNE_LIMIT_MAX)


def utc_now_millis() -> datetime.datetime:
    """Now, naive UTC, truncated to the millisecond the column keeps."""
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def as_naive_utc(value: datetime.datetime) -> datetime.datetime:
    """A datetime as the database holds it: UTC without an offset (naive is read as UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def encode_cursor(line: Line) -> str:
    at = as_naive_utc(line.at)
    raw = f"{at.isoformat(timespec='milliseconds')}|{line.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(value: str) -> Cursor:
    try:
        padded = value + "=" * (-len(value) % 4)
        at_text, id_text = base64.urlsafe_b64decode(padded).decode().split("|")
        return Cursor(at=datetime.datetime.fromisoformat(at_text), id=int(id_text))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CursorError(
            f"after={value!r} is not a cursor this service issued: pass a page's pageInfo.endCursor"
        ) from None


_l = event_run_log


def page_query(*, run_id: int, kinds: Sequence[str] | None, limit: int, after: Cursor | None) -> Select[Any]:
    """The one statement that reads a page (kinds must not be empty)."""
    query = (
        select(_l.c.id, _l.c.run_id, _l.c.step_id, _l.c.kind, _l.c.phase, _l.c.detail, _l.c.at)
        .where(_l.c.run_id == run_id)
        .order_by(_l.c.at.desc(), _l.c.id.desc())
        # One more than asked: its presence is what makes hasNextPage exact.
        .limit(limit + 1)
    )
    if kinds is not None:
        query = query.where(_l.c.kind.in_(sorted(set(kinds))))
    if after is not None:
        # `at <= x AND (at < x OR id < y)` rather than a row comparison: both
        # MariaDB and SQLite turn the first term into an index range.
        query = query.where(
            _l.c.at <= after.at,
            or_(_l.c.at < after.at, and_(_l.c.at == after.at, _l.c.id < after.id)),
        )
    return query


async def read_page(
    engine: AsyncEngine,
    *,
    run_id: int,
    kinds: Sequence[str] | None,
    limit: int,
    after: Cursor | None,
) -> Page:
    """One page of a run's lines, newest first by (at, id), in one query."""
    if kinds is not None and not kinds:
        return Page(lines=[], has_next=False)
    query = page_query(run_id=run_id, kinds=kinds, limit=limit, after=after)
    rows = await _read(engine, query)
    utc = datetime.UTC
    # Unpacked in the order page_query selects: by position is several times
    # cheaper than by name, on every line of every page.
    lines = [
        Line(line_id, run, step, kind, phase, detail, at.replace(tzinfo=utc))
        for line_id, run, step, kind, phase, detail, at in rows[:limit]
    ]
    return Page(lines=lines, has_next=len(rows) > limit)


async def _read(engine: AsyncEngine, statement: Executable) -> Sequence[Any]:
    """The rows of one read, retried once on a connection the server had closed.

    The pool does not ping a connection before handing it out (db.py), so a
    connection closed by the server since its last use (wait_timeout, a
    restart, KILL) fails on first use. SQLAlchemy sees the disconnect and
    invalidates the pool's connections; a read changes nothing, so it is sent
    again, once, on a fresh one. Any other failure is the caller's to handle.
    """
    try:
        async with engine.connect() as conn:
            return (await conn.execute(statement)).all()
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    async with engine.connect() as conn:
        return (await conn.execute(statement)).all()


# ── writing lines ────────────────────────────────────────────────────────────
# A write's answer must be exact: `true` once stored, `false` only when nothing
# was stored. So every failure below says which of three it is: the line was
# never sent (NotStored), the database answered with an error and the
# statement rolled back (NotStored, `refused_by_database`), or the statement
# was sent and no answer came back (OutcomeUnknown: it may have committed).

# Least time worth starting a statement with: a line with less left is not
# sent at all, since its caller could not wait for the commit.
MIN_STATEMENT_SECONDS = 0.05
# How long past a line's deadline its caller waits for an answer the database
# owes it. The statement itself is bounded on the server to end by the
# deadline; this covers the round trip and a slow commit, and is the one
# bound left when the database stops answering at all.
ANSWER_GRACE_SECONDS = 1.0


class NotStored(Exception):
    """Nothing of the line (or batch) was stored; `refused_by_database` when the database said no."""

    def __init__(self, reason: str, *, refused_by_database: bool = False, transient: bool = True) -> None:
        super().__init__(reason)
        self.refused_by_database = refused_by_database
        # A refusal about time or locks: trying the same lines again now would
        # only spend time the callers do not have.
        self.transient = transient


class OutcomeUnknown(Exception):
    """The statement was sent and no answer came back: the line may have been stored."""


class KeyReused(Exception):
    """An idempotency key already stored a different line of the same run."""


def _bound_text(count: int) -> str:
    rows = ", ".join(f"(:r{i}, :s{i}, :k{i}, :p{i}, :d{i}, :a{i})" for i in range(count))
    # Only our own table name and placeholders: every value is a bound parameter.
    return f"INSERT INTO {_l.name} (run_id, step_id, kind, phase, detail, at) VALUES {rows}"  # noqa: S608


def _insert(engine: AsyncEngine, lines: Sequence[NewLine], at: datetime.datetime, seconds: float) -> Any:
    """One multi-row INSERT, bounded on MariaDB's side to `seconds`.

    Written as text rather than `insert(table)` with a list: the driver would
    run a list as many statements, and MariaDB's `SET STATEMENT ... FOR`
    must come before the INSERT, where SQLAlchemy has no place for a prefix.
    `max_statement_time` ends the statement (error 1969, rolled back) when a
    lock or anything else holds it past the bound; measured here on MariaDB
    10.11 against `LOCK TABLES ... WRITE` and a row lock alike. SQLite's
    bound is its busy timeout, set around the statement (`_sqlite_bounded`).
    """
    sql = _bound_text(len(lines))
    if getattr(engine.dialect, "is_mariadb", False):
        sql = f"SET STATEMENT max_statement_time={seconds:.3f} FOR {sql}"
    params: dict[str, Any] = {}
    for i, line in enumerate(lines):
        params.update(
            {
                f"r{i}": line.run_id,
                f"s{i}": line.step_id,
                f"k{i}": line.kind,
                f"p{i}": line.phase,
                f"d{i}": line.detail,
                f"a{i}": at,
            }
        )
    at_type = _l.c.at.type
    statement = text(sql).bindparams(*(bindparam(f"a{i}", type_=at_type) for i in range(len(lines))))
    return statement, params


def answered_by_database(exc: BaseException, dialect_name: str) -> bool:
    """Whether `exc` is the database's own answer to a statement (so it rolled back).

    MySQL's client errors (2000 to 2999: lost connection, gone away) are the
    driver's, not the server's: the statement may have run. SQLite runs in the
    process, so every error it raises is its answer.
    """
    if not isinstance(exc, sa_exc.DBAPIError) or exc.connection_invalidated:
        return False
    if dialect_name == "sqlite":
        return True
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    code = args[0] if args else None
    return isinstance(code, int) and not 2000 <= code < 3000


@dataclass
class _Progress:
    """How far a write got: what its failure means depends on it."""

    sent: bool = False  # a statement of it reached the driver
    committing: bool = False  # its COMMIT was sent (a keyed write)
    done: bool = False  # the database answered that it was stored


async def insert_lines(engine: AsyncEngine, lines: Sequence[NewLine], *, deadline: float) -> None:
    """Store `lines` in one INSERT and one commit, in autocommit, all stamped with now.

    `deadline` is the event loop's time by which the statement must have
    ended. No statement is started with less than MIN_STATEMENT_SECONDS left;
    the database is told to end it by the deadline; the answer is awaited
    until ANSWER_GRACE_SECONDS past it. Raises NotStored or OutcomeUnknown.
    """

    async def run(conn: AsyncConnection, seconds: float, progress: _Progress) -> None:
        statement, params = _insert(conn.engine, lines, utc_now_millis(), seconds)
        progress.sent = True
        await conn.execute(statement, params)
        progress.done = True

    # Autocommit: the INSERT is its own transaction, one round trip, with no
    # BEGIN or COMMIT of its own.
    await _bounded(engine, deadline, run, isolation_level="AUTOCOMMIT")


async def insert_keyed(
    engine: AsyncEngine, line: NewLine, *, key_digest: str, line_digest: str, deadline: float
) -> bool:
    """Store `line` under an idempotency key; False when the key already stored this same line.

    The key and the line are written in one transaction, so either both are
    stored or neither: a retry after a lost answer finds the key and stores
    nothing. Raises KeyReused when the key stored a different line of this
    run, and NotStored or OutcomeUnknown as `insert_lines` does.
    """
    keys = event_run_log_keys
    outcome: list[bool] = []

    async def run(conn: AsyncConnection, seconds: float, progress: _Progress) -> None:
        now = utc_now_millis()
        key_sql = (  # our own table name; every value is a bound parameter
            f"INSERT INTO {keys.name} (run_id, key_digest, line_digest, created_at) VALUES (:r, :k, :l, :c)"  # noqa: S608
        )
        if getattr(conn.engine.dialect, "is_mariadb", False):
            key_sql = f"SET STATEMENT max_statement_time={seconds:.3f} FOR {key_sql}"
        key_statement = text(key_sql).bindparams(bindparam("c", type_=keys.c.created_at.type))
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
            if stored_digest != line_digest:
                raise KeyReused("its idempotency key already stored a different line of this run") from None
            outcome.append(False)
            progress.done = True
            return
        # The line's own bound is what is left of the deadline after the key.
        left = max(deadline - asyncio.get_running_loop().time(), MIN_STATEMENT_SECONDS)
        statement, params = _insert(conn.engine, [line], now, left)
        await conn.execute(statement, params)
        progress.committing = True
        await conn.commit()
        outcome.append(True)
        progress.done = True

    # Whatever the engine's default, the key and the line need one real
    # transaction: the database's own default level gives one.
    await _bounded(engine, deadline, run, isolation_level=None)
    return outcome[0]


async def _bounded(
    engine: AsyncEngine,
    deadline: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
    *,
    isolation_level: str | None,
) -> None:
    """Check out a connection by `deadline`, then `run` a write bounded to end by it.

    A connection not had by the deadline means nothing was sent. Once the
    write is sent, its answer is awaited ANSWER_GRACE_SECONDS past the
    deadline: the database was told to end the statement by the deadline, so
    only a database that stopped answering is cut off, and then the outcome
    is unknown (for a transaction, only once its COMMIT was sent: before
    that, a dropped connection rolls it back).
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
                    level = isolation_level or conn.default_isolation_level
                    # The statement's text carries its bound, so it is kept
                    # out of the compiled cache.
                    await conn.execution_options(
                        compiled_cache=None, **({"isolation_level": level} if level else {})
                    )
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
    except TimeoutError:
        if progress.done:
            return  # stored; only handing the connection back was slow
        if not progress.sent:
            raise NotStored("no database connection within the line's deadline") from None
        if isolation_level is None and not progress.committing:
            raise NotStored("the database did not answer before the commit; nothing was committed") from None
        raise OutcomeUnknown("the database did not answer the statement in time") from None
    except (NotStored, OutcomeUnknown, KeyReused):
        raise
    except Exception as exc:
        if progress.done:
            return
        if not progress.sent:
            raise NotStored(one_line_reason(exc)) from exc
        if answered_by_database(exc, name) or (isolation_level is None and not progress.committing):
            raise NotStored(
                one_line_reason(exc), refused_by_database=True, transient=is_unavailable(exc)
            ) from exc
        raise OutcomeUnknown(one_line_reason(exc)) from exc


async def _sqlite_bounded(
    conn: AsyncConnection,
    seconds: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
    progress: _Progress,
) -> None:
    """Run `run` with SQLite's busy timeout set to `seconds`, then put the connection's back.

    Another connection holding the write lock makes SQLite wait in its busy
    handler, in aiosqlite's thread, where no asyncio timeout reaches: the busy
    timeout is the one bound that ends that wait (SQLITE_BUSY, nothing stored).
    """
    before = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
    await conn.exec_driver_sql(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 1)}")
    try:
        await run(conn, seconds, progress)
    finally:
        with contextlib.suppress(Exception):  # a connection that broke is thrown away anyway
            await conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(before or 0)}")


def one_line_reason(exc: BaseException) -> str:
    """A one-line account of a failure for the server's log: the driver's own words."""
    original = getattr(exc, "orig", None) or exc
    return f"{type(original).__name__}: {original}".splitlines()[0]


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
    """The most bytes the `detail` column holds, or None when it has no such limit (SQLite).

    An existing table may have TEXT (65,535 bytes) where this service creates
    MEDIUMTEXT; a longer detail would be refused by the database (or cut
    short, outside strict mode).
    """
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


def _eligible_runs(before: datetime.datetime) -> Select[Any]:
    """The ids of the runs whose lines a prune with this horizon deletes."""
    r = event_runs
    return select(r.c.id).where(
        r.c.status.in_(TERMINAL_STATUSES),
        func.coalesce(r.c.ended_at, r.c.updated_at) < as_naive_utc(before),
    )


@asynccontextmanager
async def _lockless(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit: each SELECT is a consistent read of its own, taking no lock.

    `event_runs` belongs to the events system: what the prune reads of it must
    never make the events system wait. In a transaction, InnoDB reads with
    locks where a statement also writes (`DELETE ... WHERE run_id IN (SELECT
    ... FROM event_runs)` takes shared locks on the runs it reads, until
    commit) and under SERIALIZABLE even a plain SELECT locks; in autocommit a
    SELECT locks nothing at any isolation level.
    """
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


@dataclass(frozen=True, slots=True)
class PruneSlice:
    """What one slice of a prune did: how many lines it deleted, and from which runs."""

    deleted: int
    run_ids: frozenset[int]


async def prune_terminal(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> int:
    """Delete at most `limit` lines of terminal runs that ended before `before`."""
    return (await prune_slice(engine, before=before, limit=limit)).deleted


async def prune_slice(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> PruneSlice:
    """Delete at most `limit` lines of terminal runs that ended before `before`.

    Three statements, none of which locks a row of `event_runs`: the ids of at
    most `limit` eligible lines (MariaDB refuses the seed's `DELETE ... JOIN
    ... LIMIT`), a fresh read of whether their runs are still eligible, then a
    delete by primary key, in a transaction of its own so that a cancelled
    slice is rolled back whole. The delete names only `event_run_log` ids: its
    locks are on those lines and nothing else, so the events system's updates
    of its runs never wait on a prune.

    What remains is the window between the second read and the delete, one
    round trip: a run that left its terminal status just then would still
    lose the lines chosen for this slice. That is accepted, because a terminal
    status is final in the events system (a run that completed, failed, was
    cancelled or missed is not run again), so only a hand edit could hit it;
    closing the window would take a lock on the run's row, which is what made
    the events system wait.
    """
    async with _lockless(engine) as conn:
        found = (
            await conn.execute(
                select(_l.c.id, _l.c.run_id).where(_l.c.run_id.in_(_eligible_runs(before))).limit(limit)
            )
        ).all()
        if not found:
            return PruneSlice(deleted=0, run_ids=frozenset())
        # Read again, just before the delete: a run that left its terminal
        # status while the slice was being chosen keeps its lines.
        chosen = sorted({row.run_id for row in found})
        still = set((await conn.execute(_eligible_runs(before).where(event_runs.c.id.in_(chosen)))).scalars())
    ids = [row.id for row in found if row.run_id in still]
    if not ids:
        return PruneSlice(deleted=0, run_ids=frozenset())
    async with transaction(engine) as conn:
        deleted = int((await conn.execute(delete(_l).where(_l.c.id.in_(ids)))).rowcount)
    # Fewer deleted than chosen only when another pruner (a pruneTerminal
    # call, the prune command) took some of the same lines first; the runs
    # named are then those whose lines this slice saw go.
    return PruneSlice(deleted=deleted, run_ids=frozenset(row.run_id for row in found if row.run_id in still))


async def count_eligible_runs(engine: AsyncEngine, *, before: datetime.datetime) -> int:
    """How many runs have lines a prune with this horizon would delete."""
    async with _lockless(engine) as conn:
        query = select(func.count(_l.c.run_id.distinct())).where(_l.c.run_id.in_(_eligible_runs(before)))
        return int((await conn.execute(query)).scalar_one())


async def count_eligible(engine: AsyncEngine, *, before: datetime.datetime) -> int:
    """How many lines a prune with this horizon would delete, in all."""
    async with _lockless(engine) as conn:
        query = select(func.count()).select_from(_l).where(_l.c.run_id.in_(_eligible_runs(before)))
        return int((await conn.execute(query)).scalar_one())


async def find_runs(engine: AsyncEngine, ids: Iterable[int]) -> dict[int, Run]:
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    r = event_runs
    rows = await _read(
        engine, select(r.c.id, r.c.status, r.c.ended_at, r.c.updated_at).where(r.c.id.in_(wanted))
    )
    return {
        row.id: Run(
            id=row.id,
            status=row.status,
            ended_at=_aware(row.ended_at),
            updated_at=_aware(row.updated_at),
        )
        for row in rows
    }


def _aware(value: datetime.datetime | None) -> datetime.datetime | None:
    return None if value is None else value.replace(tzinfo=datetime.UTC)


async def ping(engine: AsyncEngine) -> None:
    """Raise unless the database answers a trivial query."""
    await _read(engine, text("SELECT 1"))


# MySQL/MariaDB errors that mean "not reachable now, try again", as opposed to
# a fault of this server or its schema: too many connections (1040), shutdown
# in progress (1053), lock wait timeout (1205), deadlock (1213), query
# interrupted (1317), connection killed (1927), and the client's own can't
# connect (2002, 2003), server gone away (2006), lost connection (2013, 2055).
_TRANSIENT_MYSQL_ERRORS = frozenset({1040, 1053, 1205, 1213, 1317, 1927, 2002, 2003, 2006, 2013, 2055})


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database is down, unreachable, slow or busy.

    Anything else (a missing table, a bad statement) is a fault of this server
    or its database's schema, which the caller cannot fix by trying again.
    """
    if isinstance(exc, TimeoutError | OSError | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    original = exc.orig
    args = getattr(original, "args", ())
    if args and isinstance(args[0], int) and args[0] in _TRANSIENT_MYSQL_ERRORS:
        return True
    # SQLite: another process holds the lock past busy_timeout.
    return getattr(original, "sqlite_errorname", None) in ("SQLITE_BUSY", "SQLITE_LOCKED")
