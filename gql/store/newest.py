"""The newest lines of a few kinds, for many runs at once: what a run's holds are derived from."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import CompoundSelect, Integer, String, bindparam, select, union_all
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import event_run_log
from .connections import read_rows
from .rows import mariadb_lines, sqlite_lines
from .statements import line_columns, sqlite_at
from .values import LINE_ID_MAX, Line

_l = event_run_log
# Runs per statement: SQLite allows 500 terms in a compound SELECT.
RUNS_PER_STATEMENT = 30


async def read_newest(
    engine: AsyncEngine, run_ids: Iterable[int], reach: Mapping[str, int]
) -> dict[int, list[Line]]:
    """Per run, its newest lines of each kind in `reach` (the wire name), at most that many each.

    Each (run, kind) is one index range on (run_id, kind, at), read newest
    first and cut at its reach, so the cost does not grow with the run's
    log; the runs are read together, in one statement per
    RUNS_PER_STATEMENT of them. A run with no such line maps to [].
    """
    wanted = sorted({i for i in run_ids if 0 < i <= LINE_ID_MAX})
    found: dict[int, list[Line]] = {run_id: [] for run_id in wanted}
    sqlite = engine.dialect.name == "sqlite"
    kinds = tuple(sorted(reach.items()))
    for start in range(0, len(wanted), RUNS_PER_STATEMENT):
        chunk = wanted[start : start + RUNS_PER_STATEMENT]
        values: dict[str, Any] = {f"r{j}": run_id for j, run_id in enumerate(chunk)}
        for i, (kind, most) in enumerate(kinds):
            values[f"k{i}"], values[f"n{i}"] = kind, most
        rows = await read_rows(engine, _newest_statement(sqlite, len(chunk), len(kinds)), values)
        for line in sqlite_lines(rows) if sqlite else mariadb_lines(rows):
            found[line.run_id].append(line)
    return found


@functools.cache
def _newest_statement(sqlite: bool, runs: int, kinds: int) -> CompoundSelect[Any]:
    """`runs` times `kinds` index ranges, each newest first and cut, as one UNION ALL."""
    order = sqlite_at if sqlite else _l.c.at
    parts = []
    for j in range(runs):
        for i in range(kinds):
            part = (
                select(*line_columns(sqlite))
                .where(
                    _l.c.run_id == bindparam(f"r{j}", type_=Integer()),
                    _l.c.kind == bindparam(f"k{i}", type_=String()),
                )
                .order_by(order.desc(), _l.c.id.desc())
                .limit(bindparam(f"n{i}", type_=Integer()))
            )
            # MariaDB takes each cut range as it is, in parentheses (a derived
            # table each was several times slower: one temporary table per
            # part); SQLite allows no ORDER BY or LIMIT in a compound's part.
            parts.append(select(part.subquery()) if sqlite else part)
    return union_all(*parts)
