"""The README's promises that no other test held: one test per promise, its sentence quoted.

Each of these was found by reading the README sentence by sentence against the
suite: a promise a user could build on that would have broken with every
other test still passing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings, SettingsError

from . import local
from .conftest import ADMIN, Api, Backend, free_port, sqlite_alone, wait_until_healthy
from .test_write_deadline import locked

ROOT = Path(__file__).resolve().parent.parent

KIB, MIB = 1024, 1024 * 1024


@pytest.mark.parametrize(
    ("key", "attribute", "default"),
    [
        ("RUNLOG_WRITE_TIMEOUT", "write_timeout", 3),
        ("RUNLOG_READ_TIMEOUT", "read_timeout", 8),
        ("RUNLOG_PRUNE_TIMEOUT", "prune_timeout", 30),
        ("RUNLOG_CONNECT_TIMEOUT", "connect_timeout", 2),
        ("RUNLOG_POOL_SIZE", "pool_size", 10),
        ("RUNLOG_POOL_RECYCLE", "pool_recycle", 1800),
        ("RUNLOG_MAX_DETAIL_BYTES", "max_detail_bytes", 65536),
        ("RUNLOG_MAX_BODY_BYTES", "max_body_bytes", 4 * MIB),
        ("RUNLOG_MAX_QUERY_BYTES", "max_query_bytes", 128 * KIB),
        ("RUNLOG_MAX_TOKENS", "max_tokens", 2000),
        ("RUNLOG_MAX_DEPTH", "max_depth", 10),
        ("RUNLOG_MAX_ALIASES", "max_aliases", 30),
        ("RUNLOG_MAX_LINES_PER_REQUEST", "max_lines_per_request", 10000),
        ("RUNLOG_MAX_PAGE_BYTES", "max_page_bytes", 8 * MIB),
        ("RUNLOG_HEADER_TIMEOUT", "header_timeout", 10),
        ("RUNLOG_BODY_TIMEOUT", "body_timeout", 30),
        ("RUNLOG_KEEPALIVE_TIMEOUT", "keepalive_timeout", 5),
        ("RUNLOG_MAX_CONNECTIONS", "max_connections", 1000),
        ("RUNLOG_GRAPHIQL", "graphiql", True),
        ("RUNLOG_INTROSPECTION", "introspection", True),
        ("RUNLOG_LOG_LEVEL", "log_level", "INFO"),
        ("RUNLOG_RETENTION", "retention", None),
        ("RUNLOG_SWEEP_INTERVAL", "sweep_interval", 60),
        ("RUNLOG_WAIT_INTERVAL", "wait_interval", 0.5),
        ("RUNLOG_MAX_WAITS", "max_waits", 1000),
        ("RUNLOG_MAX_SUBSCRIPTIONS", "max_subscriptions", 1000),
        ("RUNLOG_MAX_SUBSCRIPTIONS_PER_CONNECTION", "max_subscriptions_per_connection", 20),
        ("RUNLOG_MAX_CATCH_UP_LINES", "max_catch_up_lines", 10000),
        ("RUNLOG_WS_PING_INTERVAL", "ws_ping_interval", 20),
        ("RUNLOG_READ_DATABASE_URL", "read_database_url", None),
        ("RUNLOG_READ_MAX_LAG", "read_max_lag", 5),
        ("RUNLOG_READ_CHECK_INTERVAL", "read_check_interval", 1),
        ("RUNLOG_DATABASE_URL", "database_url", "sqlite+aiosqlite:///runlog.db"),
        ("RUNLOG_ADMIN_TOKEN", "admin_tokens", ()),
        ("RUNLOG_READER_TOKEN", "reader_tokens", ()),
        ("RUNLOG_WRITER_TOKEN", "writer_tokens", ()),
    ],
)
def test_each_setting_left_unset_has_the_default_the_readme_states(
    key: str, attribute: str, default: Any
) -> None:
    """docs/operating.md, Configuration: the `default` column of the table, one row each."""
    assert getattr(Settings.from_env({}), attribute) == default, key


@pytest.mark.parametrize(
    ("key", "lowest", "highest", "below", "above"),
    [
        ("RUNLOG_WRITE_TIMEOUT", "0.05", "4.5", "0.04", "4.6"),
        ("RUNLOG_READ_TIMEOUT", "0.05", "300", "0.04", "301"),
        ("RUNLOG_PRUNE_TIMEOUT", "0.05", "3600", "0.04", "3601"),
        ("RUNLOG_CONNECT_TIMEOUT", "0.05", "60", "0.04", "61"),
        ("RUNLOG_POOL_SIZE", "1", "1000", "0", "1001"),
        ("RUNLOG_POOL_RECYCLE", "1", str(7 * 86400), "0.5", str(7 * 86400 + 1)),
        ("RUNLOG_MAX_DEPTH", "1", "100", "0", "101"),
        ("RUNLOG_MAX_SUBSCRIPTIONS", "1", "100000", "0", "100001"),
        ("RUNLOG_MAX_SUBSCRIPTIONS_PER_CONNECTION", "1", "1000", "0", "1001"),
        ("RUNLOG_MAX_CATCH_UP_LINES", "500", "1000000", "499", "1000001"),
        ("RUNLOG_WS_PING_INTERVAL", "1", "3600", "0.5", "3601"),
        ("RUNLOG_MAX_ALIASES", "1", "1000", "0", "1001"),
        ("RUNLOG_MAX_TOKENS", "1", "100000", "0", "100001"),
        ("RUNLOG_MAX_LINES_PER_REQUEST", "1", "1000000", "0", "1000001"),
        ("RUNLOG_MAX_PAGE_BYTES", "1024", str(1024 * MIB), "1023", str(1024 * MIB + 1)),
        ("RUNLOG_MAX_DETAIL_BYTES", "1", str(16 * MIB), "0", str(16 * MIB + 1)),
        ("RUNLOG_MAX_QUERY_BYTES", "1", str(512 * KIB), "0", str(512 * KIB + 1)),
        ("RUNLOG_MAX_BODY_BYTES", "1", str(1024 * MIB), "0", str(1024 * MIB + 1)),
        ("RUNLOG_RETENTION", "1m", "36500d", "59s", "36501d"),
        ("RUNLOG_SWEEP_INTERVAL", "1s", "7d", "0.5s", "8d"),
        ("RUNLOG_WAIT_INTERVAL", "0.05", "5", "0.04", "5.1"),
        ("RUNLOG_MAX_WAITS", "1", "1000000", "0", "1000001"),
        ("RUNLOG_READ_MAX_LAG", "0.1", "3600", "0.09", "3601"),
        ("RUNLOG_READ_CHECK_INTERVAL", "0.1", "60", "0.09", "61"),
    ],
)
def test_a_number_past_its_range_is_refused_never_clamped(
    key: str, lowest: str, highest: str, below: str, above: str
) -> None:
    """README, Configuration: "Every number has a range and a value outside it is
    refused, never clamped": timeouts from 0.05 s up to 4.5 s (write), 300 s (read),
    3600 s (prune) and 60 s (connect); RUNLOG_POOL_SIZE up to 1000;
    RUNLOG_POOL_RECYCLE 1 s to 7 days; the RUNLOG_MAX_* limits up to 100 (depth),
    1000 (aliases), 100000 (tokens), 1000000 (lines), 16 MiB (detail), 512 KiB
    (query), 1 GiB (body); RUNLOG_RETENTION 1m to 36500d; RUNLOG_SWEEP_INTERVAL
    1s to 7d; RUNLOG_WAIT_INTERVAL 0.05 s to 5 s; RUNLOG_MAX_WAITS 1 to 1000000;
    RUNLOG_READ_MAX_LAG 0.1 s to 3600 s; RUNLOG_READ_CHECK_INTERVAL 0.1 s to 60 s."""
    for inside in (lowest, highest):
        Settings.from_env({key: inside})  # each end is accepted
    for outside in (below, above):
        with pytest.raises(SettingsError) as caught:
            Settings.from_env({key: outside})
        assert key in str(caught.value)


@pytest.mark.parametrize(
    ("primary", "replica"),
    [
        ("sqlite+aiosqlite:///runlog.db", "mysql+aiomysql://root@127.0.0.1:3322/test"),
        ("mysql+aiomysql://root@127.0.0.1:3321/test", "sqlite+aiosqlite:///replica.db"),
    ],
)
def test_a_read_replica_with_sqlite_on_either_side_stops_start_up(primary: str, replica: str) -> None:
    """docs/operating.md, A read replica: "SQLite has no replicas:
    `RUNLOG_READ_DATABASE_URL` with SQLite on either side stops start-up with a
    message saying so"."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"RUNLOG_DATABASE_URL": primary, "RUNLOG_READ_DATABASE_URL": replica})
    assert "RUNLOG_READ_DATABASE_URL" in str(caught.value)
    assert "SQLite" in str(caught.value)


