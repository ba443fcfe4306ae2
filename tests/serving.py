"""`python -m gql serve` processes for the tests that need a real server: started, waited for, stopped.

Each runs this checkout's code (PYTHONPATH) in `folder`, its output in
`<folder>/<name>.log` (a file, never a pipe no one reads: a full pipe would
stall the server). Shared by the live tests (tests/test_subscription_live.py,
tests/test_long_poll_live.py), the cluster's (tests/test_cluster_galera.py)
and tests/test_operable.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .conftest import UNHURRIED_WRITE_TIMEOUT, free_port, wait_until_answered

ROOT = Path(__file__).resolve().parent.parent
# Seconds for a server to answer /healthz once started: generous, since CI may be loaded.
START_WITHIN = 90
# Seconds a server asked to stop (SIGTERM) has to exit before it is killed.
STOP_WITHIN = 15


@dataclass
class Server:
    process: subprocess.Popen[str]
    base: str  # http://127.0.0.1:<port>
    log: Path

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def start(
    folder: Path,
    url: str,
    name: str = "serve",
    *args: str,
    port: int | None = None,
    unhurried: bool = True,
    **env: str,
) -> Server:
    """Start `python -m gql serve` on `url` (RUNLOG_DATABASE_URL) and `env`; not waited for.

    With `unhurried`, writes get the most time the service allows
    (RUNLOG_WRITE_TIMEOUT 4.5 s) unless `env` says otherwise: no test here is
    about their deadline. `port` is a free one unless given.
    """
    if unhurried:
        env = {"RUNLOG_WRITE_TIMEOUT": str(UNHURRIED_WRITE_TIMEOUT), **env}
    port = port or free_port()
    log = folder / f"{name}.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gql", "serve", "--port", str(port), *args],
            env={**os.environ, "PYTHONPATH": str(ROOT), "RUNLOG_DATABASE_URL": url, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=folder,
        )
    return Server(process, f"http://127.0.0.1:{port}", log)


def wait_until_healthy(server: Server, within: float = START_WITHIN) -> None:
    """Wait for `server` to answer /healthz with 200; fail with its output if it exits or takes too long."""
    wait_until_answered(f"{server.base}/healthz", server.process, server.output, within)


def stop(*servers: Server) -> None:
    """Ask each server still running to stop (SIGTERM), all at once; kill any not gone within STOP_WITHIN."""
    running = [server.process for server in servers if server.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def serving(
    folder: Path, url: str, name: str = "serve", **env: str
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """One server on `url`, answering /healthz: its base URL and process; stopped on the way out."""
    server = start(folder, url, name, **env)
    try:
        wait_until_healthy(server)
        yield server.base, server.process
    finally:
        stop(server)
