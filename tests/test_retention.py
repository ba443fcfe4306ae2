"""Retention: the `prune` command, the sweeper, and the admin-only `retention` query."""

from __future__ import annotations

import asyncio
import datetime
import io
import logging
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pymysql
import pytest
import sqlalchemy as sa

from gql.cli import ProgressBar
from gql.domain.retention import Outcome, Progress, Sweeper, lock_name
from gql.settings import Settings
from gql.store import PruneSlice
from gql.store.db import create_engine

from .conftest import ADMIN, Api, Backend

T = TypeVar("T")
DAY = 86400.0
READER = "reader-token-0123456789"

# The world every test starts from. Eligible at a 30-day horizon: runs 1, 2, 6.
ELIGIBLE = {1: 7, 2: 5, 6: 6}
KEPT = {
    3: 4,  # running, untouched for 90 days: not terminal, keeps every line
    4: 3,  # completed yesterday: too recent
    5: 2,  # cancelled yesterday, last updated long ago: ended_at wins the COALESCE
    99: 2,  # no run row at all: not known to be terminal
}


def _ago(days: float) -> str:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)
    return when.strftime("%Y-%m-%d %H:%M:%S")


def arrange_world(backend: Backend) -> None:
    backend.add_run(1, "completed", _ago(60), _ago(60))
    backend.add_run(2, "failed", None, _ago(90))  # no ended_at: updated_at counts
    backend.add_run(3, "running", None, _ago(90))
    backend.add_run(4, "completed", _ago(1), _ago(1))
    backend.add_run(5, "cancelled", _ago(1), _ago(90))
    backend.add_run(6, "missed", _ago(40), _ago(40))
    lines = [
        {"run_id": run_id, "kind": "note", "at": _ago(95)}
        for run_id, count in {**ELIGIBLE, **KEPT}.items()
        for _ in range(count)
    ]
    with backend.sync.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO event_run_log (run_id, kind, at) VALUES (:run_id, :kind, :at)"),
            lines,
        )


def lines_per_run(backend: Backend) -> dict[int, int]:
    rows = backend.rows("SELECT run_id, COUNT(*) FROM event_run_log GROUP BY run_id")
    return {run_id: count for run_id, count in rows}


@pytest.fixture
def world(tables: Backend) -> Backend:
    arrange_world(tables)
    return tables


# ── the command ──────────────────────────────────────────────────────────────