def test_enum_values_in_a_detail_are_stored_as_their_graphql_names(tables: Backend, api: Api) -> None:
    """README, Writing a line: "Enum values in details are stored as their GraphQL
    names (`"via": "FIRING"`)." Other tools read the stored text as it is."""
    assert api.write(5, "phase.advanced", {"via": "FIRING", "firing": "boss.spawned"})
    assert api.write(5, "step.refused", {"refusal": "OVER_CAP", "cap": "budget", "limit": 3, "used": 3})
    stored = [json.loads(text) for (text,) in tables.rows("SELECT detail FROM event_run_log ORDER BY id")]
    assert stored[0]["via"] == "FIRING"
    assert stored[1]["refusal"] == "OVER_CAP"


def _lines_of_a_terminal_run(backend: Backend, run_id: int, count: int) -> None:
    backend.add_run(run_id, "completed", "2026-01-01 00:00:00", "2026-01-01 00:00:00")
    # One INSERT ... SELECT over the numbers 1 to `count` (row by row, 50,001 lines took MariaDB 14 s).
    numbers = (
        f"seq_1_to_{int(count)}"
        if backend.name == "mariadb"
        else f"(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {int(count)}) "
        "SELECT i FROM n)"
    )
    backend.execute(
        "INSERT INTO event_run_log (run_id, kind, detail, at) "
        f"SELECT :run_id, 'note', NULL, :at FROM {numbers}",
        run_id=run_id,
        at="2025-12-31 00:00:00.000",
    )


