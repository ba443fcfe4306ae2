"""What idle long polls cost a server process: its memory and CPU while they wait.

    python -m bench.waits                  # 500 waiting calls, on the embedded SQLite
    python -m bench.waits --polls 1000 --mariadb

Not a test: it starts `python -m gql serve` on a database of its own (a
temporary SQLite file, or a database it creates on the MariaDB server at
RUNLOG_BENCH_MARIADB_URL), opens `--polls` calls of `runLog(before:, wait: 30)`
on as many runs, each with nothing to wait for, and measures the server
process (/proc: resident memory, and user+system CPU over `--seconds` while
every call waits), against the same process with no call waiting. Then it
writes a line to 20 of the runs and checks those calls answered with it and
the others with an empty page at the end of their wait.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from tests import local

PAGE = """query P($runId: ID!, $before: String, $wait: Int) {
  runLog(runId: $runId, before: $before, wait: $wait) { nodes { id } pageInfo { startCursor } } }"""
WRITE = 'mutation W($runId: ID!) { writeRunLog(runId: $runId, kind: "note", detail: {text: "wake"}) }'
TICKS = os.sysconf("SC_CLK_TCK")
WOKEN = 20  # calls woken by a line at the end, to check the waits still answer


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.waits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=500, help="waiting calls (default 500)")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="the idle window measured (default 10; at most about 15)"
    )
    # Not more than about 15: the calls wait 30 s, and the writes must come before.
    parser.add_argument("--mariadb", action="store_true", help="on MariaDB instead of the embedded SQLite")
    args = parser.parse_args()
    return asyncio.run(_bench(args.polls, args.seconds, args.mariadb))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def _idle(pid: int, seconds: float) -> tuple[float, int]:
    """CPU seconds per second over `seconds`, and the resident memory at the end (KiB)."""
    start = _cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return (_cpu_seconds(pid) - start) / seconds, _rss_kib(pid)


async def _bench(polls: int, seconds: float, mariadb: bool) -> int:
    folder = tempfile.mkdtemp(prefix="bench-waits-")
    database = None
    if mariadb:
        from .mariadb import MARIADB_URL, connect

        database = f"bench_waits_{uuid.uuid4().hex[:8]}"
        with connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {database}")
        url = MARIADB_URL.set(database=database).render_as_string(hide_password=False)
        # Before anything runs on the loop: blocking it is harmless here.
        subprocess.run(  # noqa: ASYNC221 (this interpreter, our own module)
            [sys.executable, "-m", "gql", "init-db"],
            env={**os.environ, "RUNLOG_DATABASE_URL": url},
            check=True,
            capture_output=True,
        )
    else:
        url = f"sqlite+aiosqlite:///{folder}/runlog.db"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "RUNLOG_DATABASE_URL": url, "RUNLOG_MAX_CONNECTIONS": str(polls + 100)}
    server = subprocess.Popen(  # noqa: ASYNC220, S603 (as above)
        [sys.executable, "-m", "gql", "serve", "--port", str(port)],
        env=env,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/graphql"
    try:
        async with local.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=polls + 10)) as client:
            for _ in range(300):
                try:
                    if (await client.get(base.replace("/graphql", "/healthz"))).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            runs = range(1, polls + 1)
            cursors = {}
            for run_id in runs:
                answer = await client.post(base, json={"query": PAGE, "variables": {"runId": run_id}})
                cursors[run_id] = answer.json()["data"]["runLog"]["pageInfo"]["startCursor"]
            cpu_before, rss_before = await _idle(server.pid, seconds)

            async def poll(run_id: int) -> list[dict[str, str]]:
                variables = {"runId": run_id, "before": cursors[run_id], "wait": 30}
                answer = await client.post(base, json={"query": PAGE, "variables": variables})
                nodes: list[dict[str, str]] = answer.json()["data"]["runLog"]["nodes"]
                return nodes

            started = time.monotonic()
            waiting = [asyncio.ensure_future(poll(run_id)) for run_id in runs]
            # Every call reaches the server, reads its empty page, and is woken
            # once by the first probe that watches its run (no count to compare
            # with yet) to read again: a burst, done well within this.
            await asyncio.sleep(12.0)
            cpu_waiting, rss_waiting = await _idle(server.pid, seconds)
            if time.monotonic() - started > 28:
                print("the window ran into the polls' 30 s: use fewer --seconds")
            woke = time.monotonic()
            writers = asyncio.Semaphore(16)

            async def write(run_id: int) -> None:
                async with writers:
                    await client.post(base, json={"query": WRITE, "variables": {"runId": run_id}})

            woken = runs[:WOKEN]
            await asyncio.gather(*(write(run_id) for run_id in woken))
            answered = await asyncio.gather(*waiting)
            wake_seconds = time.monotonic() - woke
        lines = sum(len(nodes) for nodes in answered[:WOKEN])
        empty = sum(not nodes for nodes in answered[WOKEN:])
        print(
            f"{polls} waiting runLog calls on one process ({'MariaDB' if mariadb else 'SQLite'}), "
            f"{seconds:g} s idle window each:"
        )
        print(f"  no call waiting: CPU {cpu_before * 100:.2f}% of a core, RSS {rss_before / 1024:.1f} MiB")
        print(
            f"  {polls} waiting:    CPU {cpu_waiting * 100:.2f}% of a core, RSS {rss_waiting / 1024:.1f} MiB "
            f"(+{(rss_waiting - rss_before) / polls:.1f} KiB per call)"
        )
        print(
            f"  then a line written to {WOKEN} runs: {lines} of those {WOKEN} calls answered with it "
            f"(in {wake_seconds:.1f} s, with the others' 30 s), and {empty} others an empty page"
        )
        return 0 if lines == WOKEN and empty == polls - WOKEN else 1
    finally:
        server.terminate()
        server.wait(60)
        if database is not None:
            from .mariadb import connect

            with connect() as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE {database}")


if __name__ == "__main__":
    raise SystemExit(main())
