"""The prune is a good guest on the events system's database: it never makes `event_runs` wait.

The events system updates its runs (`UPDATE event_runs SET updated_at = ...`)
while the service prunes their lines. Each test stops the prune at a known
point, with an SQLAlchemy `after_cursor_execute` hook on its engine, and from
there the events system, on a connection of its own, updates a run whose
lines are being pruned. On MariaDB that session waits at most 1 s for a lock
(`innodb_lock_wait_timeout = 1`), so a prune holding a lock on the run's row
shows as error 1205 rather than as a wait to be timed.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from gql import store
from gql.store.db import create_engine

from .conftest import Backend

HORIZON = datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC)
# Runs 1 and 2 are terminal and old: eligible. Run 3 is live: kept.
RUNS = {1: "completed", 2: "failed", 3: "live"}
LINES_PER_RUN = 400


def arrange(backend: Backend) -> None:
    backend.create_tables()
    for run_id, status in RUNS.items():
        backend.add_run(run_id, status, "2026-01-01 00:00:00", "2026-01-01 00:00:00")
    with backend.sync.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO event_run_log (run_id, kind, at) VALUES (:run_id, 'note', :at)"),
            [
                {"run_id": run_id, "at": "2026-01-01 00:00:00.000"}
                for run_id in RUNS
                for _ in range(LINES_PER_RUN)
            ],
        )


def lines_per_run(backend: Backend) -> dict[int, int]:
    return dict(backend.rows("SELECT run_id, COUNT(*) FROM event_run_log GROUP BY run_id"))  # type: ignore[arg-type]


def events_system(backend: Backend) -> pymysql.Connection:  # type: ignore[type-arg]
    """A session as the events system has one: its own transactions, a 1 s lock wait."""
    url = sa.make_url(backend.url)
    conn = pymysql.connect(
        host=url.host, port=url.port or 3306, user=url.username, password=url.password or "",
        database=url.database, autocommit=False,
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    return conn


def prune_calling(backend: Backend, then: Callable[[str], None], only: str | None = None) -> store.PruneSlice:
    """Run one prune slice, calling `then(sql)` right after each of its statements (or the first `only` one).

    `then` runs inside the prune, before its next statement and before any
    commit: whatever locks the prune holds at that point, it still holds.
    """
    engine = create_engine(backend.settings())
    called: list[str] = []

    def hook(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        sql = " ".join(sql.split()).upper()
        if only is None or (not called and sql.startswith(only)):
            called.append(sql)
            then(sql)

    event.listen(engine.sync_engine, "after_cursor_execute", hook)

    async def run() -> store.PruneSlice:
        try:
            return await store.prune_slice(engine, before=HORIZON, limit=10 * LINES_PER_RUN)
        finally:
            await engine.dispose()

    piece = asyncio.run(run())
    assert called, f"the prune ran no statement starting with {only}"
    return piece


@pytest.mark.mariadb
def test_the_events_system_updates_the_runs_being_pruned_without_waiting(mariadb: Backend) -> None:
    arrange(mariadb)
    events = events_system(mariadb)
    outcomes: list[tuple[str, Any]] = []

    def update_the_runs(sql: str) -> None:
        # Called after each statement of the slice, before the next one and
        # before any commit: whatever locks the prune holds then, it holds.
        try:
            with events.cursor() as cur:
                changed = cur.execute(
                    "UPDATE event_runs SET updated_at = %s WHERE id IN (1, 2)",
                    (f"2026-01-01 00:00:{len(outcomes) + 1:02d}",),
                )
            events.commit()
            outcomes.append((sql, changed))
        except pymysql.MySQLError as exc:
            events.rollback()
            outcomes.append((sql, exc))

    try:
        piece = prune_calling(mariadb, update_the_runs)
    finally:
        events.close()
    # Before: after the DELETE, (1205, 'Lock wait timeout exceeded; try
    # restarting transaction'): its subquery held shared locks on both runs.
    assert [changed for _, changed in outcomes] == [2] * len(outcomes), outcomes
    assert any(sql.startswith("DELETE") for sql, _ in outcomes)
    assert piece.deleted == 2 * LINES_PER_RUN and piece.run_ids == {1, 2}
    assert lines_per_run(mariadb) == {3: LINES_PER_RUN}


def test_a_run_that_leaves_its_terminal_status_before_the_delete_keeps_its_lines(backend: Backend) -> None:
    """The slice is chosen first; a run no longer eligible by the time of the delete keeps every line."""
    arrange(backend)

    def reopen_run_1(sql: str) -> None:
        backend.execute("UPDATE event_runs SET status = 'live' WHERE id = 1")

    piece = prune_calling(backend, reopen_run_1, only="SELECT")
    assert piece.deleted == LINES_PER_RUN and piece.run_ids == {2}
    assert lines_per_run(backend) == {1: LINES_PER_RUN, 3: LINES_PER_RUN}
