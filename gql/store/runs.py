"""The runs as the events system has them (`event_runs`), read and never written."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    LargeBinary,
    Select,
    String,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from ..kinds import TERMINAL_STATUSES, Kind
from .connections import read_rows
from .db import event_run_log, event_runs
from .rows import stored_status, stored_time
from .statements import sqlite_at
from .values import LINE_ID_MAX, Run

RUNS_IN_FLIGHT_DEFAULT, RUNS_IN_FLIGHT_MAX = 50, 100


def terminal_sql(status: ColumnElement[Any]) -> ColumnElement[bool]:
    """SQL for "this status is terminal", matched byte for byte, as a run's `terminal` is (gql/api/page.py).

    Compared as bytes because MariaDB's collations (PAD SPACE, any case) would take
    'completed '; the statuses are cast in SQL since aiomysql cannot send bytes parameters.
    """
    return cast(status, LargeBinary).in_([cast(literal(value), LargeBinary) for value in TERMINAL_STATUSES])


@functools.cache
def _runs_statement(sqlite: bool, logged: bool = False) -> Select[Any]:
    """find_runs' statement, built once; `logged`: find_logged_runs'."""
    r, log = event_runs, event_run_log
    # On SQLite, as bytes: the DateTime type would fail on a value it cannot
    # parse, and the driver on text that is not UTF-8.
    columns: list[ColumnElement[Any]] = [r.c.status, r.c.ended_at, r.c.updated_at]
    if sqlite:
        columns = [cast(column, LargeBinary) for column in columns]
    if logged:
        # One index dive per run, on (run_id, at): any line's id, or NULL when it has none.
        # A plain id, not EXISTS: a boolean would need SQLAlchemy's conversion on MariaDB.
        any_line = select(log.c.id).where(log.c.run_id == r.c.id).limit(1).correlate(r)
        columns.append(any_line.scalar_subquery())
    return select(r.c.id, *columns).where(r.c.id.in_(bindparam("ids", expanding=True)))


async def find_runs(engine: AsyncEngine, ids: Iterable[int]) -> dict[int, Run]:
    """The runs with these ids, as the events system has them now, by id.

    A time the events system stored unreadably reads as null, a missing status as ''.
    """
    return (await _find(engine, ids, logged=False))[0]


async def find_logged_runs(engine: AsyncEngine, ids: Iterable[int]) -> tuple[dict[int, Run], set[int]]:
    """find_runs' runs, and the ids of those with at least one line in the log, in one statement.

    So what holds a run with no line is told without reading its log (gql/api/runs.py).
    """
    return await _find(engine, ids, logged=True)


async def _find(engine: AsyncEngine, ids: Iterable[int], *, logged: bool) -> tuple[dict[int, Run], set[int]]:
    wanted = sorted({i for i in ids if 0 < i <= LINE_ID_MAX})
    if not wanted:
        return {}, set()
    statement = _runs_statement(engine.dialect.name == "sqlite", logged)
    rows = await read_rows(engine, statement, {"ids": wanted})
    found = {
        row[0]: Run(
            id=row[0],
            status=stored_status(row[1]),
            ended_at=stored_time(row[2]),
            updated_at=stored_time(row[3]),
        )
        for row in rows
    }
    return found, {row[0] for row in rows if logged and row[4] is not None}


@functools.cache
def _in_flight_statement(sqlite: bool, after: str | None) -> Select[Any]:
    """The runs not terminal, newest activity first (the later of `updated_at` and the newest line's `at`)."""
    r, log = event_runs, event_run_log
    if sqlite:
        # Compared as SQLite's normalised text (db.SQLITE_AT_ORDER), as a line's `at` is.
        updated: ColumnElement[Any] = func.strftime("%Y-%m-%d %H:%M:%f", r.c.updated_at)
        newest_at: ColumnElement[Any] = sqlite_at
    else:
        updated, newest_at = r.c.updated_at, log.c.at
    # One index dive per run, on (run_id, at): the newest line, never a scan of the log.
    newest = (
        select(newest_at)
        .where(log.c.run_id == r.c.id)
        .order_by(newest_at.desc(), log.c.id.desc())
        .limit(1)
        .correlate(r)
        .scalar_subquery()
    )
    activity = case(
        (newest.is_(None), updated),
        (updated.is_(None), newest),
        (updated > newest, updated),
        else_=newest,
    )
    columns: list[ColumnElement[Any]] = [r.c.status, r.c.ended_at, r.c.updated_at]
    if sqlite:
        columns = [cast(column, LargeBinary) for column in columns]
    inner = (
        select(
            r.c.id.label("id"),
            *(c.label(n) for c, n in zip(columns, ("status", "ended", "updated"), strict=True)),
            activity.label("activity"),
        )
        .where(or_(r.c.status.is_(None), ~terminal_sql(r.c.status)))
        .subquery()
    )
    query = (
        select(inner)
        .order_by(inner.c.activity.desc(), inner.c.id.desc())
        .limit(bindparam("limit", type_=Integer()))
    )
    after_id = bindparam("after_id", type_=Integer())
    if after == "null":
        query = query.where(inner.c.activity.is_(None), inner.c.id < after_id)
    elif after == "time":
        value = bindparam("after_at", type_=String() if sqlite else r.c.updated_at.type)
        query = query.where(
            or_(
                inner.c.activity < value,
                and_(inner.c.activity == value, inner.c.id < after_id),
                inner.c.activity.is_(None),
            )
        )
    return query


async def runs_in_flight(
    engine: AsyncEngine, *, limit: int, after: tuple[str | None, int] | None
) -> tuple[list[tuple[Run, str | None]], bool]:
    """The runs not terminal, newest activity first, after `after` (activity, id); and whether more follow.

    Each comes with its activity, the position a next page starts after.
    """
    sqlite = engine.dialect.name == "sqlite"
    values: dict[str, Any] = {"limit": limit + 1}
    shape = None
    if after is not None:
        shape = "null" if after[0] is None else "time"
        values["after_id"] = after[1]
        if after[0] is not None:
            values["after_at"] = after[0] if sqlite else datetime.datetime.fromisoformat(after[0])
    rows = await read_rows(engine, _in_flight_statement(sqlite, shape), values)
    found = []
    for run_id, status, ended, updated, activity in rows[:limit]:
        position = activity.decode() if type(activity) is bytes else activity
        if isinstance(position, datetime.datetime):
            position = position.isoformat(sep=" ", timespec="microseconds")
        run = Run(
            id=run_id,
            status=stored_status(status),
            ended_at=stored_time(ended),
            updated_at=stored_time(updated),
        )
        found.append((run, None if position is None else str(position)))
    return found, len(rows) > limit


async def count_in_flight(engine: AsyncEngine) -> int:
    """How many runs are not terminal (those `runs_in_flight` pages through)."""
    r = event_runs
    statement = (
        select(func.count()).select_from(r).where(or_(r.c.status.is_(None), ~terminal_sql(r.c.status)))
    )
    rows = await read_rows(engine, statement)
    return int(rows[0][0])


# The kinds that open or end a failed cleanup's hold (gql/domain/holds.py's RULES).
_CLEANUP_FAILED, _CLEANUP_REVERTED = Kind.CLEANUP_FAILED.value, Kind.CLEANUP_REVERTED.value


@functools.cache
def _failed_cleanups_statement() -> Select[Any]:
    r, log = event_runs, event_run_log
    # Each kind by itself, so that its lines are a seek of (kind, run_id) on ix_event_run_log_kind_run_*,
    # never a walk through a long run's other lines: the failures are an index range of one rare kind,
    # and the reverts are read only for the runs they are in.
    failed = select(log.c.run_id, log.c.id).where(log.c.kind == _CLEANUP_FAILED)
    reverted = select(log.c.run_id, log.c.id).where(
        log.c.kind == _CLEANUP_REVERTED,
        log.c.run_id.in_(select(log.c.run_id).where(log.c.kind == _CLEANUP_FAILED)),
    )
    lines = union_all(failed, reverted).subquery()
    newest = func.max(lines.c.id)
    return (
        select(lines.c.run_id, func.count(), newest, func.count().over())  # over(): how many runs in all
        .join(r, r.c.id == lines.c.run_id)
        .where(terminal_sql(r.c.status))
        .group_by(lines.c.run_id)
        .order_by(newest.desc())
        .limit(bindparam("limit", type_=Integer()))
    )


async def finished_with_failed_cleanups(
    engine: AsyncEngine, *, limit: int
) -> tuple[dict[int, tuple[int, int]], int]:
    """The terminal runs with a `cleanup.failed` line, newest cleanup line first, at most `limit`;
    and how many there are in all.

    Each comes with how many `cleanup.failed` and `cleanup.reverted` lines it has and the newest one's
    id: what its failed cleanups' holds rest on, which changes with any such line written or pruned.
    """
    rows = await read_rows(engine, _failed_cleanups_statement(), {"limit": limit})
    found = {run_id: (int(count), int(newest)) for run_id, count, newest, _ in rows}
    return found, int(rows[0][3]) if rows else 0
