"""Past one machine, measured: writes through one Galera node and through three.

    .venv/bin/python -m bench.cluster            # about three minutes
    .venv/bin/python -m bench.cluster --quick    # about a minute and a half

Starts a fresh 3-node Galera cluster with `scripts/cluster start galera`
(stopped at the end), creates a database and the tables on it, and runs three
service processes (`python -m gql serve`) in two arrangements, in alternating
rounds: all three on node 1, and one on each node. The same three processes'
CPU either way, so the ratio shows what the cluster changes: `WriteNote` with 8
clients spread over the three processes, requests a second, and every `true`
counted against the lines stored.

On this machine the three nodes, the three services and the load generator
share two cores: the point is the shape of the cost (certification, a write
set sent to two other nodes before each commit), not a speed-up. See
docs/operating.md, "A Galera cluster", and docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import uuid

import pymysql
import sqlalchemy as sa

from gql.store.db import metadata

from .operations import WRITE_RUN, Workload
from .report import say
from .servers import ROOT, Server, load, start


def _cluster(command: str) -> list[sa.URL]:
    done = subprocess.run(  # noqa: S603 -- our own script
        [str(ROOT / "scripts" / "cluster"), command, "galera"], capture_output=True, text=True, check=True
    )
    return [sa.make_url(line) for line in done.stdout.split()]


def _count(url: sa.URL, database: str) -> int:
    conn = pymysql.connect(host="127.0.0.1", port=url.port, user="root", database=database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")
            cur.execute("SELECT COUNT(*) FROM event_run_log WHERE run_id = %s", (WRITE_RUN,))
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    args = parser.parse_args(argv)
    rounds, seconds = (3, 2.0) if args.quick else (5, 5.0)
    started = time.monotonic()
    say("starting a 3-node Galera cluster (scripts/cluster start galera)")
    nodes = _cluster("start")
    database = f"runlog_bench_{uuid.uuid4().hex[:8]}"
    servers: list[Server] = []
    try:
        first = pymysql.connect(host="127.0.0.1", port=nodes[0].port, user="root", autocommit=True)
        with first.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        first.close()
        engine = sa.create_engine(nodes[0].set(database=database, drivername="mysql+pymysql"))
        metadata.create_all(engine)
        engine.dispose()
        arrangements = {
            "one node": [start("service", database, pin=None, server=nodes[0]) for _ in range(3)],
            "three nodes": [start("service", database, pin=None, server=node) for node in nodes],
        }
        servers = [server for group in arrangements.values() for server in group]
        workload = Workload.build(arrangements["one node"][0].port)
        note = workload.write("WriteNote")
        if note is None:
            raise SystemExit("no operation WriteNote in gql/operations")
        request = ["/graphql", note.body(50)]
        jobs = [
            {
                "mode": "throughput",
                "requests": [request],
                "clients": 8,
                "seconds": seconds,
                "expect_true": True,
                "port": group[0].port,
                "ports": [server.port for server in group],
                "arrangement": name,
            }
            for _ in range(rounds)
            for name, group in arrangements.items()
        ]
        before = _count(nodes[0], database)
        results = load(jobs, pin=None)
        sent = sum(result["sent"] for result in results)
        stored = _count(nodes[1], database) - before
        rates: dict[str, list[float]] = {name: [] for name in arrangements}
        errors = 0
        for job, result in zip(jobs, results, strict=True):
            rates[job["arrangement"]].append(result["completed"] / result["seconds"])
            errors += result["errors"]
        one, three = statistics.median(rates["one node"]), statistics.median(rates["three nodes"])
        print()
        print("case                                         req/s one node  req/s three nodes  three/one")
        print("-------------------------------------------------------------------------------------------")
        print(
            f"WriteNote, 8 clients over 3 service processes  {one:14,.1f}  {three:17,.1f}  {three / one:9.3f}"
        )
        print(
            f"   rounds: one node {[round(r) for r in rates['one node']]}, "
            f"three nodes {[round(r) for r in rates['three nodes']]}"
        )
        print(f"   {sent:,} writes sent, {stored:,} lines stored, {errors} answered false or with an error")
        load1, load5, _ = os.getloadavg()
        print(
            f"\n(bench.cluster took {time.monotonic() - started:.0f}s; load average {load1:.2f} now, "
            f"{load5:.2f} over 5 minutes)"
        )
        return 0 if stored == sent and errors == 0 else 1
    finally:
        for server in servers:
            server.stop()
        _cluster("stop")


if __name__ == "__main__":
    raise SystemExit(main())
