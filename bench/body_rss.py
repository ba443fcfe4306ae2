"""What large request bodies leave in a served process, as its resident memory.

    python -m bench.body_rss                      # this tree
    python -m bench.body_rss --against c02314c    # and an older revision beside it

Not a test: it serves each tree (`python -m gql serve`, on a fresh SQLite
file, the older revision from a `git archive` of it first on PYTHONPATH),
sends it 64 requests one after another, each a 3 MiB body whose query is
refused for its size, and prints the process's RSS (VmRSS) before and after.
A request that leaves its body in reference cycles keeps it until the
collector next runs: RSS climbs by about the body's size per request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 64
BODY = json.dumps({"query": "{ __typename }" + " " * (3 * 1024 * 1024)}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def post(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        head = (
            "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n"
        )
        conn.sendall(head.encode())
        with contextlib.suppress(OSError):  # refused before the whole body was read
            conn.sendall(BODY)
        return conn.recv(200).split(b"\r\n", 1)[0].decode()


def measure(tree: Path, work: Path) -> str:
    port = free_port()
    database = work / f"{port}.db"
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
        "RUNLOG_LOG_LEVEL": "WARNING",
    }
    server = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "gql", "serve", "--port", str(port)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        before = rss_mib(server.pid)
        answers = {post(port) for _ in range(REQUESTS)}
        after = rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    said = ", ".join(sorted(answers))
    return f"RSS {before:.0f} MiB before, {after:.0f} MiB after {REQUESTS} bodies of 3 MiB (answers: {said})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="an older revision to measure beside this tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runlog-body-rss-") as scratch:
        work = Path(scratch)
        print(f"this tree: {measure(ROOT, work)}")
        if args.against:
            old = work / "old"
            old.mkdir()
            archive = subprocess.run(  # noqa: S603
                ["git", "-C", str(ROOT), "archive", "--format=tar", args.against],  # noqa: S607
                check=True,
                capture_output=True,
            ).stdout
            (work / "old.tar").write_bytes(archive)
            with tarfile.open(work / "old.tar") as tar:
                tar.extractall(old, filter="data")
            print(f"{args.against}: {measure(old, work)}")


if __name__ == "__main__":
    main()
