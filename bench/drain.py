"""Drain a backlog on MariaDB with the sweeper's slices while writers keep writing.

    python -m bench.drain            # 1,000,000 eligible lines
    python -m bench.drain --quick    # 100,000, to try it

Not a test: it creates a database of its own on the MariaDB server at
RUNLOG_BENCH_MARIADB_URL (default mysql+aiomysql://root@127.0.0.1:3306/), fills
it with a backlog of lines of terminal runs that ended long ago, starts the
service (`python -m gql serve`) on it, and then, while writer tasks keep
calling `writeRunLog` for a live run over HTTP, takes the sweeper's slices
(`Sweeper.tick`: the sweep lock, then one `prune_slice` of 5,000) back to back
until one finds nothing. It prints the slice times, the writes attempted and
failed (which must be 0), and the total drain time, checks that the drain kept
what it had to keep, and drops its database at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import httpx

from gql.domain.retention import Outcome, Sweeper, lock_name
from gql.settings import Settings
from gql.store.db import create_engine, init_db
from tests import local

from .mariadb import MARIADB_URL, connect

TERMINAL = ("completed", "cancelled", "failed", "missed")
RETENTION = 30 * 86400.0
LIVE_RUN = 900_000  # a run that is running now: its lines are never eligible
KEPT_RUNS = range(800_001, 800_006)  # old but not terminal: keep every line
KEPT_PER_RUN = 200
WRITE = 'mutation W($runId: ID!, $detail: JSON) { writeRunLog(runId: $runId, kind: "note", detail: $detail) }'
DETAIL = '{"from": "scheduled", "to": "live", "reason": "the bench filled this line"}'


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a backlog of 100,000 lines, to try it")
    parser.add_argument("--lines", type=int, help="eligible lines to fill (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=1000, help="terminal runs they belong to (default 1000)")
    parser.add_argument("--writers", type=int, default=4, help="concurrent writer tasks (default 4)")
    parser.add_argument(
        "--rate", type=float, default=200.0, help="writes per second, all writers together (default 200)"
    )
    args = parser.parse_args()
    lines = args.lines or (100_000 if args.quick else 1_000_000)
    return asyncio.run(_bench(lines, args.runs, args.writers, args.rate))


# ── the database ─────────────────────────────────────────────────────────────


def _fill(database: str, lines: int, runs: int) -> None:
    """The backlog: `lines` lines of `runs` terminal runs that ended 60 to 90 days ago.

    One multi-row INSERT of a line per run, then INSERT ... SELECT doubling
    (the last round takes only what is still missing), so a million lines take
    a few statements rather than a million round trips.
    """
    conn = connect()
    conn.select_db(database)
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, %s, "
            "UTC_TIMESTAMP() - INTERVAL %s DAY, UTC_TIMESTAMP() - INTERVAL %s DAY)",
            [(run, TERMINAL[run % 4], 60 + run % 30, 60 + run % 30) for run in range(1, runs + 1)],
        )
        cur.executemany(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES "
            "(%s, 'running', NULL, UTC_TIMESTAMP() - INTERVAL 90 DAY)",
            [(run,) for run in [*KEPT_RUNS, LIVE_RUN]],
        )
        seed = min(runs, lines)
        # pymysql sends an executemany INSERT ... VALUES as multi-row INSERTs.
        cur.executemany(
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
            "VALUES (%s, 1, 'run.status', 1, %s, UTC_TIMESTAMP(3) - INTERVAL 95 DAY)",
            [(run, DETAIL) for run in range(1, seed + 1)],
        )
        have = seed
        while have < lines:
            more = min(have, lines - have)
            cur.execute(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "SELECT run_id, step_id, kind, phase, detail, at FROM event_run_log ORDER BY id LIMIT %s",
                (more,),
            )
            have += more
        cur.executemany(
            "INSERT INTO event_run_log (run_id, kind, at) "
            "SELECT %s, 'note', UTC_TIMESTAMP(3) - INTERVAL 95 DAY FROM seq_1_to_1000000 LIMIT %s",
            [(run, KEPT_PER_RUN) for run in KEPT_RUNS],
        )
        cur.execute("ANALYZE TABLE event_runs, event_run_log")
        cur.fetchall()
    conn.close()


def _count(database: str, sql: str, *params: int) -> int:
    conn = connect()
    conn.select_db(database)
    with conn.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    conn.close()
    return int(row[0]) if row else 0


# ── the service and its writers ──────────────────────────────────────────────


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn_server(url: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RUNLOG_DATABASE_URL": url, "RUNLOG_LOG_LEVEL": "WARNING"}
    env.pop("RUNLOG_RETENTION", None)  # the bench drives the sweeper itself
    return subprocess.Popen(  # noqa: S603 (our own interpreter and module)
        [sys.executable, "-m", "gql", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _start_server(url: str, port: int) -> subprocess.Popen[bytes]:
    server = _spawn_server(url, port)
    async with local.AsyncClient() as client:
        for _ in range(200):
            if server.poll() is not None:
                raise RuntimeError("the service exited at start")
            try:
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    server.terminate()
    raise RuntimeError("the service did not answer /healthz within 20s")


@dataclass
class Writes:
    attempted: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def _writer(port: int, interval: float, stop: asyncio.Event, writes: Writes, n: int) -> None:
    """Write a line for the live run every `interval` seconds, as the event runner would."""
    async with local.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        next_at = time.perf_counter()
        i = 0
        while not stop.is_set():
            i += 1
            detail = {"text": f"writer {n}, line {i}"}
            writes.attempted += 1
            started = time.perf_counter()
            try:
                response = await client.post(
                    "/graphql", json={"query": WRITE, "variables": {"runId": LIVE_RUN, "detail": detail}}
                )
                stored = response.status_code == 200 and response.json() == {"data": {"writeRunLog": True}}
                problem = "" if stored else f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            writes.latencies.append(time.perf_counter() - started)
            if problem:
                writes.failed += 1
                writes.failures.append(problem)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))


# ── the bench ────────────────────────────────────────────────────────────────


async def _bench(lines: int, runs: int, writers: int, rate: float) -> int:
    database = f"runlog_bench_{uuid.uuid4().hex[:10]}"
    url = MARIADB_URL.set(database=database)
    settings = Settings(database_url=url.render_as_string(hide_password=False))
    root = connect()
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        cur.execute("SELECT VERSION()")
        version = (cur.fetchone() or ("?",))[0]
    server: subprocess.Popen[bytes] | None = None
    engine = create_engine(settings)
    try:
        await init_db(engine)
        kept = len(KEPT_RUNS) * KEPT_PER_RUN
        print(f"MariaDB {version}, database {database} (dropped at the end)")
        print(f"fill: {lines:,} eligible lines of {runs:,} terminal runs, {kept:,} lines of old running runs")
        started = time.perf_counter()
        await asyncio.to_thread(_fill, database, lines, runs)
        print(f"fill: done in {time.perf_counter() - started:.1f}s")

        port = _free_port()
        server = await _start_server(settings.database_url, port)
        stop = asyncio.Event()
        writes = Writes()
        tasks = [asyncio.create_task(_writer(port, writers / rate, stop, writes, n)) for n in range(writers)]
        writing_started = time.perf_counter()
        await asyncio.sleep(2)  # writers at their pace before the drain starts

        sweeper = Sweeper(engine, retention=RETENTION, interval=60.0, lock=lock_name(url))
        slices: list[float] = []
        deleted = 0
        drain_started = time.perf_counter()
        while True:
            started = time.perf_counter()
            sweep = await sweeper.tick()
            took = time.perf_counter() - started
            if sweep.outcome is not Outcome.SWEPT:
                raise RuntimeError(f"a tick did not sweep: {sweep.outcome.value}, {sweep.error}")
            if sweep.deleted == 0:
                break
            slices.append(took)
            deleted += sweep.deleted
        drain_time = time.perf_counter() - drain_started
        await asyncio.sleep(1)
        stop.set()
        await asyncio.gather(*tasks)
        writing_time = time.perf_counter() - writing_started

        eligible_left = _count(
            database,
            "SELECT COUNT(*) FROM event_run_log l JOIN event_runs r ON r.id = l.run_id "
            "WHERE r.status IN ('completed','cancelled','failed','missed')",
        )
        kept_left = _count(
            database,
            "SELECT COUNT(*) FROM event_run_log WHERE run_id BETWEEN %s AND %s",
            KEPT_RUNS[0],
            KEPT_RUNS[-1],
        )
        live_lines = _count(database, "SELECT COUNT(*) FROM event_run_log WHERE run_id = %s", LIVE_RUN)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        await engine.dispose()
        with root.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        root.close()

    latencies = sorted(writes.latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    ok = writes.failed == 0 and eligible_left == 0 and kept_left == kept and live_lines == writes.attempted
    print(
        f"drain: {deleted:,} lines in {len(slices):,} slices of up to {sweeper.limit:,} "
        "(Sweeper.tick back to back: GET_LOCK, one prune_slice, RELEASE_LOCK)"
    )
    print(
        f"  slice time: median {statistics.median(slices):.3f}s, "
        f"p95 {statistics.quantiles(slices, n=20)[-1]:.3f}s, max {max(slices):.3f}s"
    )
    print(f"  total drain time: {drain_time:.1f}s ({deleted / drain_time:,.0f} lines/s)")
    print(
        f"writes: {writers} writers aiming at {rate:g}/s in all (each waits for its answer), through "
        "POST /graphql writeRunLog on `python -m gql serve`, from 2s before the drain to 1s after"
    )
    print(f"  writes per second achieved: {writes.attempted / writing_time:,.0f} over {writing_time:.1f}s")
    print(f"  writes attempted: {writes.attempted:,}")
    print(f"  writes failed: {writes.failed:,}")
    print(
        f"  write latency: median {statistics.median(latencies) * 1000:.1f}ms, "
        f"p99 {p99 * 1000:.1f}ms, max {latencies[-1] * 1000:.1f}ms"
    )
    for problem in writes.failures[:5]:
        print(f"  failed write: {problem}")
    print(
        f"check: {eligible_left:,} lines of terminal runs left, {kept_left:,}/{kept:,} lines of "
        f"running runs kept, {live_lines:,}/{writes.attempted:,} written lines stored: "
        + ("ok" if ok else "FAILED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
