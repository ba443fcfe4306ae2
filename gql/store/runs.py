"""The runs as the events system has them (`event_runs`), read and never written."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    ColumnElement,
    LargeBinary,
    Select,
    bindparam,
    cast,
    select,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import (
    event_runs,
)
from .connections import read_rows
from .rows import stored_status, stored_time
from .values import LINE_ID_MAX, Run


@functools.cache
def _runs_statement(sqlite: bool) -> Select[Any]:
    """find_runs' statement, built once (as the page's is: see page_statement)."""
    r = event_runs
    # On SQLite, as bytes: the DateTime type would fail on a value it cannot
    # parse, and the driver on text that is not UTF-8.
    columns: list[ColumnElement[Any]] = [r.c.status, r.c.ended_at, r.c.updated_at]
    if sqlite:
        columns = [cast(column, LargeBinary) for column in columns]
    return select(r.c.id, *columns).where(r.c.id.in_(bindparam("ids", expanding=True)))


async def find_runs(engine: AsyncEngine, ids: Iterable[int]) -> dict[int, Run]:
    """The runs with these ids, as the events system has them now, by id.

    The events system's table may hold what its own columns do not promise
    (a zero date on MariaDB, text that is not a date on SQLite): such a time
    reads as null, and a missing status as '', never failing the lookup.
    """
    wanted = sorted({i for i in ids if 0 < i <= LINE_ID_MAX})
    if not wanted:
        return {}
    rows = await read_rows(engine, _runs_statement(engine.dialect.name == "sqlite"), {"ids": wanted})
    return {
        run_id: Run(
            id=run_id,
            status=stored_status(status),
            ended_at=stored_time(ended),
            updated_at=stored_time(updated),
        )
        for run_id, status, ended, updated in rows
    }
