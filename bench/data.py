"""The benchmarks' database: a MariaDB database of its own, its 10,000 lines, and what reads it back.

Use `bench_database()` as a context manager for a fresh database, `fill_base` for
the base lines, `fill_big` to grow it; `base_rows` are the lines themselves. Lines
filled here are stored by hand, so both fill functions end with `fold_words`, as an
upgrade ends with `python -m gql fold-words`: a search reads every line's words.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql
import sqlalchemy as sa

from gql import store
from gql.domain.detail_codec import dump_detail
from gql.kinds import Kind
from gql.settings import Settings
from gql.store.db import create_engine, metadata

from .mariadb import MARIADB_URL, connect
from .operations import HOT_RUN, RARE_KIND
from .servers import ROOT

RUN_LINES = 2500  # lines per run: more than the biggest page
BASE_RUNS = 4  # 4 runs of 2,500: the 10,000-line table
BIG_PAGE, SMALL_PAGE = 2000, 50
# The runs a `run.blocked` line names: most are in `event_runs`, the last two are not.
BLOCKING_RUNS = range(30, 42)
KNOWN_BLOCKING = {run: ("completed", "live", "cancelled")[run % 3] for run in BLOCKING_RUNS[:-2]}
# A position halfway down the hot run's 2,500 lines: where "50 after a cursor" reads from.
MIDDLE = store.Cursor(at=datetime.datetime(2026, 3, 1) + datetime.timedelta(milliseconds=40 * 1200), id=10**9)


# ── the data ─────────────────────────────────────────────────────────────────


def _examples() -> dict[Kind, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.details_examples import EXAMPLES

    return EXAMPLES


def base_rows() -> list[tuple[Any, ...]]:
    """10,000 lines: 4 runs written side by side, every kind, some odd rows."""
    examples = _examples()
    kinds = [k for k in Kind if k is not RARE_KIND]
    rng = random.Random(6)
    start = datetime.datetime(2026, 3, 1)
    rows = []
    for i in range(RUN_LINES):
        for run in range(1, BASE_RUNS + 1):
            at = start + datetime.timedelta(milliseconds=40 * i + run)
            if i % 100 == 7:
                kind = RARE_KIND.value
                detail: str | None = dump_detail(examples[RARE_KIND])
            elif i % 250 == 3:
                kind, detail = "note", None  # no detail
            elif i % 250 == 5:
                kind, detail = "run.status", "not json {"  # unreadable
            elif i % 500 == 9:
                kind, detail = "run.teleported", '{"to": "mars"}'  # a kind from a newer writer
            else:
                chosen = kinds[rng.randrange(len(kinds))]
                example = examples[chosen]
                if chosen is Kind.RUN_BLOCKED:
                    example = {**example, "blockingRunId": BLOCKING_RUNS[i % len(BLOCKING_RUNS)]}
                kind, detail = chosen.value, dump_detail(example)
            rows.append((run, (i % 40) or None, kind, i % 5, detail, at))
    return rows


@contextmanager
def bench_database() -> Iterator[str]:
    name = f"runlog_bench_{uuid.uuid4().hex[:10]}"
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        engine = sa.create_engine(MARIADB_URL.set(drivername="mysql+pymysql", database=name))
        metadata.create_all(engine)
        engine.dispose()
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def fill_base(database: str) -> None:
    conn = connect(database)
    rows = base_rows()
    with conn.cursor() as cur:
        for i in range(0, len(rows), 1000):
            cur.executemany(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                rows[i : i + 1000],
            )
        cur.executemany(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, %s, %s, %s)",
            [
                (
                    run,
                    status,
                    None if status == "live" else datetime.datetime(2026, 2, 1),
                    datetime.datetime(2026, 2, 1),
                )
                for run, status in KNOWN_BLOCKING.items()
            ],
        )
        cur.execute("ANALYZE TABLE event_run_log")
        cur.fetchall()
    conn.close()
    fold_words(database)


def fold_words(database: str) -> int:
    """Keep the words of every line stored without them, as `python -m gql fold-words` does."""
    url = MARIADB_URL.set(database=database).render_as_string(hide_password=False)

    async def fold() -> int:
        engine = create_engine(Settings(database_url=url))
        try:
            return await store.fold_log(engine)
        finally:
            await engine.dispose()

    return asyncio.run(fold())


def count_lines(database: str, run_id: int) -> int:
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM event_run_log WHERE run_id = %s", (run_id,))
        (count,) = cur.fetchone()
    conn.close()
    return int(count)


def fill_big(database: str, target: int, say: Any) -> int:
    """Double the table with INSERT ... SELECT until it holds `target` lines; runs get new ids.

    Each copy is a new block of runs with higher ids, appended at the end of
    every index, so MariaDB writes sequentially; the hot run keeps its lines.
    """
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute("SET SESSION unique_checks = 0")
        while True:
            cur.execute("SELECT COUNT(*), MAX(run_id) FROM event_run_log")
            count, max_run = cur.fetchone()
            if count >= target:
                break
            take = min(count, target - count)
            started = time.monotonic()
            cur.execute(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "SELECT run_id + %s, step_id, kind, phase, detail, at FROM event_run_log "
                "ORDER BY id LIMIT %s",
                (max_run, take),
            )
            say(f"  filled {count + take:,} lines ({time.monotonic() - started:.0f}s)")
        cur.execute("ANALYZE TABLE event_run_log")
        cur.fetchall()
        cur.execute("SELECT COUNT(*) FROM event_run_log")
        (count,) = cur.fetchone()
    conn.close()
    started = time.monotonic()
    fold_words(database)
    say(f"  folded the copies' words ({time.monotonic() - started:.0f}s)")
    return int(count)


def explain(database: str, kinds: list[str] | None, after: store.Cursor | None) -> list[dict[str, Any]]:
    from sqlalchemy.dialects import mysql

    query = store.page_query(run_id=HOT_RUN, kinds=kinds, limit=SMALL_PAGE, after=after)
    sql = str(query.compile(dialect=mysql.dialect(), compile_kwargs={"literal_binds": True}))
    conn = connect(database)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"EXPLAIN {sql}")
        plan = list(cur.fetchall())
    conn.close()
    return plan


def settle(database: str, say: Any, timeout: float = 60) -> None:
    """Wait (up to `timeout`) until InnoDB has written out most of the fill's dirty pages.

    Otherwise the first reads after a fill compete with the flushing it left
    behind, which has nothing to do with the table's size.
    """
    conn = connect(database)
    started = time.monotonic()
    with conn.cursor() as cur:
        while True:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_%'")
            pages = {name: int(value) for name, value in cur.fetchall() if value.isdigit()}
            dirty, total = pages["Innodb_buffer_pool_pages_dirty"], pages["Innodb_buffer_pool_pages_total"]
            if dirty <= total // 10 or time.monotonic() - started > timeout:
                break
            time.sleep(1)
    conn.close()
    waited = time.monotonic() - started
    say(f"  waited {waited:.0f}s for InnoDB's flushing: {dirty:,} of {total:,} pages dirty")
