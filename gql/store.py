"""The run log's operations as plain async functions over an engine.

Each call takes its own connection from the pool: graphql-core resolves sibling
fields as concurrent tasks, and an SQLAlchemy connection must not be shared
between tasks. Nothing here knows about GraphQL.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Executable, Select, and_, delete, func, insert, or_, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .db import event_run_log, event_runs, transaction
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


async def write_line(engine: AsyncEngine, line: NewLine) -> int:
    """Store one line, stamped with the current UTC millisecond; answer its id."""
    async with engine.begin() as conn:
        result = await conn.execute(
            insert(_l).values(
                run_id=line.run_id,
                step_id=line.step_id,
                kind=line.kind,
                phase=line.phase,
                detail=line.detail,
                at=utc_now_millis(),
            )
        )
    return int(result.inserted_primary_key[0])  # type: ignore[index]


async def write_lines(engine: AsyncEngine, lines: Sequence[NewLine]) -> None:
    """Store several lines in one multi-row INSERT and one commit, all stamped with now."""
    at = utc_now_millis()
    async with engine.begin() as conn:
        await conn.execute(
            insert(_l),
            [
                {
                    "run_id": line.run_id,
                    "step_id": line.step_id,
                    "kind": line.kind,
                    "phase": line.phase,
                    "detail": line.detail,
                    "at": at,
                }
                for line in lines
            ],
        )


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
