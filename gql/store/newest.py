"""The newest lines of a few kinds, for many runs at once: what a run's holds are derived from."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import CompoundSelect, Integer, LargeBinary, String, bindparam, cast, null, select, union_all
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import event_run_log, event_runs
from .connections import read_rows
from .rows import mariadb_lines, sqlite_lines, stored_status, stored_time
from .statements import line_columns, sqlite_at
from .values import LINE_ID_MAX, Line, Run

_l = event_run_log
# Runs per statement: SQLite allows 500 terms in a compound SELECT.
RUNS_PER_STATEMENT = 30


async def read_newest(
    engine: AsyncEngine, run_ids: Iterable[int], reach: Mapping[str, int]
) -> dict[int, list[Line]]:
    """Per run, its newest lines of each kind in `reach` (the wire name), at most that many each.

    One index range per (run, kind), so the cost does not grow with the run's log; one
    statement per RUNS_PER_STATEMENT runs. A run with no such line maps to [].
    """
    return (await _read(engine, run_ids, reach, rows=False))[1]


async def read_runs_and_newest(
    engine: AsyncEngine, run_ids: Iterable[int], reach: Mapping[str, int]
) -> tuple[dict[int, Run], dict[int, list[Line]]]:
    """find_runs' runs and read_newest's lines of the same ids, in one round trip.

    Lines of an id with no run are read too; the caller leaves them aside.
    """
    return await _read(engine, run_ids, reach, rows=True)


async def _read(
    engine: AsyncEngine, run_ids: Iterable[int], reach: Mapping[str, int], *, rows: bool
) -> tuple[dict[int, Run], dict[int, list[Line]]]:
    wanted = sorted({i for i in run_ids if 0 < i <= LINE_ID_MAX})
    found: dict[int, list[Line]] = {run_id: [] for run_id in wanted}
    runs: dict[int, Run] = {}
    sqlite = engine.dialect.name == "sqlite"
    kinds = tuple(sorted(reach.items()))
    for start in range(0, len(wanted), RUNS_PER_STATEMENT):
        chunk = wanted[start : start + RUNS_PER_STATEMENT]
        values: dict[str, Any] = {f"r{j}": run_id for j, run_id in enumerate(chunk)}
        for i, (kind, most) in enumerate(kinds):
            values[f"k{i}"], values[f"n{i}"] = kind, most
        read = await read_rows(engine, _newest_statement(sqlite, len(chunk), len(kinds), rows), values)
        if rows:
            # A run's row is the one part whose line id is NULL; its columns follow the line's.
            width = 8 if sqlite else 7
            for row in read:
                if row[0] is None:
                    status, ended, updated = row[width:]
                    runs[row[1]] = Run(
                        row[1], stored_status(status), stored_time(ended), stored_time(updated)
                    )
            read = [row[:width] for row in read if row[0] is not None]
        for line in sqlite_lines(read) if sqlite else mariadb_lines(read):
            found[line.run_id].append(line)
    return runs, found


@functools.cache
def _newest_statement(sqlite: bool, runs: int, kinds: int, rows: bool = False) -> CompoundSelect[Any]:
    """`runs` times `kinds` index ranges, each newest first and cut, as one UNION ALL; with `rows`,
    and the runs' rows from `event_runs`, as one more part (each line's run columns NULL)."""
    order = sqlite_at if sqlite else _l.c.at
    ids = [bindparam(f"r{j}", type_=Integer()) for j in range(runs)]
    columns = line_columns(sqlite)
    padding = [null(), null(), null()] if rows else []
    parts = []
    for j in range(runs):
        for i in range(kinds):
            part = (
                select(*columns)
                .where(
                    _l.c.run_id == ids[j],
                    _l.c.kind == bindparam(f"k{i}", type_=String()),
                )
                .order_by(order.desc(), _l.c.id.desc())
                .limit(bindparam(f"n{i}", type_=Integer()))
            )
            # MariaDB takes each cut range as it is, in parentheses (a derived
            # table each was several times slower: one temporary table per
            # part); SQLite allows no ORDER BY or LIMIT in a compound's part.
            parts.append(select(part.subquery(), *padding) if sqlite else part.add_columns(*padding))
    if rows:
        r = event_runs
        # As find_runs reads them: on SQLite, as bytes.
        held: list[Any] = [r.c.status, r.c.ended_at, r.c.updated_at]
        if sqlite:
            held = [cast(column, LargeBinary) for column in held]
        # The run's columns are its own, NULL in each line's part: its status in a line's
        # `kind` column would be an illegal mix of collations, on MariaDB, wherever the
        # events system's table has another collation than the log's.
        blanks = [null()] * (len(columns) - 2)
        parts.append(select(null(), r.c.id, *blanks, *held).where(r.c.id.in_(ids)))
    return union_all(*parts)
