"""The embedded database's file, for real: deleted, restored, recreated, read-only and fixed.

Each test serves a real file in tmp_path through the HTTP app, breaks the
file as an operator or a disk would, and checks what a writer, a reader and
`/healthz` see, then that the service recovers without a restart.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings
from gql.store import migrations
from gql.store.db import metadata

from .conftest import ADMIN, Api

ROOT = Path(__file__).resolve().parent.parent
READ = "{ runLog(runId: 1) { nodes { detail { ... on NoteDetail { text } } } } }"


def settings_for(path: Path, **overrides: object) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{path}", admin_tokens=(ADMIN,), **overrides)  # type: ignore[arg-type]


def texts(api: Api) -> list[str]:
    return [node["detail"]["text"] for node in api.data(READ)["runLog"]["nodes"]]


def health(client: TestClient) -> tuple[int, str | None]:
    response = client.get("/healthz")
    return response.status_code, response.json().get("reason")


def backup(path: Path, to: Path) -> None:
    """A consistent copy, as `sqlite3 runlog.db .backup` makes one."""
    source, target = sqlite3.connect(path), sqlite3.connect(to)
    with target:
        source.backup(target)
    source.close()
    target.close()


def test_a_file_deleted_while_serving_answers_false_and_unhealthy_until_restored(tmp_path: Path) -> None:
    path = tmp_path / "runlog.db"
    with TestClient(create_app(settings_for(path))) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "before"})
        backup(path, tmp_path / "backup.db")
        # The operator removes the file; its WAL and shared memory stay.
        path.unlink()

        # Before: true, into the deleted file, and /healthz 200.
        assert api.write(1, "note", {"text": "into the void"}) is False
        status, reason = health(client)
        assert status == 503
        assert reason == (
            f"the SQLite database file {path} is missing (deleted while the service ran?): "
            "restore it, or create it anew with python -m gql init-db"
        )
        body = api.post(READ)
        assert body["errors"][0]["extensions"]["code"] == "DATABASE_UNAVAILABLE"
        # Nothing was created in its place behind the operator's back.
        assert not path.exists()

        shutil.copy(tmp_path / "backup.db", path)
        assert health(client) == (200, None)
        assert api.write(1, "note", {"text": "after"})
        # The old file's WAL was not replayed into the restored one.
        assert texts(api) == ["after", "before"]
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_deleted_file_created_anew_by_init_db_is_served_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "runlog.db"
    with TestClient(create_app(settings_for(path))) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "lost"})
        for name in ("runlog.db", "runlog.db-wal", "runlog.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        assert api.write(1, "note", {"text": "while missing"}) is False
        assert health(client)[0] == 503

        done = subprocess.run(
            [sys.executable, "-m", "gql", "init-db"],
            env={**os.environ, "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{path}"},
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "(created event_run_log, " in done.stdout
        assert health(client) == (200, None)
        assert api.write(1, "note", {"text": "anew"})
        assert texts(api) == ["anew"]


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make `path` read-only for this process while the block runs; the block may end it early.

    As root, permission bits do not stop a write: the immutable attribute
    (`chattr +i`, on ext4 and most local filesystems) does, for root too.
    """
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)  # noqa: S607 (from PATH, as a person would)
    else:
        path.chmod(0o444)
    try:
        yield
    finally:
        writable(path)


def writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)  # noqa: S607 (from PATH, as a person would)
    else:
        path.chmod(0o644)


def test_started_on_a_read_only_file_then_fixed_writes_again_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "runlog.db"
    with sqlite3.connect(path) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
    setup.close()
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # as init-db leaves it: the tables, stamped at the latest migration
        metadata.create_all(conn)
        migrations.upgrade(conn)
    engine.dispose()
    with read_only(path), TestClient(create_app(settings_for(path))) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "refused"}) is False
        status, reason = health(client)
        assert status == 503
        assert reason == (
            f"the SQLite database file {path} is read-only for this process: "
            "writes answer false until it is writable again"
        )
        assert texts(api) == []  # reads go on
        writable(path)
        # Before: false until a restart; the connections had opened the file read-only.
        assert health(client) == (200, None)
        assert api.write(1, "note", {"text": "fixed"})
        assert api.write(1, "note", {"text": "and again"})
        assert texts(api) == ["and again", "fixed"]


def test_a_writer_waits_for_the_lock_as_long_as_the_write_timeout_allows(tmp_path: Path) -> None:
    """busy_timeout comes from RUNLOG_WRITE_TIMEOUT: it was 2 s whatever the setting."""
    path = tmp_path / "runlog.db"
    with TestClient(create_app(settings_for(path, write_timeout=4.5))) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "before"})
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock for 2.5 s
        release = threading.Timer(2.5, holder.execute, ("COMMIT",))
        # From before the timer starts: measured after, a loaded machine could
        # start the clock late and see less than the wait.
        started = time.monotonic()
        release.start()
        try:
            assert api.write(1, "note", {"text": "after a wait"})
            assert time.monotonic() - started >= 2.4  # it did wait for the lock
        finally:
            release.join()
            holder.close()
        assert texts(api) == ["after a wait", "before"]


@pytest.mark.parametrize("write_timeout", [1.5, 4.5])
def test_busy_timeout_is_the_write_timeout(tmp_path: Path, write_timeout: float) -> None:
    path = tmp_path / "runlog.db"
    with TestClient(create_app(settings_for(path, write_timeout=write_timeout))) as client:
        engine = client.app_state["engine"]

        async def busy_timeout() -> int:
            async with engine.connect() as conn:
                return int((await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar_one())

        assert client.portal.call(busy_timeout) == round(write_timeout * 1000)  # type: ignore[union-attr]
        # A write sets its own, by its deadline, and puts the connection's back: every pooled one has it.
        assert Api(client).write(1, "note", {"text": "written"})

        async def every_busy_timeout() -> list[int]:
            held = [await engine.connect() for _ in range(engine.sync_engine.pool.checkedin())]
            try:
                return [int((await c.exec_driver_sql("PRAGMA busy_timeout")).scalar_one()) for c in held]
            finally:
                for conn in held:
                    await conn.close()

        found = client.portal.call(every_busy_timeout)  # type: ignore[union-attr]
        assert found and set(found) == {round(write_timeout * 1000)}


def test_a_first_start_on_a_new_file_says_it_created_the_tables_and_adopted_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gql.edge.app")
    with TestClient(create_app(settings_for(tmp_path / "new.db"))):
        pass
    said = [record.getMessage() for record in caplog.records if record.name == "gql.edge.app"]
    assert not any("adopted" in line for line in said), said
    ready = next(line for line in said if line.startswith("tables ready on "))
    assert "created event_run_log," in ready and ready.endswith(f"schema at migration {migrations.HEAD}")
