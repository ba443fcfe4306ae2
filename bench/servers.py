"""The benchmarks' servers and load: start the service, the floors or a revision, and time them.

`start`/`start_many` run servers under uvicorn, `load` runs jobs in the load
generator (bench/load.py), `alternate` runs them in alternating rounds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from tests import local

from .mariadb import MARIADB_URL
from .revision import Revision

ROOT = Path(__file__).resolve().parent.parent

# 0: let the kernel place everything (as it does where there is no taskset).
PINNED = os.environ.get("RUNLOG_BENCH_PIN", "1") != "0" and shutil.which("taskset") is not None
LOG_DIR = Path(tempfile.gettempdir())  # the servers' output, runlog-bench-<name>-<port>.log
TARGETS = ("service", "floor", "sa floor")
FLOORS = TARGETS[1:]
BEFORE = "before"  # the service at the revision given to --against


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ── servers and load ─────────────────────────────────────────────────────────


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    workers: int

    def rss_kib(self) -> int:
        """Resident memory of the serving process(es), from /proc/<pid>/status."""
        pids = [self.process.pid]
        if self.workers > 1:
            pids = _children(self.process.pid)
        total = 0
        for pid in pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total

    def post(self, body: str) -> Any:
        response = local.post(
            f"http://127.0.0.1:{self.port}/graphql",
            content=body.encode(),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        return response.json()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def start(
    name: str,
    database: str,
    workers: int = 1,
    pin: int | None = 0,
    server: sa.URL | None = None,
    revision: Revision | None = None,
) -> Server:
    """Start `name` on `database` of the bench's MariaDB, or of `server` when given."""
    return start_many([name], database, workers, pin, server, revision)[name]


def start_many(
    names: list[str],
    database: str,
    workers: int = 1,
    pin: int | None = 0,
    server: sa.URL | None = None,
    revision: Revision | None = None,
    under: tuple[str, ...] = (),
    within: float = 60,
) -> dict[str, Server]:
    """Start each of `names` (`BEFORE` from `revision`'s files), all at once; each, once it answers.

    They start together so that one server's imports overlap another's; a
    server that does not start within `within` seconds stops the others.
    `under` goes before each server's command (a profiler, for one).
    """
    if BEFORE in names and revision is None:
        raise ValueError(f"{BEFORE} needs the revision to serve")
    url = (server or MARIADB_URL).set(database=database).render_as_string(hide_password=False)
    env = {**os.environ, "RUNLOG_DATABASE_URL": url, "RUNLOG_LOG_LEVEL": "WARNING"}
    started: dict[str, tuple[subprocess.Popen[bytes], int, str]] = {}
    for name in names:
        port = free_port()
        common = ["--port", str(port), "--workers", str(workers)]
        cwd, server_env = ROOT, env
        if name in ("service", BEFORE):
            command = [sys.executable, "-m", "gql", "serve", *common]
            if name == BEFORE and revision is not None:
                cwd, server_env = revision.tree, revision.env(env)
        else:
            driver = "sqlalchemy" if name == "sa floor" else "physical"
            command = [sys.executable, "-m", "bench.floor", "--driver", driver, *common]
        command = [*under, *command]
        if pin is not None and PINNED:
            command = ["taskset", "-c", str(pin), *command]
        log_path = LOG_DIR / f"runlog-bench-{name.replace(' ', '-')}-{port}.log"
        with open(log_path, "wb") as log:
            # Our own interpreter and modules, with arguments built here.
            process = subprocess.Popen(  # noqa: S603
                command, env=server_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
            )
        started[name] = (process, port, str(log_path))
    servers = {name: Server(name, port, process, workers) for name, (process, port, _) in started.items()}
    try:
        for name, (process, port, log_name) in started.items():
            deadline = time.monotonic() + within
            while True:
                try:
                    if local.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start: see {log_name}")
                time.sleep(0.2)
    except BaseException:
        for each in servers.values():
            each.stop()
        raise
    return servers


def load(jobs: list[dict[str, Any]], pin: int | None = 1) -> list[dict[str, Any]]:
    """Run `jobs` one after the other in one load-generator process; their results, in order."""
    command = [sys.executable, "-m", "bench.load"]
    if pin is not None and PINNED:
        command = ["taskset", "-c", str(pin), *command]
    done = subprocess.run(  # noqa: S603 -- our own interpreter and module
        command, input=json.dumps(jobs).encode(), capture_output=True, cwd=ROOT, check=True
    )
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def alternate(
    servers: dict[str, Server], rounds: int, job: Callable[[str], dict[str, Any]], pin: int | None = 1
) -> dict[str, list[dict[str, Any]]]:
    """Each server's results of `rounds` rounds, the servers taking turns within each round."""
    names = list(servers)
    jobs = [{**job(name), "port": servers[name].port} for _ in range(rounds) for name in names]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for spec, result in zip(jobs, load(jobs, pin), strict=True):
        name = next(n for n in names if servers[n].port == spec["port"])
        if result["errors"]:
            raise RuntimeError(f"{name} answered {result['errors']} request(s) with an error or false")
        results[name].append(result)
    return results


def table_size(
    sizes: dict[str, dict[str, Server]],
    cases: dict[str, str] | dict[str, dict[str, str]],
    count: int,
    rounds: int = 5,
) -> dict[str, float]:
    """Median latency of each case's request, per server and table size ("case|name|size").

    `sizes` maps a table size ("small", "big") to its servers; `cases` a
    label to its request body, or to each server's by name. Each of
    `rounds` alternating rounds reads every case, each on every server of
    every size in turn, so cases and sizes are compared at the same moments
    of a noisy machine.
    """
    latencies: dict[str, list[float]] = {}
    jobs, keys = [], []
    for _ in range(rounds):
        for label, body in cases.items():
            for size, servers in sizes.items():
                for name, server in servers.items():
                    jobs.append(
                        {
                            "port": server.port,
                            "mode": "latency",
                            "requests": [["/graphql", body if isinstance(body, str) else body[name]]],
                            "count": max(1, count // rounds),
                            "warmup": 3,
                        }
                    )
                    keys.append(f"{label}|{name}|{size}")
    for key, result in zip(keys, load(jobs), strict=True):
        if result["errors"]:
            raise RuntimeError(f"{key}: {result['errors']} error(s)")
        latencies.setdefault(key, []).extend(result["latencies_ms"])
    return {key: median(values) for key, values in latencies.items()}
