"""Writes under read load: their p50 and p99 alone, and again while searches and abandoned exports read.

    .venv/bin/python -m bench.write_capacity [--lines 30000] [--searches 32] [--exports 8] [--writes 200]
        [--code DIR]   # serve the `gql` package found in DIR (an older tree) instead of this one

Creates a scratch database on RUNLOG_BENCH_MARIADB_URL, fills run 1 with `--lines` lines of
1 KB details (one INSERT ... SELECT, then `python -m gql fold-words`), and starts `python -m gql
serve` on it with the default settings. Then `--writes` writes, one after another, alone; then
the same while `--searches` clients search run 1 for a text it does not hold and
`--exports` clients each open the run's export, read 300 bytes and leave, over and over (a
refused reader waits as its answer's retryAfter or Retry-After says). Prints
each phase's write latencies, the writes answered false, `/readyz`'s answers, and what the
readers were told.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.mariadb import MARIADB_URL, connect
from bench.servers import free_port
from tests import local

ROOT = Path(__file__).resolve().parent.parent
SEARCH = "query S($s: String) { runLog(runId: 1, limit: 50, search: $s) { nodes { id } } }"
WRITE = 'mutation { writeRunLog(runId: 2, kind: "note", detail: {text: "under load"}) }'


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def writes(base: str, count: int) -> tuple[list[float], int, collections.Counter[int]]:
    """`count` writes one after another: their latencies (ms), how many answered false, /readyz's statuses."""
    latencies: list[float] = []
    false = 0
    ready: collections.Counter[int] = collections.Counter()
    with local.Client(base_url=base, timeout=60) as client:
        for _ in range(count):
            start = time.perf_counter()
            answer = client.post("/graphql", json={"query": WRITE}).json()
            latencies.append((time.perf_counter() - start) * 1000)
            false += answer.get("data", {}).get("writeRunLog") is not True
            ready[client.get("/readyz").status_code] += 1
    return latencies, false, ready


def readers(
    base: str, searches: int, exports: int, done: threading.Event
) -> tuple[list[threading.Thread], Any]:
    told: collections.Counter[str] = collections.Counter()

    def search() -> None:
        with local.Client(base_url=base, timeout=120) as client:
            while not done.is_set():
                body = client.post("/graphql", json={"query": SEARCH, "variables": {"s": "nowhere"}}).json()
                extensions = body.get("errors", [{}])[0].get("extensions", {})
                told["search " + extensions.get("code", "answered")] += 1
                time.sleep(extensions.get("retryAfter", 0))  # as a client should

    def export() -> None:
        while not done.is_set():
            with (
                local.Client(base_url=base, timeout=120) as client,
                client.stream("GET", "/runs/1/log.ndjson?search=line") as response,
            ):
                if response.status_code == 200:
                    next(response.iter_raw(300))
                    told["export abandoned after 300 bytes"] += 1
                else:
                    told[f"export {response.status_code} {response.read()[:60]!r}"] += 1
                    time.sleep(int(response.headers.get("retry-after", "0")))  # as a client should

    threads = [threading.Thread(target=search) for _ in range(searches)]
    threads += [threading.Thread(target=export) for _ in range(exports)]
    for thread in threads:
        thread.start()
    return threads, told


def report(name: str, latencies: list[float], false: int, ready: collections.Counter[int]) -> None:
    print(
        f"{name}: {len(latencies)} writes, p50 {percentile(latencies, 0.5):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms; "
        f"false {false}; /readyz {dict(ready)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=30_000)
    parser.add_argument("--searches", type=int, default=32)
    parser.add_argument("--exports", type=int, default=8)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--code", default=str(ROOT))
    args = parser.parse_args()
    database = f"bench_capacity_{uuid.uuid4().hex[:8]}"
    admin = connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    url = MARIADB_URL.set(database=database).render_as_string(hide_password=False)
    env = {**os.environ, "PYTHONPATH": args.code, "RUNLOG_DATABASE_URL": url}
    process = None
    try:
        init = [sys.executable, "-m", "gql", "init-db"]
        # Run from elsewhere: `python -m` puts the working directory first on the path, before --code.
        elsewhere = tempfile.mkdtemp(prefix="write-capacity-")
        subprocess.run(init, env=env, check=True, capture_output=True, cwd=elsewhere)  # noqa: S603 - as below
        with connect(database).cursor() as cur:
            cur.execute(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "SELECT 1, seq %% 40, 'note', seq %% 5, "
                "CONCAT('{\"text\":\"line ', seq, ' ', REPEAT('x', 1000), '\"}'), "
                "TIMESTAMP('2026-11-01') + INTERVAL seq SECOND FROM seq_1_to_1000000 LIMIT %s",
                (args.lines,),
            )
        # The lines are stored by hand: their words kept as an upgrade keeps them, for the searches.
        fold = [sys.executable, "-m", "gql", "fold-words"]
        subprocess.run(fold, env=env, check=True, capture_output=True, cwd=elsewhere)  # noqa: S603 - as above
        port = free_port()
        log = Path(tempfile.mkstemp(prefix="write-capacity-", suffix=".log")[1])
        with log.open("w") as output:
            process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", "gql", "serve", "--port", str(port)],
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=elsewhere,
            )
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if local.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        writes(base, 10)  # warm
        report("alone", *writes(base, args.writes))
        done = threading.Event()
        threads, told = readers(base, args.searches, args.exports, done)
        while sum(told.values()) < args.searches:  # every reader has been answered once: all press
            time.sleep(0.1)
        try:
            report(
                f"under {args.searches} searches and {args.exports} abandoned exports",
                *writes(base, args.writes),
            )
        finally:
            done.set()
            for thread in threads:
                thread.join()
        print("the readers were told:", dict(told))
        print("server log:", log)
    finally:
        if process is not None:
            process.terminate()
            process.wait()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin.close()


if __name__ == "__main__":
    main()
