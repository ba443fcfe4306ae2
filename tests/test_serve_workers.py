"""`serve --workers N`: several processes answer on one port, without Nagle's stalls."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import Backend

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.mariadb
def test_two_workers_answer_keep_alive_requests_without_delayed_ack_stalls(mariadb: Backend) -> None:
    mariadb.create_tables()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--port", str(port), "--workers", "2"],
        env={**os.environ, "RUNLOG_DATABASE_URL": mariadb.url, "RUNLOG_LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the workers did not come up"
            time.sleep(0.2)
        with httpx.Client(base_url=url) as client:  # one keep-alive connection
            took = []
            for _ in range(20):
                started = time.perf_counter()
                body = client.post("/graphql", json={"query": "{ runLog(runId: 1) { nodes { id } } }"}).json()
                took.append(time.perf_counter() - started)
                assert body == {"data": {"runLog": {"nodes": []}}}
        # With Nagle's algorithm on, every response waits ~40 ms for the client's delayed ACK.
        assert statistics.median(took) < 0.03, took
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
