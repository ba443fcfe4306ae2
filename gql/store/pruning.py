"""Pruning: deleting the lines of terminal runs, slice by slice, and what pruning took from each run."""

from __future__ import annotations

import asyncio
import datetime
import functools
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    bindparam,
    delete,
    func,
    select,
    text,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .connections import read_rows
from .db import event_run_log, event_run_log_pruned, event_run_log_words, event_runs, transaction
from .errors import OutcomeUnknown, answered_by_database
from .rows import stored_time
from .runs import terminal_sql
from .statements import sqlite_at, sqlite_text
from .values import as_naive_utc, utc_now_millis
from .writes import ANSWER_GRACE_SECONDS

_l = event_run_log


def _eligible_runs(before: datetime.datetime) -> Select[Any]:
    """The ids of the runs whose lines a prune with this horizon deletes."""
    r = event_runs
    return select(r.c.id).where(
        terminal_sql(r.c.status),
        func.coalesce(r.c.ended_at, r.c.updated_at) < as_naive_utc(before),
    )


@asynccontextmanager
async def _lockless(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit, where a SELECT locks nothing: the events system never waits on a prune."""
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


@dataclass(frozen=True, slots=True)
class PruneSlice:
    """What one slice of a prune did: how many lines it deleted, and from which runs."""

    deleted: int
    run_ids: frozenset[int]


# Each slice its own transaction: what it deleted stays past a later refusal; a small Galera write set.
PRUNE_SLICE_LINES = 1000

PRUNE_CONFLICT_RETRIES = 8  # tries of a slice that lost a conflict (it deleted nothing: safe)

# Refusals that leave a slice deleting nothing, tried again half as big: a deadlock or
# lost certification (1213), a lock wait timeout (1205), a commit refused (1180: Galera's
# wsrep_max_ws_rows).
_SLICE_RETRIED = frozenset({1180, 1205, 1213})


async def prune_terminal(
    engine: AsyncEngine, *, before: datetime.datetime, limit: int, deadline: float | None = None
) -> int:
    """Delete at most `limit` lines of terminal runs that ended before `before`; answer how many."""
    piece = await _prune(engine, before=before, limit=limit, deadline=deadline, slice_lines=PRUNE_SLICE_LINES)
    return piece.deleted


async def prune_slice(
    engine: AsyncEngine, *, before: datetime.datetime, limit: int, deadline: float | None = None
) -> PruneSlice:
    """Delete one slice of at most `limit` lines of terminal runs that ended before `before` (`_prune`)."""
    return await _prune(engine, before=before, limit=limit, deadline=deadline, slice_lines=limit, slices=1)


async def _prune(
    engine: AsyncEngine,
    *,
    before: datetime.datetime,
    limit: int,
    deadline: float | None,
    slice_lines: int,
    slices: int | None = None,
) -> PruneSlice:
    """Delete slices of at most `slice_lines` (at most `slices` of them) until `limit` lines or none are left.

    At `deadline` (loop time) the slice in flight rolls back, unless its COMMIT was sent.
    Raises only when nothing was deleted; OutcomeUnknown when a COMMIT got no answer.
    """
    deleted, runs, taken = 0, set[int](), 0
    size, refusals = min(limit, slice_lines), 0
    while deleted < limit and (slices is None or taken < slices):
        commit = _Commit()
        try:
            async with asyncio.timeout_at(deadline) as commit.bound:
                if refusals:
                    await asyncio.sleep(random.uniform(0.005, 0.02) * 2**refusals)  # noqa: S311 (not a secret)
                piece = await _prune_slice_once(
                    engine, before=before, limit=min(size, limit - deleted), commit=commit
                )
        except Exception as exc:
            if commit.sent and not answered_by_database(exc, engine.dialect.name):
                raise OutcomeUnknown(
                    f"the database did not answer a prune's COMMIT: {deleted} lines were deleted before it, "
                    f"and up to {commit.lines} more may have been by it; call again to prune what is left",
                    deleted=deleted,
                    up_to=commit.lines,
                ) from exc
            code = getattr(getattr(exc, "orig", None), "args", (None,))[:1]
            retried = isinstance(exc, sa_exc.DBAPIError) and bool(code) and code[0] in _SLICE_RETRIED
            if not retried or refusals == PRUNE_CONFLICT_RETRIES:
                if deleted:
                    break
                raise
            refusals += 1
            size = max(1, size // 2)
            continue
        refusals, taken = 0, taken + 1
        deleted += piece.deleted
        runs |= piece.run_ids
        if not piece.run_ids:  # nothing eligible was left
            break
    return PruneSlice(deleted=deleted, run_ids=frozenset(runs))


@dataclass(slots=True)
class _Commit:
    """A prune call's slice at its COMMIT: past there, the call's deadline gives way to the answer."""

    bound: asyncio.Timeout | None = None  # the call's deadline, moved on when the COMMIT is sent
    sent: bool = False
    lines: int = 0  # what the COMMIT, once sent, may delete

    async def send(self, lines: int) -> None:
        """Say the COMMIT goes now; past the deadline already, roll the slice back instead."""
        if self.bound is None or lines == 0:
            return  # a COMMIT of nothing deleted has no outcome to wait for
        if self.bound.expired():
            # Take the pending cancellation here, before the COMMIT is written.
            await asyncio.sleep(0)
            # Or something below swallowed it (3.11's asyncio.wait_for can): roll back anyway.
            raise TimeoutError
        self.sent, self.lines = True, lines
        when = self.bound.when()
        if when is not None:
            # Cut off by the deadline, the COMMIT's outcome would be unknown.
            self.bound.reschedule(max(when, asyncio.get_running_loop().time() + ANSWER_GRACE_SECONDS))


async def _prune_slice_once(
    engine: AsyncEngine, *, before: datetime.datetime, limit: int, commit: _Commit | None = None
) -> PruneSlice:
    """One try at a slice: delete by primary key what a lockless read chose; `commit` hears of its COMMIT."""
    async with _lockless(engine) as conn:
        found = (
            await conn.execute(
                select(_l.c.id, _l.c.run_id).where(_l.c.run_id.in_(_eligible_runs(before))).limit(limit)
            )
        ).all()
        isolation = await _delete_isolation(conn) if found else ""
    if not found:
        return PruneSlice(deleted=0, run_ids=frozenset())
    chosen = sorted({row.run_id for row in found})
    async with transaction(engine, isolation) as conn:
        # A run that left its terminal status meanwhile keeps its lines (terminal is final, but
        # not locked: no row of `event_runs` is).
        still = set((await conn.execute(_eligible_runs(before).where(event_runs.c.id.in_(chosen)))).scalars())
        ids = [row.id for row in found if row.run_id in still]
        if not ids:
            return PruneSlice(deleted=0, run_ids=frozenset())
        # The lines this delete took (RETURNING), so one another pruner took is not
        # counted; MySQL has no DELETE ... RETURNING, so they are read just before.
        at = sqlite_at if conn.dialect.name == "sqlite" else _l.c.at
        if conn.dialect.delete_returning:
            statement = delete(_l).where(_l.c.id.in_(ids)).returning(_l.c.run_id, at)
            taken = (await conn.execute(statement)).all()
            deleted = len(taken)
        else:
            taken = (await conn.execute(select(_l.c.run_id, at).where(_l.c.id.in_(ids)))).all()
            deleted = int((await conn.execute(delete(_l).where(_l.c.id.in_(ids)))).rowcount)
        # A line's kept words go with it: SQLite may give a deleted line's id to the next one.
        words = event_run_log_words
        await conn.execute(delete(words).where(words.c.run_id.in_(sorted(still)), words.c.id.in_(ids)))
        await _record_pruned(conn, [(run_id, at) for run_id, at in taken])
        if commit is not None:
            await commit.send(deleted)
    # Fewer deleted than chosen when another pruner took some first.
    return PruneSlice(deleted=deleted, run_ids=frozenset(row.run_id for row in found if row.run_id in still))


async def _delete_isolation(conn: AsyncConnection) -> str:
    """READ COMMITTED where the server allows it (not with a statement binary log): no gap locks."""
    if conn.dialect.name == "sqlite":
        return "SERIALIZABLE"  # SQLite's only level; `transaction` sets none there
    logs_statements = "SELECT @@log_bin = 1 AND @@binlog_format = 'STATEMENT'"
    return "REPEATABLE READ" if (await conn.execute(text(logs_statements))).scalar() else "READ COMMITTED"


async def _record_pruned(conn: AsyncConnection, lines: Sequence[tuple[int, Any]]) -> None:
    """Add the lines a slice deleted to their runs' `event_run_log_pruned` rows, in its transaction."""
    per_run: dict[int, tuple[int, datetime.datetime | None]] = {}
    for run_id, at in lines:
        if isinstance(at, str):  # SQLite's normalised text; '' holds no time
            try:
                at = datetime.datetime.fromisoformat(at)
            except ValueError:
                at = None
        if not isinstance(at, datetime.datetime):
            at = None  # MariaDB's zero date comes as text, a NULL as None
        count, through = per_run.get(run_id, (0, None))
        if at is not None and (through is None or at > through):
            through = at
        per_run[run_id] = (count + 1, through)
    now = utc_now_millis()
    p = event_run_log_pruned
    for run_id, (count, through) in sorted(per_run.items()):
        values = {"run_id": run_id, "line_count": count, "through": through, "pruned_at": now}
        sqlite = conn.dialect.name == "sqlite"
        statement: Any = (sqlite_insert if sqlite else mysql_insert)(p).values(values)
        new = statement.excluded if sqlite else statement.inserted
        newer = func.max if sqlite else func.greatest
        update = {
            "line_count": p.c.line_count + new.line_count,
            "through": newer(
                func.coalesce(p.c.through, new.through), func.coalesce(new.through, p.c.through)
            ),
            "pruned_at": new.pruned_at,
        }
        if sqlite:
            statement = statement.on_conflict_do_update(index_elements=[p.c.run_id], set_=update)
        else:
            statement = statement.on_duplicate_key_update(update)
        await conn.execute(statement)


@dataclass(frozen=True, slots=True)
class Pruned:
    """What pruning took from one run's log."""

    lines: int
    through: datetime.datetime | None  # aware UTC
    pruned_at: datetime.datetime | None  # aware UTC


async def find_pruned(engine: AsyncEngine, run_id: int) -> Pruned | None:
    """What pruning took from the run's log, or None if it never took a line."""
    rows = await read_rows(engine, _pruned_statement(engine.dialect.name == "sqlite"), {"run_id": run_id})
    if not rows:
        return None
    lines, through, pruned_at = rows[0]
    return Pruned(lines=int(lines), through=stored_time(through), pruned_at=stored_time(pruned_at))


@functools.cache
def _pruned_statement(sqlite: bool) -> Select[Any]:
    p = event_run_log_pruned
    columns: list[ColumnElement[Any]] = [p.c.through, p.c.pruned_at]
    if sqlite:
        columns = [sqlite_text(column) for column in columns]
    return select(p.c.line_count, *columns).where(p.c.run_id == bindparam("run_id"))


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
