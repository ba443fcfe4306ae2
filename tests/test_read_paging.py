"""Paging is exact over any mix of rows: generated runs, walked page by page.

Whatever another writer left in `at` (text in any form, a number, `now`,
NULL, MariaDB's zero dates) and whatever the page size, walking a run page by
page gives the run's one whole page, in its order, each line once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from gql import store
from gql.store.db import create_engine, init_db

from .conftest import Backend
from .test_read_rows import older_table

# `at` as SQL text, as other writers leave it on each backend.
SQLITE_AT = [
    "'2026-03-01 12:00:00'",
    "'2026-03-01T12:00:00Z'",
    "'2026-03-01 12:00:00.000'",
    "'2026-03-01T14:00:00+02:00'",
    "'2026-03-01 11:59:59.9999'",
    "'2026-03-01 12:00:00.123456'",
    "'2026-03-01'",
    "'2026-02-30 00:00:00'",
    "'2026-03-01 12:00:00 junk'",
    "'now'",
    "'NOW'",
    "'2461000.5'",
    "'12:00'",
    "'yesterday'",
    "''",
    "12345",
    "2461000.5",
    "NULL",
    "X'32303236'",
]
MARIADB_AT = [
    "'2026-03-01 12:00:00'",
    "'2026-03-01 12:00:00.001'",
    "'2026-03-01 11:59:59.999'",
    "'2026-03-01'",
    "'1000-01-01 00:00:00'",
    "'9999-12-31 23:59:59.999'",
    "'0000-00-00 00:00:00'",
    "'2026-00-00 00:00:00'",
    "'2026-03-00 12:00:00'",
    "NULL",
]


def test_walking_any_run_page_by_page_gives_its_whole_page_each_line_once(backend: Backend) -> None:
    older_table(backend)
    if backend.name == "sqlite":
        asyncio.run(_init(backend))  # the indexes the reads use, as the app makes them
    ats = SQLITE_AT if backend.name == "sqlite" else MARIADB_AT

    @settings(max_examples=40, deadline=None, database=None)
    @given(
        rows=st.lists(st.tuples(st.sampled_from(ats), st.sampled_from(["'note'", "NULL"])), max_size=12),
        limit=st.integers(1, 5),
    )
    def check(rows: list[tuple[str, str]], limit: int) -> None:
        with backend.sync.begin() as conn:
            conn.execute(sa.text("DELETE FROM event_run_log"))
            if backend.name == "mariadb":
                conn.exec_driver_sql("SET SESSION sql_mode = ''")
            for at, kind in rows:
                conn.execute(
                    sa.text(f"INSERT INTO event_run_log (run_id, kind, at) VALUES (7, {kind}, {at})")
                )
        whole, walked = asyncio.run(_walk(backend, limit))
        assert walked == whole
        assert len(set(walked)) == len(walked) == len(rows)

    check()


async def _init(backend: Backend) -> None:
    engine = create_engine(backend.settings())
    try:
        await init_db(engine)
    finally:
        await engine.dispose()


async def _walk(backend: Backend, limit: int) -> tuple[list[int], list[int]]:
    """The run's ids as one page, and page by page through the cursors."""
    engine = create_engine(backend.settings())
    try:
        read: Any = store.read_page
        whole = await read(engine, run_id=7, kinds=None, limit=2000, after=None)
        walked: list[int] = []
        after = None
        for _ in range(100):
            page = await read(engine, run_id=7, kinds=None, limit=limit, after=after)
            walked += [line.id for line in page.lines]
            if not page.has_next:
                break
            scope = store.cursor_scope(7, None)
            after = store.decode_cursor(store.encode_cursor(page.lines[-1], scope), "after", scope)
        return [line.id for line in whole.lines], walked
    finally:
        await engine.dispose()