def test_a_prune_call_deletes_at_most_50000_lines_whatever_limit_it_asks(tables: Backend, api: Api) -> None:
    """README and contract, pruneTerminal: "at most `limit` lines in one call
    (omitted, null or 0 means 5000; clamped to 1..50000)"."""
    _lines_of_a_terminal_run(tables, 1, 50_001)
    prune = 'mutation($limit: Int) { pruneTerminal(before: "2026-10-01T00:00:00Z", limit: $limit) }'
    assert api.data(prune, {"limit": 60_000}, token=ADMIN) == {"pruneTerminal": 50_000}
    assert api.data(prune, {"limit": 60_000}, token=ADMIN) == {"pruneTerminal": 1}


def _prune_command(backend: Backend, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gql", "prune", *args],
        env={**os.environ, "RUNLOG_DATABASE_URL": backend.url, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_prune_commands_limit_is_clamped_to_50000_like_the_mutations(tables: Backend) -> None:
    """README, The `prune` command: "`--limit` is the slice size, 5000 by default,
    clamped to 1..50000 like the mutation's"."""
    _lines_of_a_terminal_run(tables, 1, 50_001)
    done = _prune_command(tables, "--older-than", "1d", "--limit", "60000")
    assert done.returncode == 0, done.stderr
    assert "--limit 60000 is clamped to 50000" in done.stderr
    assert "pruned 50,001 lines of 1 run in 2 slices of up to 50,000 lines" in done.stdout
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0


def test_the_prune_command_exits_2_on_a_bad_setting_and_deletes_nothing(tables: Backend) -> None:
    """README, The `prune` command: "Exit status: ... 2 when the duration is not
    accepted ... or a setting is bad"."""
    _lines_of_a_terminal_run(tables, 1, 3)
    done = _prune_command(tables, "--older-than", "1d", RUNLOG_PRUNE_TIMEOUT="inf")
    assert done.returncode == 2, done.stderr
    assert "RUNLOG_PRUNE_TIMEOUT" in done.stderr
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 3


def test_init_db_adds_both_read_indexes_to_an_existing_log(backend: Backend) -> None:
    """README, On MySQL or MariaDB: "`init-db` also adds the two indexes the reads
    use to an existing `event_run_log` that lacks them: `(run_id, at, id)` ... and
    `(run_id, kind, at, id)` so a read filtered to a rare kind is an index range
    (on SQLite, the same two over `at` normalised to UTC)"."""
    backend.execute(
        "CREATE TABLE event_run_log (id BIGINT AUTO_INCREMENT PRIMARY KEY, run_id INT NOT NULL, "
        "step_id INT NULL, kind VARCHAR(64) NOT NULL, phase INT NULL, detail TEXT NULL, "
        "at DATETIME(3) NOT NULL)"
        if backend.name == "mariadb"
        else "CREATE TABLE event_run_log (id INTEGER PRIMARY KEY, run_id INT NOT NULL, "
        "step_id INT NULL, kind VARCHAR(64) NOT NULL, phase INT NULL, detail TEXT NULL, "
        "at DATETIME NOT NULL)"
    )
    done = subprocess.run(
        [sys.executable, "-m", "gql", "init-db"],
        env={**os.environ, "RUNLOG_DATABASE_URL": backend.url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    indexes = {
        name
        for (name,) in backend.rows(
            "SELECT DISTINCT index_name FROM information_schema.statistics "
            "WHERE table_schema = DATABASE() AND table_name = 'event_run_log'"
            if backend.name == "mariadb"
            else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'event_run_log'"
        )
    }
    if backend.name == "mariadb":
        assert {"ix_event_run_log_run_at", "ix_event_run_log_run_kind_at"} <= indexes
    else:
        assert {"ix_event_run_log_run_utc", "ix_event_run_log_run_kind_utc"} <= indexes


def test_the_start_up_log_names_the_database_with_its_password_hidden(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """README, What is logged: "At start-up: the database URL with its password
    hidden, and which roles are open"."""
    url = sa.make_url(backend.url)
    if backend.name == "mariadb":
        url = url.set(password="start-up-secret-1")
    settings = backend.settings(database_url=url.render_as_string(hide_password=False))
    with caplog.at_level(logging.INFO, logger="gql"), TestClient(create_app(settings)):
        pass
    assert url.render_as_string(hide_password=True) in caplog.text
    assert "start-up-secret-1" not in caplog.text


@contextmanager
def serving(tmp_path: Path, url: str, **env: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`python -m gql serve` on this checkout's code and `url`, its output in serve.log."""
    port = free_port()
    with (tmp_path / "serve.log").open("w") as log:  # a file: a pipe nobody reads would fill
        server = subprocess.Popen(
            [sys.executable, "-m", "gql", "serve", "--port", str(port)],
            env={**os.environ, "PYTHONPATH": str(ROOT), "RUNLOG_DATABASE_URL": url, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_healthy(base, server)
        yield base, server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@sqlite_alone
def test_past_the_connection_cap_a_new_request_gets_503_at_once(tables: Backend, tmp_path: Path) -> None:
    """README, Limits: "past `RUNLOG_MAX_CONNECTIONS` (1000) new requests get 503 at once"."""
    with serving(tmp_path, tables.url, RUNLOG_MAX_CONNECTIONS="3") as (base, _):
        port = int(base.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            # Three requests in flight: each waits for a body it is never sent.
            for conn in held:
                conn.sendall(b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n")
            deadline = time.monotonic() + 20
            while (late := local.get(f"{base}/healthz", timeout=10)).status_code == 200:
                assert time.monotonic() < deadline, "the three requests in flight never held the cap"
                time.sleep(0.05)
            assert late.status_code == 503 and "RUNLOG_MAX_CONNECTIONS" in late.text, late.text
            assert local.get(f"{base}/livez").status_code == 200  # a liveness probe, whatever the count
        finally:
            for conn in held:
                conn.close()
        # The cap counts what is in flight now: once those go, requests are answered again.
        deadline = time.monotonic() + 20
        while local.get(f"{base}/healthz").status_code != 200:
            assert time.monotonic() < deadline, "still refused once the held connections closed"
            time.sleep(0.1)


def test_sigterm_lets_a_request_in_flight_finish(tables: Backend, tmp_path: Path) -> None:
    """README, Configuration: "SIGTERM stops it gracefully: requests in flight
    finish, then the pool is closed." A write waiting on a locked table when the
    signal comes is still answered, and stored."""
    # Reads need a token, so the test's scrapes of /metrics read no holds (they would wait at the
    # locked table too, on a reader's connection, and the count below would never be the write's).
    with serving(tmp_path, tables.url, RUNLOG_WRITE_TIMEOUT="4.5", RUNLOG_READER_TOKEN="r" * 32) as (
        base,
        server,
    ):
        with locked(tables, seconds=2.0), ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                local.post,
                f"{base}/graphql",
                json={"query": 'mutation { writeRunLog(runId: 9, kind: "note", detail: {text: "late"}) }'},
                timeout=30,
            )
            # Until the write is at the locked table: its INSERT holds a pooled connection.
            deadline = time.monotonic() + 30
            while "runlog_pool_connections_in_use 1.0" not in local.get(f"{base}/metrics").text.splitlines():
                assert not answer.done(), answer.result()
                assert time.monotonic() < deadline, "the write never reached the locked table"
                time.sleep(0.02)
            server.send_signal(signal.SIGTERM)
            response = answer.result(timeout=30)
        assert response.json() == {"data": {"writeRunLog": True}}
        assert server.wait(timeout=20) in (0, -signal.SIGTERM)
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log WHERE run_id = 9") == 1


@pytest.mark.mariadb
def test_an_interrupted_prune_exits_130_and_its_slice_in_flight_is_rolled_back(mariadb: Backend) -> None:
    """README, The `prune` command: "Exit status: ... 130 when interrupted (the
    slice in flight is rolled back)". MariaDB alone: a row lock held from another
    session is what keeps the slice in flight (SQLite's lock wait is bounded by
    the write timeout, too short to interrupt it reliably)."""
    mariadb.create_tables()
    _lines_of_a_terminal_run(mariadb, 1, 4)
    url = sa.make_url(mariadb.url)
    holder = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
    )
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM event_run_log ORDER BY id DESC LIMIT 1 FOR UPDATE")
        process = subprocess.Popen(
            [sys.executable, "-m", "gql", "prune", "--older-than", "1d"],
            env={**os.environ, "RUNLOG_DATABASE_URL": mariadb.url, "RUNLOG_PRUNE_TIMEOUT": "120"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as at a terminal, even where the suite was started in the background
            # (a shell without job control starts it ignoring SIGINT, and Python keeps that).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 60
        while not mariadb.scalar(
            "SELECT COUNT(*) FROM information_schema.processlist "
            "WHERE db = DATABASE() AND info LIKE 'DELETE FROM event_run_log%'"
        ):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the prune's DELETE never reached the locked line"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    finally:
        holder.rollback()  # the locked line is free: a DELETE still at the server may go on now
        holder.close()
    assert process.returncode == 130, err
    assert "interrupted after 0 lines; the slice in flight was rolled back" in err
    deadline = time.monotonic() + 20
    while mariadb.scalar(
        "SELECT COUNT(*) FROM information_schema.processlist "
        "WHERE db = DATABASE() AND info LIKE 'DELETE FROM event_run_log%'"
    ):
        assert time.monotonic() < deadline, "the abandoned DELETE is still at the server"
        time.sleep(0.1)
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 4


@pytest.mark.mariadb
def test_a_sweepers_slice_that_does_not_finish_in_time_is_abandoned_and_rolled_back(mariadb: Backend) -> None:
    """README, The sweeper: "A slice that has not finished within 60 seconds is
    abandoned and rolled back." The 60 s is the sweeper's own; the test holds a
    slice past a shorter one, with a row lock on a line it would delete."""
    from gql.domain.retention import Outcome, Sweeper
    from gql.store.db import create_engine

    settings = mariadb.settings(retention=30 * 86400.0)
    mariadb.create_tables()
    _lines_of_a_terminal_run(mariadb, 1, 4)

    async def both() -> tuple[float, Any]:
        engine = create_engine(settings)
        try:
            made = Sweeper.from_settings(engine, settings)
            assert made is not None
            short = Sweeper(engine, retention=30 * 86400.0, interval=3600.0, slice_timeout=0.5)
            return made.slice_timeout, await short.tick()
        finally:
            await engine.dispose()

    url = sa.make_url(mariadb.url)
    holder = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=url.database,
    )
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM event_run_log ORDER BY id DESC LIMIT 1 FOR UPDATE")
        default, sweep = asyncio.run(both())
    finally:
        holder.rollback()
        holder.close()
    assert default == 60
    assert sweep.outcome is Outcome.FAILED
    assert sweep.error == "the database did not finish a slice within 0.5s"
    deadline = time.monotonic() + 20
    while mariadb.scalar(
        "SELECT COUNT(*) FROM information_schema.processlist "
        "WHERE db = DATABASE() AND info LIKE 'DELETE FROM event_run_log%'"
    ):
        assert time.monotonic() < deadline, "the abandoned DELETE is still at the server"
        time.sleep(0.1)
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 4


def test_the_contents_of_reads_and_stored_writes_are_never_logged(tables: Backend, tmp_path: Path) -> None:
    """README, What is logged: "Never logged: ... the contents of reads and stored
    writes." Not even with RUNLOG_LOG_LEVEL=DEBUG: a stored line's detail is the
    events system's data, and the log is an operator's."""
    marker = "stored-and-read-7f3a"
    with serving(tmp_path, tables.url, RUNLOG_LOG_LEVEL="DEBUG") as (base, server):
        written = local.post(
            f"{base}/graphql",
            json={
                "query": f'mutation {{ writeRunLog(runId: 3, kind: "note", detail: {{text: "{marker}"}}) }}'
            },
        )
        assert written.json() == {"data": {"writeRunLog": True}}
        read = local.post(
            f"{base}/graphql",
            json={"query": "{ runLog(runId: 3) { nodes { detail { ... on NoteDetail { text } } } } }"},
        )
        assert read.json()["data"]["runLog"]["nodes"] == [{"detail": {"text": marker}}]
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    logged = (tmp_path / "serve.log").read_text()
    assert "DEBUG" in logged  # the level took
    assert marker not in logged


def test_a_prune_slice_is_5000_lines_unless_told_otherwise(tables: Backend, api: Api) -> None:
    """README, Retention: "Pruning always goes one bounded slice at a time: the ids
    of at most 5,000 eligible lines"; pruneTerminal's limit "omitted, null or 0
    means 5000", and the `prune` command's `--limit` is "5000 by default"."""
    _lines_of_a_terminal_run(tables, 1, 5_001)
    prune = 'mutation { pruneTerminal(before: "2026-10-01T00:00:00Z") }'
    assert api.data(prune, token=ADMIN) == {"pruneTerminal": 5_000}
    assert api.data(prune, token=ADMIN) == {"pruneTerminal": 1}
    _lines_of_a_terminal_run(tables, 2, 5_001)
    done = _prune_command(tables, "--older-than", "1d")
    assert done.returncode == 0, done.stderr
    assert "pruned 5,001 lines of 1 run in 2 slices of up to 5,000 lines" in done.stdout


@pytest.mark.mariadb
def test_the_pool_holds_pool_size_and_as_many_overflow_and_a_wait_for_one_is_bounded(
    mariadb: Backend,
) -> None:
    """README, Configuration: `RUNLOG_POOL_SIZE` is "pooled connections (plus as
    many overflow) per process"; `RUNLOG_CONNECT_TIMEOUT` is "seconds to connect
    to MySQL/MariaDB, and to wait for a pooled connection"."""
    from gql.store.db import create_engine

    engine = create_engine(mariadb.settings(pool_size=2, connect_timeout=0.5))

    async def hold_four_then_ask_a_fifth() -> float:
        held = [await engine.connect() for _ in range(4)]  # 2 pooled, 2 overflow
        try:
            started = time.monotonic()
            with pytest.raises(sa.exc.TimeoutError):
                await engine.connect()
            return time.monotonic() - started
        finally:
            for conn in held:
                await conn.close()
            await engine.dispose()

    assert asyncio.run(hold_four_then_ask_a_fifth()) < 10  # bounded (0.5 s asked), not SQLAlchemy's 30 s


def test_serve_binds_127_0_0_1_port_8000_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """README, Configuration: "`.venv/bin/python -m gql serve --host H --port P`
    (default 127.0.0.1:8000) serves the API"."""
    from gql import cli

    seen: dict[str, Any] = {}

    def serve(settings: Settings, host: str, port: int, workers: int) -> int:
        seen.update(host=host, port=port)
        return 0

    monkeypatch.setattr(cli, "_serve", serve)  # the address chosen, not a server started on it
    monkeypatch.delenv("RUNLOG_DATABASE_URL", raising=False)
    assert cli.main(["serve"]) == 0
    assert seen == {"host": "127.0.0.1", "port": 8000}


def test_a_query_text_over_16_kib_is_parsed_each_time_never_cached(api: Api) -> None:
    """README, Performance: parsed documents are cached "bounded at 256 texts and
    32 MiB ...; a text over 16 KiB is parsed each time, never cached"."""
    caches = api.document_cache()
    small = "{ __typename }\n#" + "s" * (15 * KIB)
    large = "{ __typename }\n#" + "l" * (17 * KIB)
    for text in (small, large, large):
        assert api.data(text) == {"__typename": "Query"}
    assert small in caches.texts
    assert large not in caches.texts


def test_the_sweeper_ticks_every_interval_give_or_take_20_percent(tables: Backend) -> None:
    """README, The sweeper: "every `RUNLOG_SWEEP_INTERVAL`, give or take 20% so that
    several servers do not tick in lockstep, it deletes one slice". No speed is
    asserted: each wait is at least 80% of the interval, and the waits differ."""
    from gql.domain.retention import Sweep, Sweeper
    from gql.store.db import create_engine

    interval = 0.3
    spans: list[tuple[float, float]] = []

    class Timed(Sweeper):
        async def tick(self) -> Sweep:
            started = time.monotonic()
            try:
                return await super().tick()
            finally:
                spans.append((started, time.monotonic()))

    async def run() -> None:
        engine = create_engine(tables.settings())
        sweeper = Timed(engine, retention=86400.0, interval=interval)
        try:
            sweeper.start()
            deadline = time.monotonic() + 60
            while len(spans) < 9:
                assert time.monotonic() < deadline, f"{len(spans)} ticks in 60 s"
                await asyncio.sleep(0.05)
            await sweeper.stop()
        finally:
            await engine.dispose()

    asyncio.run(run())
    waits = [later[0] - earlier[1] for earlier, later in itertools.pairwise(spans)]
    assert min(waits) >= 0.8 * interval - 0.01, waits
    assert max(waits) <= 1.2 * interval + 1.0, waits  # generous: a loaded machine is late, never early
    assert max(waits) - min(waits) > 0.1 * interval, f"the waits do not vary: {waits}"


def test_without_mariadb_the_suite_runs_sqlite_and_says_so_loudly_unless_mariadb_is_required(
    tmp_path: Path,
) -> None:
    """README, Development: "If MariaDB cannot be reached, the MariaDB half is left
    out and the run ends with a loud banner saying so; CI (`.ci/run`) sets
    `RUNLOG_TEST_REQUIRE_MARIADB=1`, which makes the MariaDB half fail instead"."""
    one = "tests/test_promises.py::test_enum_values_in_a_detail_are_stored_as_their_graphql_names"
    env = {**os.environ, "RUNLOG_TEST_MARIADB_URL": f"mysql+aiomysql://root@127.0.0.1:{free_port()}/"}
    env.pop("RUNLOG_TEST_REQUIRE_MARIADB", None)

    def suite(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", one, "-q", "-p", "no:cacheprovider"],
            env={**env, **extra},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    laptop = suite()
    assert laptop.returncode == 0, laptop.stdout
    assert "1 passed, 1 deselected" in laptop.stdout
    assert "THE MARIADB HALF DID NOT RUN" in laptop.stdout
    ci = suite(RUNLOG_TEST_REQUIRE_MARIADB="1")
    assert ci.returncode == 1, ci.stdout
    assert "1 passed, 1 error" in ci.stdout
    assert "MariaDB is required here and unreachable" in ci.stdout


def test_the_image_runs_as_a_non_root_user_on_0_0_0_0_8000_with_sqlite_on_data_and_a_healthcheck() -> None:
    """README, Docker: "The image runs as a non-root user, serves on 0.0.0.0:8000
    with the SQLite database on the `/data` volume, and has a `HEALTHCHECK` on
    `/livez`." Read from the Dockerfile (building the image is for CI)."""
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), users
    assert "ENV RUNLOG_DATABASE_URL=sqlite+aiosqlite:////data/runlog.db" in lines
    assert 'VOLUME ["/data"]' in lines
    text = "\n".join(lines)
    assert "HEALTHCHECK" in text and "/livez" in text.split("HEALTHCHECK", 1)[1]
    (command,) = [line for line in lines if line.startswith("CMD ") and "gql" in line]
    served = ["python", "-m", "gql", "serve", "--host", "0.0.0.0", "--port", "8000"]  # noqa: S104 (the image's promise)
    assert json.loads(command[4:]) == served


@sqlite_alone
def test_uvicorns_access_log_has_the_client_method_path_and_status(tables: Backend, tmp_path: Path) -> None:
    """README, What is logged: "uvicorn's access log: client address, method, path
    and status"."""
    with serving(tmp_path, tables.url) as (base, server):
        assert local.post(f"{base}/graphql", json={"query": "{ __typename }"}).status_code == 200
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    logged = (tmp_path / "serve.log").read_text()
    assert re.search(r'127\.0\.0\.1:\d+ - "POST /graphql HTTP/1\.1" 200', logged), logged[-2000:]


@pytest.mark.mariadb
def test_a_prune_process_that_dies_mid_slice_lets_go_of_the_sweep_lock(mariadb: Backend) -> None:
    """README, One sweeper at a time: "A process that dies mid-slice loses its
    connection, and with it the lock." The `prune` command holds the lock for its
    drain; killed (SIGKILL, no clean-up) while its slice waits on a row lock, the
    lock is free for the next process at once."""
    from gql.domain.retention import lock_name

    mariadb.create_tables()
    _lines_of_a_terminal_run(mariadb, 1, 4)
    url = sa.make_url(mariadb.url)

    def connect(autocommit: bool) -> pymysql.Connection:  # type: ignore[type-arg]
        return pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database,
            autocommit=autocommit,
        )

    holder, other = connect(autocommit=False), connect(autocommit=True)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM event_run_log ORDER BY id DESC LIMIT 1 FOR UPDATE")
        process = subprocess.Popen(
            [sys.executable, "-m", "gql", "prune", "--older-than", "1d"],
            env={**os.environ, "RUNLOG_DATABASE_URL": mariadb.url, "RUNLOG_PRUNE_TIMEOUT": "120"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not mariadb.scalar(
            "SELECT COUNT(*) FROM information_schema.processlist "
            "WHERE db = DATABASE() AND info LIKE 'DELETE FROM event_run_log%'"
        ):
            assert process.poll() is None, "the prune ended before its slice"
            assert time.monotonic() < deadline, "the prune's DELETE never reached the locked line"
            time.sleep(0.1)
        with other.cursor() as cur:
            cur.execute("SELECT IS_USED_LOCK(%s) IS NOT NULL", (lock_name(url),))
            assert cur.fetchone() == (1,), "the prune holds the sweep lock while it drains"
        process.kill()
        process.wait(timeout=30)
        with other.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 10)", (lock_name(url),))
            assert cur.fetchone() == (1,)
            cur.execute("SELECT RELEASE_LOCK(%s)", (lock_name(url),))
    finally:
        holder.rollback()
        holder.close()
        other.close()


def test_a_setting_set_to_an_empty_value_counts_as_unset() -> None:
    """README, Configuration: "Every setting is an environment variable; one set
    to an empty value counts as unset." So an empty RUNLOG_READER_TOKEN leaves
    reads open, as an unset one does (and the start-up log says so)."""
    keys = [
        "RUNLOG_DATABASE_URL", "RUNLOG_ADMIN_TOKEN", "RUNLOG_READER_TOKEN", "RUNLOG_WRITER_TOKEN",
        "RUNLOG_WRITE_TIMEOUT", "RUNLOG_READ_TIMEOUT", "RUNLOG_POOL_SIZE", "RUNLOG_MAX_DETAIL_BYTES",
        "RUNLOG_GRAPHIQL", "RUNLOG_LOG_LEVEL", "RUNLOG_RETENTION", "RUNLOG_SWEEP_INTERVAL",
    ]  # fmt: skip
    assert Settings.from_env(dict.fromkeys(keys, "")) == Settings.from_env({})
    assert Settings.from_env(
        {"RUNLOG_READER_TOKEN": " ", "RUNLOG_WRITER_TOKEN_NEXT": ""}
    ) == Settings.from_env({})


def _documented_gql_commands() -> list[list[str]]:
    """Each `.venv/bin/python -m gql ...` line of a shell block in the README and docs/, as its words."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        block: str | None = None  # the language of the code block the line is in
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                block = line.strip()[3:] if block is None else None
                continue
            if block in ("sh", "bash", "") and line.startswith(".venv/bin/python -m gql "):
                command = line.split(" #", 1)[0].split(" >", 1)[0]
                found.append(shlex.split(command)[3:])
    return found


def test_every_gql_command_the_readme_and_docs_show_is_accepted_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """README: "Every `.venv/bin/python -m gql ...` command here and in `docs/` runs
    as written". Each documented command line is parsed by the CLI and reaches its
    command; what the command then does is other tests' business."""
    from gql import cli

    commands = _documented_gql_commands()
    assert len(commands) >= 5, commands
    reached: list[str] = []

    async def init_db(settings: Settings, **_: Any) -> int:
        reached.append("init-db")
        return 0

    def record(name: str) -> Any:
        return lambda *args, **kwargs: reached.append(name) or 0

    monkeypatch.setattr(cli, "_init_db", init_db)
    monkeypatch.setattr(cli, "_prune", record("prune"))
    monkeypatch.setattr(cli, "_serve", record("serve"))
    monkeypatch.setattr(cli, "_demo", record("demo"))
    monkeypatch.setattr(cli, "_check_schema", record("check-schema"))

    async def fold_words(settings: Settings) -> int:
        reached.append("fold-words")
        return 0

    monkeypatch.setattr(cli, "_fold_words", fold_words)
    # The MySQL/MariaDB examples (--workers among them) are written for a MySQL URL.
    monkeypatch.setenv("RUNLOG_DATABASE_URL", "mysql+aiomysql://runlog:secret@db.internal:3306/events")
    for args in commands:
        reached.clear()
        assert cli.main(args) == 0, args
        assert args[0] == "export-schema" or (reached and reached[-1] in (args[0], "serve")), (args, reached)


@pytest.mark.mariadb
def test_the_blocking_run_lookup_is_bounded_by_the_read_timeout(mariadb: Backend) -> None:
    """README, Configuration: `RUNLOG_READ_TIMEOUT` is "seconds a page read may
    take (and the lookup of the runs its `blockingRun` fields name)". With
    `event_runs` locked, the page still answers by the bound, its lines whole and
    each `blockingRun` an error."""
    mariadb.create_tables()
    mariadb.add_run(37, "live", None, "2026-01-01 00:00:00")
    with TestClient(create_app(mariadb.settings(read_timeout=1))) as client:
        api = Api(client)
        assert api.write(38, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "invasion:Yew"})
        url = sa.make_url(mariadb.url)
        locker = pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database,
            autocommit=True,
        )
        try:
            with locker.cursor() as cur:
                cur.execute("LOCK TABLES event_runs WRITE")
            started = time.monotonic()
            with ThreadPoolExecutor(1) as pool:
                answer = pool.submit(
                    api.post,
                    "{ runLog(runId: 38) { nodes { kindName detail { ... on RunBlockedDetail"
                    " { blockingRunId blockingRun { id status } } } } } }",
                )
                try:
                    body = answer.result(timeout=10)  # past it, the lock goes and the test fails
                finally:
                    with locker.cursor() as cur:
                        cur.execute("UNLOCK TABLES")
            took = time.monotonic() - started
        finally:
            with locker.cursor() as cur:
                cur.execute("UNLOCK TABLES")
            locker.close()
    assert took < 10, f"answered after {took:.1f}s with a 1 s read timeout"
    assert body["data"], body
    (line,) = body["data"]["runLog"]["nodes"]
    assert line == {"kindName": "run.blocked", "detail": {"blockingRunId": "37", "blockingRun": None}}
    assert [error["path"][-1] for error in body["errors"]] == ["blockingRun"]


@pytest.mark.mariadb
def test_a_pooled_connection_is_replaced_after_the_pool_recycle_time(mariadb: Backend) -> None:
    """README, Configuration: `RUNLOG_POOL_RECYCLE` is "seconds after which a
    pooled MySQL/MariaDB connection is replaced"."""
    from gql.store.db import create_engine

    async def connection_ids() -> tuple[int, int, int]:
        engine = create_engine(mariadb.settings(pool_size=1, pool_recycle=1.0))
        try:

            async def one() -> int:
                async with engine.connect() as conn:
                    return int((await conn.execute(sa.text("SELECT CONNECTION_ID()"))).scalar_one())

            first, again = await one(), await one()
            await asyncio.sleep(1.5)  # time past the recycle time is what the promise is about
            return first, again, await one()
        finally:
            await engine.dispose()

    first, again, later = asyncio.run(connection_ids())
    assert first == again, "a connection inside its recycle time is reused"
    assert later != first, "a connection past its recycle time is replaced"


def test_each_database_unavailable_is_logged_with_its_request_id_and_the_drivers_one_line_account(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """README, What is logged: "Every `DATABASE_UNAVAILABLE`: the request id and the
    driver's one-line account". A MySQL URL where nothing listens: no database of
    the fixtures can refuse a connection the way a server that is down does."""
    settings = Settings(
        database_url=f"mysql+aiomysql://root@127.0.0.1:{free_port()}/events", connect_timeout=1
    )
    with caplog.at_level(logging.INFO, logger="gql"), TestClient(create_app(settings)) as client:
        body = Api(client).post("{ runLog(runId: 1) { nodes { id } } }")
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "DATABASE_UNAVAILABLE"
    request_id = error["extensions"]["requestId"]
    (record,) = [r for r in caplog.records if request_id in r.getMessage()]
    assert "Can't connect" in record.getMessage()
    assert "\n" not in record.getMessage() and record.exc_info is None  # one line, no stack
