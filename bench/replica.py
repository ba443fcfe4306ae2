"""Reads on the primary and on a read replica, side by side: `python -m bench.replica`.

    .venv/bin/python -m bench.replica            # about a minute, plus the topology's start
    .venv/bin/python -m bench.replica --quick    # shorter rounds

Starts a primary and a GTID replica with `scripts/cluster start replica`
(ports 3321 and 3322, fresh data; stopped at the end), fills the primary
with the main benchmark's 10,000 lines (bench/data.py's `base_rows`), waits
until the replica has them, and runs three service processes:

- `primary`: RUNLOG_DATABASE_URL only, every page read on the primary;
- `replica`: RUNLOG_READ_DATABASE_URL set, pages read on the replica;
- `replica, fresh`: the same, every page asked with `fresh: true`
  (the primary's GTID position, then MASTER_GTID_WAIT on the replica).

Each serves 50-line pages of the hot run to 8 clients, in alternating
rounds, as bench/run.py's cases do (servers pinned to CPU 0, the load
generator to CPU 1, both MariaDB servers float). Printed: requests a second,
the median latency, and each one's ratio to `primary`. Both database servers
share this machine's two cores, so the replica buys no capacity here: the
ratio shows what reading a replica costs a page (nothing, when it is fit),
and what `fresh` costs (two round trips more).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pymysql
import sqlalchemy as sa

from gql.store.db import metadata
from tests import local

from .data import base_rows
from .operations import HOT_RUN
from .report import say
from .servers import PINNED, Server, alternate, free_port, median

ROOT = Path(__file__).resolve().parent.parent
PAGE_LINES = 50
QUERY = (
    "query Page($runId: ID!, $limit: Int, $fresh: Boolean) { runLog(runId: $runId, limit: $limit, "
    "fresh: $fresh) { nodes { id runId stepId kind phase at cursor detail { __typename } } "
    "pageInfo { hasNextPage endCursor } } }"
)


def _cluster(command: str) -> str:
    done = subprocess.run(  # noqa: S603 -- the repo's own script
        [str(ROOT / "scripts" / "cluster"), command, "replica"], capture_output=True, text=True, check=True
    )
    return done.stdout


def _sql(url: sa.URL, statement: str, rows: list[tuple[Any, ...]] | None = None) -> list[tuple[Any, ...]]:
    conn = pymysql.connect(
        host="127.0.0.1", port=url.port, user="root", database=url.database, autocommit=True
    )
    try:
        with conn.cursor() as cur:
            if rows is None:
                cur.execute(statement)
            else:
                for i in range(0, len(rows), 1000):
                    cur.executemany(statement, rows[i : i + 1000])
            return list(cur.fetchall())
    finally:
        conn.close()


def _start(name: str, env: dict[str, str]) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "gql", "serve", "--port", str(port)]
    if PINNED:
        command = ["taskset", "-c", "0", *command]
    log = Path(f"/tmp/runlog-bench-replica-{name.replace(', ', '-')}-{port}.log")  # noqa: S108
    with log.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603 -- our own interpreter and module
            command,
            env={**os.environ, "RUNLOG_LOG_LEVEL": "WARNING", **env},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            if local.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return Server(name, port, process, 1)
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start: see {log}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replica", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.5 s instead of 5 of 2 s")
    args = parser.parse_args(argv)
    rounds, seconds = (3, 0.5) if args.quick else (5, 2.0)
    say("starting a primary and a replica (scripts/cluster start replica)")
    primary, replica = (sa.make_url(line) for line in _cluster("start").split())
    servers: dict[str, Server] = {}
    try:
        database = f"runlog_bench_{uuid.uuid4().hex[:10]}"
        _sql(primary, f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        primary, replica = primary.set(database=database), replica.set(database=database)
        engine = sa.create_engine(primary.set(drivername="mysql+pymysql"))
        metadata.create_all(engine)
        engine.dispose()
        _sql(
            primary,
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            base_rows(),
        )
        position = _sql(primary, "SELECT @@gtid_binlog_pos")[0][0]
        assert _sql(replica, f"SELECT MASTER_GTID_WAIT('{position}', 60)")[0][0] == 0, (
            "the replica did not catch up"
        )
        say("10,000 lines on the primary, and on the replica")
        on_primary = {"RUNLOG_DATABASE_URL": primary.render_as_string(hide_password=False)}
        on_replica = {**on_primary, "RUNLOG_READ_DATABASE_URL": replica.render_as_string(hide_password=False)}
        servers = {
            "primary": _start("primary", on_primary),
            "replica": _start("replica", on_replica),
            "replica, fresh": _start("replica, fresh", on_replica),
        }
        bodies = {
            name: orjson.dumps(
                {
                    "query": QUERY,
                    "variables": {
                        "runId": str(HOT_RUN),
                        "limit": PAGE_LINES,
                        "fresh": name.endswith("fresh"),
                    },
                }
            ).decode()
            for name in servers
        }
        answers = {name: servers[name].post(bodies[name]) for name in servers}
        ids = {name: [n["id"] for n in a["data"]["runLog"]["nodes"]] for name, a in answers.items()}
        assert len({tuple(v) for v in ids.values()}) == 1, f"the pages differ: {ids}"
        say(f"{PAGE_LINES}-line pages, 8 clients, {rounds} rounds of {seconds} s")
        results = alternate(
            servers,
            rounds,
            lambda name: {
                "mode": "throughput",
                "requests": [["/graphql", bodies[name]]],
                "clients": 8,
                "seconds": seconds,
            },
        )
    finally:
        for server in servers.values():
            server.stop()
        _cluster("stop")
    rates = {
        name: sum(r["completed"] for r in rs) / sum(r["seconds"] for r in rs) for name, rs in results.items()
    }
    p50 = {name: median([ms for r in rs for ms in r["latencies_ms"]]) for name, rs in results.items()}
    print()
    print(f"RunLog-like {PAGE_LINES}-line pages, 8 clients   req/s    median ms   ratio to primary (req/s)")
    for name in servers:
        print(f"  {name:<40}{rates[name]:8.1f}   {p50[name]:8.2f}   {rates[name] / rates['primary']:.3f}")
    load1, load5, _ = os.getloadavg()
    print(f"\n(load average {load1:.2f} now, {load5:.2f} over 5 minutes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
