"""`serve --workers N`: several processes answer on one port, without Nagle's stalls."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import Backend, free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.mariadb
def test_two_workers_answer_keep_alive_requests_without_delayed_ack_stalls(mariadb: Backend) -> None:
    mariadb.create_tables()
    url = f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--port", url.rsplit(":", 1)[1], "--workers", "2"],
        env={**os.environ, "RUNLOG_DATABASE_URL": mariadb.url, "RUNLOG_LOG_LEVEL": "WARNING"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_until_healthy(url, server)
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
            server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


@pytest.mark.parametrize("workers", ["2", "0"])
def test_several_workers_on_the_embedded_database_are_refused_with_why(tmp_path: Path, workers: str) -> None:
    path = tmp_path / "runlog.db"
    done = subprocess.run(
        [sys.executable, "-m", "gql", "serve", "--port", str(free_port()), "--workers", workers],
        env={**os.environ, "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{path}", "RUNLOG_RETENTION": "30d"},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"--workers {workers} is" in done.stderr
    if workers == "2":
        assert "refused on the embedded SQLite database" in done.stderr
        assert "use --workers 1 here, or set RUNLOG_DATABASE_URL to MySQL/MariaDB" in done.stderr
    else:
        assert "at least 1" in done.stderr
    # Refused before anything started: no worker created the database file.
    assert not path.exists()
