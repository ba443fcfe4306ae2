"""`serve --workers N`: several processes answer on one port, without Nagle's stalls.

How fast a keep-alive request is answered is a benchmark's to say (bench/),
never a test's: here, what a worker accepts on the shared socket is checked to have
Nagle's algorithm off, which kept each response from waiting ~40 ms for the client's
delayed ACK.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gql.edge import server

from . import local
from .conftest import Backend, free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.mariadb
def test_two_workers_answer_keep_alive_requests(mariadb: Backend) -> None:
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
        with local.Client(base_url=url) as client:  # one keep-alive connection
            for _ in range(20):
                body = client.post("/graphql", json={"query": "{ runLog(runId: 1) { nodes { id } } }"}).json()
                assert body == {"data": {"runLog": {"nodes": []}}}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def test_a_connection_accepted_on_a_workers_shared_socket_has_nagles_algorithm_off() -> None:
    """asyncio left Nagle's algorithm on there: each response waited ~40 ms for a delayed ACK."""
    listening = server.listening_socket("127.0.0.1", 0)
    # As uvicorn reads the `fd` it is handed (Config.bind_socket): a socket asyncio did not make,
    # so asyncio sets no TCP_NODELAY on what is accepted from it; the kernel copies the listener's.
    as_uvicorn = socket.fromfd(listening.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
    with listening, as_uvicorn:
        as_uvicorn.listen()
        with socket.create_connection(listening.getsockname()[:2]):
            accepted, _ = as_uvicorn.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


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
