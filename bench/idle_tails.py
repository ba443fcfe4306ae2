"""What idle runLogTail subscribers cost one server process: RSS and CPU, none against N.

    .venv/bin/python -m bench.idle_tails [--tails 500] [--seconds 30] [--database-url URL]

Starts `python -m gql serve` (on a scratch SQLite file unless a URL is
given), measures its resident memory and the CPU it spends over an idle
window with no subscription, then opens `--tails` websockets, each holding one
`runLogTail` of its own run (distinct runs: the watcher's one probe per
interval then names them all), checks that the first and the last are live
(a line written to each arrives), and measures the same idle window again.
The server's figures come from /proc/<pid>/stat and /proc/<pid>/status
(Linux); the clients run in this process and are not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.asyncio.client import ClientConnection, connect

from tests import local

ROOT = Path(__file__).resolve().parent.parent
TAIL = (
    "subscription T($runId: ID!, $since: String) { runLogTail(runId: $runId, since: $since) { id cursor } }"
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def idle_window(pid: int, seconds: float) -> tuple[float, float]:
    """(RSS in MiB at the end, CPU as a percentage of one core) over `seconds` of idling."""
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    used = cpu_seconds(pid) - start_cpu
    return rss_mib(pid), 100 * used / (time.monotonic() - start)


async def open_tail(url: str, run_id: int, since: str | None) -> ClientConnection:
    ws = await connect(url, subprotocols=["graphql-transport-ws"], open_timeout=120)  # type: ignore[list-item]
    await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    assert json.loads(await ws.recv()) == {"type": "connection_ack"}
    variables = {"runId": run_id, "since": since}
    await ws.send(
        json.dumps({"type": "subscribe", "id": "t", "payload": {"query": TAIL, "variables": variables}})
    )
    return ws


async def measure(base: str, pid: int, tails: int, seconds: float) -> None:
    async with local.AsyncClient(base_url=base, timeout=60) as http:
        page = await http.post(
            "/graphql", json={"query": "{ runLog(runId: 1, limit: 1) { pageInfo { startCursor } } }"}
        )
        since = page.json()["data"]["runLog"]["pageInfo"]["startCursor"]
        await asyncio.sleep(2)  # let start-up settle
        rss0, cpu0 = await idle_window(pid, seconds)
        print(f"no tails:  RSS {rss0:7.1f} MiB, CPU {cpu0:5.2f}% of a core over {seconds:g} s idle")
        url = base.replace("http://", "ws://") + "/graphql"
        sockets: list[ClientConnection] = []
        started = time.monotonic()
        for batch in range(0, tails, 50):
            sockets += await asyncio.gather(
                *(open_tail(url, 1000 + n, since) for n in range(batch, min(batch + 50, tails)))
            )
        opened = time.monotonic() - started
        # Every tail is live: a line written to the first and to the last run arrives.
        for run in (1000, 1000 + tails - 1):
            body = await http.post(
                "/graphql",
                json={
                    "query": f'mutation {{ writeRunLog(runId: {run}, kind: "note", detail: {{text: "x"}}) }}'
                },
            )
            assert body.json() == {"data": {"writeRunLog": True}}, body.text
        for ws in (sockets[0], sockets[-1]):
            message = json.loads(await asyncio.wait_for(ws.recv(), 60))
            assert message["type"] == "next", message
        print(
            f"opened {tails} websockets with one tail each in {opened:.1f} s; "
            "the first and last got their line"
        )
        await asyncio.sleep(2)
        rss1, cpu1 = await idle_window(pid, seconds)
        print(f"{tails} tails: RSS {rss1:7.1f} MiB, CPU {cpu1:5.2f}% of a core over {seconds:g} s idle")
        print(
            f"per idle tail: {1024 * (rss1 - rss0) / tails:.1f} KiB RSS; "
            f"CPU {cpu1 - cpu0:+.2f} points of a core for all {tails}"
        )
        for ws in sockets:
            await ws.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tails", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite+aiosqlite:///{scratch}/idle.db"
        port = 20000 + os.getpid() % 20000
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RUNLOG_DATABASE_URL": url,
            "RUNLOG_LOG_LEVEL": "WARNING",
        }
        log = open(Path(scratch) / "serve.log", "w")  # noqa: SIM115 - closed below
        server = subprocess.Popen(  # noqa: S603 - this checkout's own server
            [sys.executable, "-m", "gql", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    if local.get(f"{base}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            print(f"server pid {server.pid} on {url.split('@')[-1]}; ping and wait intervals as configured")
            asyncio.run(measure(base, server.pid, args.tails, args.seconds))
        finally:
            server.terminate()
            server.wait(timeout=60)
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
