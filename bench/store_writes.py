"""What one write costs the store, in process: CPU, wall time and statements, plain and keyed.

    python -m bench.store_writes              # 400 writes each, SQLite and MariaDB
    python -m bench.store_writes --writes 1000

Not a test: `store.insert_lines` (one line) and `store.insert_keyed` on the
writes' pool, one at a time, `--writes` times after 50 uncounted, on a
temporary SQLite file and a scratch MariaDB database (RUNLOG_BENCH_MARIADB_URL).
On MariaDB, the statements a write sends are the server's `Questions` counter
over the run, so nothing else may use the server meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from bench.mariadb import MARIADB_URL, connect
from gql import store
from gql.settings import Settings
from gql.store.db import create_engine, metadata

LINE = store.NewLine(run_id=1, kind="note", detail='{"text": "x"}')


def _questions() -> int:
    with connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])  # type: ignore[index]


async def _measure(url: str, keyed: bool, writes: int, count: Callable[[], int] | None) -> str:
    engine = create_engine(Settings(database_url=url), writes=True)
    loop = asyncio.get_running_loop()

    async def write(n: int) -> None:
        deadline = loop.time() + 5
        if keyed:
            await store.insert_keyed(engine, LINE, key_digest=f"k{n}", line_digest="d", deadline=deadline)
        else:
            await store.insert_lines(engine, [LINE], deadline=deadline)

    try:
        for n in range(-50, 0):
            await write(n)
        before = count() if count else 0
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(writes):
            await write(n)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        # The counter's own query counts one.
        sent = f", {(count() - before - 1) / writes:.2f} statements" if count else ""
    finally:
        await engine.dispose()
    return f"{cpu / writes * 1000:.3f} ms CPU, {wall / writes * 1000:.3f} ms wall{sent}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=400, help="writes counted, of each kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runlog.db"
        metadata.create_all(sa.create_engine(f"sqlite:///{path}"))
        for keyed in (False, True):
            found = asyncio.run(_measure(f"sqlite+aiosqlite:///{path}", keyed, args.writes, None))
            print(f"SQLite, {'keyed' if keyed else 'plain'} write: {found}")
    name = f"runlog_bench_writes_{uuid.uuid4().hex[:8]}"
    with connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        url = MARIADB_URL.set(database=name)
        metadata.create_all(sa.create_engine(url.set(drivername="mysql+pymysql")))
        shown = url.render_as_string(hide_password=False)
        for keyed in (False, True):
            found = asyncio.run(_measure(shown, keyed, args.writes, _questions))
            print(f"MariaDB, {'keyed' if keyed else 'plain'} write: {found}")
    finally:
        with connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


if __name__ == "__main__":
    main()