def prune(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m gql prune ...` as an operator would, against the backend."""
    env = {**os.environ, "RUNLOG_DATABASE_URL": backend.url}
    return subprocess.run(
        [sys.executable, "-m", "gql", "prune", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_prune_deletes_exactly_the_eligible_lines_and_sums_up(world: Backend) -> None:
    done = prune(world, "--older-than", "30d", "--limit", "4")

    assert done.returncode == 0, done.stderr
    assert lines_per_run(world) == KEPT
    # 18 eligible lines of 3 runs, 4 at a time: 5 slices.
    assert "pruned 18 lines of 3 runs in 5 slices of up to 4 lines" in done.stdout
    # Not a terminal: plain progress lines, no carriage returns.
    assert "pruning: " in done.stderr
    assert "\r" not in done.stderr


def test_prune_again_finds_nothing_to_prune(world: Backend) -> None:
    assert prune(world, "--older-than", "30d").returncode == 0

    again = prune(world, "--older-than", "30d")

    assert again.returncode == 0, again.stderr
    assert "nothing to prune" in again.stdout
    assert lines_per_run(world) == KEPT


def test_a_longer_horizon_keeps_runs_that_ended_after_it(world: Backend) -> None:
    done = prune(world, "--older-than", "50d")

    assert done.returncode == 0, done.stderr
    # Run 6 ended 40 days ago: inside a 50-day horizon.
    assert lines_per_run(world) == {**KEPT, 6: ELIGIBLE[6]}
    assert "pruned 12 lines of 2 runs in 1 slice" in done.stdout


def test_dry_run_counts_and_deletes_nothing(world: Backend) -> None:
    before = lines_per_run(world)

    done = prune(world, "--older-than", "30d", "--dry-run")

    assert done.returncode == 0, done.stderr
    assert "dry run: 18 lines of 3 terminal runs" in done.stdout
    assert "nothing was deleted" in done.stdout
    assert lines_per_run(world) == before


@pytest.mark.parametrize(
    ("older_than", "says"),
    [
        ("30", "has no unit"),
        ("30x", "is not a duration"),
        ("0d", "is not a positive duration"),
        ("-5d", "the horizon would be in the future"),
        ("=-5d", "the horizon would be in the future"),
        ("99999999999d", "before the year 1"),
    ],
)
def test_a_bad_duration_or_a_future_horizon_is_refused(world: Backend, older_than: str, says: str) -> None:
    args = [f"--older-than{older_than}"] if older_than.startswith("=") else ["--older-than", older_than]
    before = lines_per_run(world)

    done = prune(world, *args)

    assert done.returncode == 2
    assert says in done.stderr
    assert "--older-than" in done.stderr
    assert lines_per_run(world) == before


def test_prune_fails_with_exit_1_and_says_why_when_the_tables_are_missing(
    backend: Backend,
) -> None:
    done = prune(backend, "--older-than", "30d")

    assert done.returncode == 1
    assert "error:" in done.stderr
    assert "event_run" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_progress_bar_on_a_terminal_is_redrawn_in_place() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = ProgressBar(screen)
    bar.total = 10
    for done in (4, 8, 10):
        piece = PruneSlice(deleted=done, run_ids=frozenset({1}))
        bar.show(Progress(deleted=done, runs=1, slices=done // 4, elapsed=0.5, last=piece))
    bar.finish()

    shown = screen.getvalue()
    assert shown.count("\r") == 3
    assert "40% 4/10 lines" in shown
    assert "100% 10/10 lines" in shown
    assert shown.endswith("\n")


# ── the sweeper ──────────────────────────────────────────────────────────────


def with_sweeper(backend: Backend, use: Callable[[Sweeper], Awaitable[T]], **kw: Any) -> T:
    """Run `use` with a sweeper on its own engine (30-day retention), then dispose of it."""
    settings = Settings(database_url=backend.url)

    async def main() -> T:
        engine = create_engine(settings)
        try:
            options: dict[str, Any] = {"retention": 30 * DAY, "interval": 3600.0, **kw}
            sweeper = Sweeper(engine, lock=lock_name(settings.url), **options)
            return await use(sweeper)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def test_a_tick_prunes_one_slice_and_logs_it(world: Backend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gql.domain.retention")

    async def tick_once(sweeper: Sweeper) -> Any:
        return await sweeper.tick()

    sweep = with_sweeper(world, tick_once, limit=4)

    assert sweep.outcome is Outcome.SWEPT
    assert sweep.deleted == 4
    assert sum(lines_per_run(world).values()) == sum(ELIGIBLE.values()) + sum(KEPT.values()) - 4
    logged = [r.getMessage() for r in caplog.records if r.name == "gql.domain.retention"]
    assert len(logged) == 1
    assert "4 lines deleted from 1 runs" in logged[0]


def test_ticks_drain_the_backlog_and_keep_the_rest(world: Backend) -> None:
    async def tick_until_idle(sweeper: Sweeper) -> Sweeper:
        while (await sweeper.tick()).deleted:
            pass
        return sweeper

    sweeper = with_sweeper(world, tick_until_idle, limit=5)

    assert lines_per_run(world) == KEPT
    assert sweeper.deleted == sum(ELIGIBLE.values())
    assert sweeper.sweeps == 5  # 5 + 5 + 5 + 3, then one that found nothing
    assert sweeper.failures == 0


def test_a_failing_tick_is_recorded_and_the_next_one_works(
    world: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    async def fail_then_recover(sweeper: Sweeper) -> tuple[Any, Any]:
        world.execute("ALTER TABLE event_runs RENAME TO event_runs_away")
        failed = await sweeper.tick()
        world.execute("ALTER TABLE event_runs_away RENAME TO event_runs")
        return failed, await sweeper.tick()

    failed, recovered = with_sweeper(world, fail_then_recover)

    assert failed.outcome is Outcome.FAILED
    assert failed.error is not None and "event_runs" in failed.error
    assert any(
        r.levelno == logging.WARNING and "retention sweep failed" in r.getMessage() for r in caplog.records
    )
    assert recovered.outcome is Outcome.SWEPT
    assert recovered.deleted == sum(ELIGIBLE.values())
    assert lines_per_run(world) == KEPT


def test_a_tick_against_a_database_that_is_not_there_fails_cleanly() -> None:
    """A port where nothing listens: the tick fails, says why, and raises nothing."""
    settings = Settings(database_url="mysql+aiomysql://root@127.0.0.1:1/nowhere", connect_timeout=1)

    async def main() -> Any:
        engine = create_engine(settings)
        try:
            return await Sweeper(engine, retention=DAY, interval=60.0).tick()
        finally:
            await engine.dispose()

    sweep = asyncio.run(main())

    assert sweep.outcome is Outcome.FAILED
    assert sweep.error is not None and "connect" in sweep.error.lower()


# ── one sweeper at a time (MariaDB) ──────────────────────────────────────────


def _connect(backend: Backend, autocommit: bool = True) -> pymysql.Connection:  # type: ignore[type-arg]
    url = sa.make_url(backend.url)
    return pymysql.connect(
        host=url.host,
        port=url.port or 3306,
        user=url.username,
        password=url.password or "",
        database=url.database,
        autocommit=autocommit,
    )


@pytest.fixture
def mariadb_world(mariadb: Backend) -> Backend:
    mariadb.create_tables()
    arrange_world(mariadb)
    return mariadb


@pytest.fixture
def other_connection(mariadb_world: Backend) -> Iterator[pymysql.Connection]:  # type: ignore[type-arg]
    """A second client of the database: another server process, say."""
    conn = _connect(mariadb_world)
    yield conn
    conn.close()


def _get_lock(conn: pymysql.Connection, name: str) -> int:  # type: ignore[type-arg]
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def _release_lock(conn: pymysql.Connection, name: str) -> None:  # type: ignore[type-arg]
    with conn.cursor() as cur:
        cur.execute("SELECT RELEASE_LOCK(%s)", (name,))


@pytest.mark.mariadb
def test_a_tick_does_not_sweep_while_another_process_holds_the_lock(
    mariadb_world: Backend,
    other_connection: pymysql.Connection,  # type: ignore[type-arg]
) -> None:
    world = mariadb_world
    name = lock_name(sa.make_url(world.url))
    assert _get_lock(other_connection, name) == 1

    async def tick_held_then_free(sweeper: Sweeper) -> tuple[Any, Any]:
        held = await sweeper.tick()
        _release_lock(other_connection, name)
        return held, await sweeper.tick()

    held, free = with_sweeper(world, tick_held_then_free)

    assert held.outcome is Outcome.SKIPPED
    assert held.deleted == 0
    assert free.outcome is Outcome.SWEPT
    assert lines_per_run(world) == KEPT
    # The sweeper let go of the lock after its slice: another process may take it.
    assert _get_lock(other_connection, name) == 1
    _release_lock(other_connection, name)


@pytest.mark.mariadb
def test_the_prune_command_waits_for_a_sweeper_holding_the_lock_then_prunes(
    mariadb_world: Backend,
    other_connection: pymysql.Connection,  # type: ignore[type-arg]
) -> None:
    world = mariadb_world
    name = lock_name(sa.make_url(world.url))
    assert _get_lock(other_connection, name) == 1  # a sweeper is mid-slice
    command = subprocess.Popen(
        [sys.executable, "-m", "gql", "prune", "--older-than", "30d"],
        env={**os.environ, "RUNLOG_DATABASE_URL": world.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The command is queued on the lock (MariaDB shows the wait in the
        # process list) and has deleted nothing. Its own wait: another worker's
        # test may be waiting for a lock on the same server, in its own database.
        deadline = time.monotonic() + 30
        while not world.scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
            "WHERE INFO LIKE 'SELECT GET_LOCK(%' AND STATE = 'User lock' AND DB = DATABASE()"
        ):
            assert command.poll() is None, command.communicate()
            assert time.monotonic() < deadline, "the prune command never waited for the sweep lock"
            time.sleep(0.1)
        assert lines_per_run(world) == {**ELIGIBLE, **KEPT}
    finally:
        _release_lock(other_connection, name)
    out, err = command.communicate(timeout=60)
    assert command.returncode == 0, err
    assert f"waiting up to 60s for the sweep lock {name!r}" in err
    assert "pruned 18 lines of 3 runs" in out
    assert lines_per_run(world) == KEPT
    # It let go of the lock when done.
    assert _get_lock(other_connection, name) == 1
    _release_lock(other_connection, name)


def test_the_lock_is_per_database() -> None:
    url = sa.make_url("mysql+aiomysql://root@127.0.0.1:3306/runlog")
    assert lock_name(url) == "runlog.sweep.runlog"
    assert lock_name(url) != lock_name(url.set(database="another"))
    assert len(lock_name(url.set(database="x" * 64))) <= 64


@pytest.mark.mariadb
def test_shutdown_abandons_a_blocked_slice_and_lets_go_of_the_lock(
    mariadb_world: Backend,
    other_connection: pymysql.Connection,  # type: ignore[type-arg]
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = mariadb_world
    url = sa.make_url(world.url)
    blocker = _connect(world, autocommit=False)
    with blocker.cursor() as cur:  # holds a row lock on an eligible line
        cur.execute("SELECT id FROM event_run_log WHERE run_id = 1 LIMIT 1 FOR UPDATE")

    def slice_waiting() -> bool:
        with other_connection.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                "WHERE DB = %s AND INFO LIKE 'DELETE FROM event_run_log%%'",
                (url.database,),
            )
            row = cur.fetchone()
        return bool(row and row[0])

    async def start_then_stop(sweeper: Sweeper) -> None:
        sweeper.start()
        deadline = time.monotonic() + 30
        while not slice_waiting():
            assert time.monotonic() < deadline, "the sweeper never reached its slice"
            await asyncio.sleep(0.02)
        await sweeper.stop(grace=0.2)

    try:
        with_sweeper(world, start_then_stop, interval=0.01)
    finally:
        blocker.rollback()
        blocker.close()

    assert any("abandoned" in r.getMessage() for r in caplog.records)
    # Nothing of the abandoned slice was committed, and the lock is free again.
    assert sum(lines_per_run(world).values()) == sum(ELIGIBLE.values()) + sum(KEPT.values())
    assert _get_lock(other_connection, lock_name(url)) == 1
    _release_lock(other_connection, lock_name(url))


# ── in the server, and the admin query ───────────────────────────────────────

SWEEPS = """sweeps failures linesDeleted
  lastSweep { startedAt finishedAt horizon outcome linesDeleted runsTouched error }"""
STATUS = f"{{ retention {{ enabled retention sweepInterval sliceLimit horizon eligibleLines {SWEEPS} }} }}"
# Without eligibleLines, which counts in the database and so fails while it does.
SWEEPS_ONLY = f"{{ retention {{ {SWEEPS} }} }}"


def wait_for_status(api: Api, done: Callable[[dict[str, Any]], bool], query: str = STATUS) -> dict[str, Any]:
    """Ask the admin query until `done` holds (the sweeper ticks in the background)."""
    deadline = time.monotonic() + 30
    while True:
        status: dict[str, Any] = api.data(query, token=ADMIN)["retention"]
        if done(status):
            return status
        assert time.monotonic() < deadline, f"the sweeper did not get there: {status}"
        time.sleep(0.02)


def test_the_server_sweeps_by_itself_when_retention_is_set(
    world: Backend, make_api: Callable[..., Api]
) -> None:
    api = make_api(retention=30 * DAY, sweep_interval=0.05)

    status = wait_for_status(api, lambda s: s["linesDeleted"] == sum(ELIGIBLE.values()))

    assert lines_per_run(world) == KEPT
    assert status["enabled"] is True
    assert status["retention"] == "30d"
    assert status["lastSweep"]["outcome"] == "SWEPT"
    assert status["lastSweep"]["error"] is None
    assert status["eligibleLines"] == 0


def test_a_failing_sweep_shows_in_the_status_and_the_server_stays_up(
    tables: Backend, make_api: Callable[..., Api]
) -> None:
    api = make_api(retention=30 * DAY, sweep_interval=0.05)
    tables.execute("ALTER TABLE event_runs RENAME TO event_runs_away")

    failing = wait_for_status(
        api,
        lambda s: s["lastSweep"] is not None and s["lastSweep"]["outcome"] == "FAILED",
        SWEEPS_ONLY,
    )

    assert "event_runs" in failing["lastSweep"]["error"]
    assert failing["lastSweep"]["linesDeleted"] == 0
    assert failing["failures"] >= 1
    # The server is up and still takes lines while its sweeper fails.
    assert api.client.get("/healthz").status_code == 200
    assert api.write(3, "note", {"text": "still writing"}) is True

    tables.execute("ALTER TABLE event_runs_away RENAME TO event_runs")
    arrange_world(tables)
    healed = wait_for_status(api, lambda s: s["linesDeleted"] == sum(ELIGIBLE.values()))

    assert healed["lastSweep"]["outcome"] == "SWEPT"
    assert healed["lastSweep"]["error"] is None
    assert lines_per_run(tables) == {**KEPT, 3: KEPT[3] + 1}


def test_the_admin_sees_the_settings_and_what_is_eligible(
    world: Backend, make_api: Callable[..., Api]
) -> None:
    api = make_api(retention=30 * DAY, sweep_interval=3600.0)

    status = api.data(STATUS, token=ADMIN)["retention"]

    assert status["enabled"] is True
    assert status["retention"] == "30d"
    assert status["sweepInterval"] == "1h"
    assert status["sliceLimit"] == 5000
    assert status["eligibleLines"] == sum(ELIGIBLE.values())
    assert status["lastSweep"] is None
    assert status["sweeps"] == 0


def test_with_retention_off_the_status_says_so(world: Backend, make_api: Callable[..., Api]) -> None:
    api = make_api()

    status = api.data(STATUS, token=ADMIN)["retention"]

    assert status["enabled"] is False
    assert status["retention"] is None
    assert status["sweepInterval"] == "1m"
    assert status["horizon"] is None
    assert status["eligibleLines"] is None
    assert lines_per_run(world) == {**ELIGIBLE, **KEPT}


@pytest.mark.parametrize(("token", "code"), [(None, "UNAUTHENTICATED"), (READER, "FORBIDDEN")])
def test_only_an_admin_may_see_retention(
    world: Backend, make_api: Callable[..., Api], token: str | None, code: str
) -> None:
    api = make_api(retention=30 * DAY, reader_tokens=(READER,))

    body = api.post("{ retention { enabled eligibleLines } }", token=token)

    assert body["data"] is None
    assert [e["extensions"]["code"] for e in body["errors"]] == [code]
