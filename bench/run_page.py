"""The run page on a big run: time to the first row, to the holds, and rows in the DOM.

    .venv/bin/python -m bench.run_page [--lines 100000]

Loads the demo into a scratch SQLite file, adds `--lines` older lines to the
demo's live run 37 straight into `event_run_log` (one executemany: a mix of
step.status, note and condition.evaluated), starts `python -m gql serve` on
it, and opens /runs/37 in Debian's Chromium with tests/browser/run-page-bench.mjs
(`npm ci --prefix tests/browser`). Prints the browser's figures as JSON: from
navigation start, when the first row and the holds were drawn, how many rows
the DOM holds, and again after scrolling down a few screens; then the page
opened on the link of the run's middle line (`?line=`), to its row highlighted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "tests" / "browser" / "run-page-bench.mjs"
RUN = 37


def add_lines(database: Path, count: int) -> tuple[int, int]:
    """Add `count` lines to run 37, a second apart, before the demo's; its line count and middle line's id."""
    kinds = [
        ("step.status", '{"from": "pending", "to": "done", "module": "spawner", "answer": null}'),
        ("note", '{"text": "a line of the big run", "actor": "bench"}'),
        ("condition.evaluated", '{"matched": false, "condition": "boss.spawned", "mismatch": "not yet"}'),
    ]
    with sqlite3.connect(database) as db:
        (oldest,) = db.execute("SELECT MIN(at) FROM event_run_log WHERE run_id = ?", (RUN,)).fetchone()
        start = datetime.datetime.fromisoformat(oldest) - datetime.timedelta(seconds=count)
        db.executemany(
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                (
                    RUN,
                    3700 + i % 7,
                    *kinds[i % 3][:1],
                    1 + i % 2,
                    kinds[i % 3][1],
                    (start + datetime.timedelta(seconds=i)).isoformat(sep=" "),
                )
                for i in range(count)
            ),
        )
        (total,) = db.execute("SELECT COUNT(*) FROM event_run_log WHERE run_id = ?", (RUN,)).fetchone()
        (middle,) = db.execute(
            "SELECT id FROM event_run_log WHERE run_id = ? ORDER BY id LIMIT 1 OFFSET ?", (RUN, count // 2)
        ).fetchone()
    return int(total), int(middle)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        database = Path(scratch) / "runlog.db"
        env = {
            **os.environ,
            "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "RUNLOG_LOG_LEVEL": "WARNING",
        }
        subprocess.run(
            [sys.executable, "-m", "gql", "demo"], env=env, check=True, capture_output=True, cwd=ROOT
        )
        total, middle = add_lines(database, args.lines)
        url = f"http://127.0.0.1:{free_port()}"
        server = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "gql", "serve", "--port", url.rsplit(":", 1)[1]],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        try:
            wait_until_healthy(url, server)
            done = subprocess.run(  # noqa: S603
                ["node", str(DRIVER), f"{url}/runs/{RUN}", str(middle)],  # noqa: S607
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=15)
    if done.returncode != 0:
        print(done.stdout, done.stderr, file=sys.stderr)
        return 1
    figures = json.loads(done.stdout)
    print(json.dumps({"lines of run 37": total, **figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
