"""init-db runs the schema's migrations (gql/store/migrations) from each place a database starts.

From empty, from the events system's own event_run_log (the seed's table, with
its rows, its TEXT detail and its idx_evlog_at), and from the schema the
previous release's init-db made (no alembic_version table). Each ends at the
head revision with the tables and indexes db.py declares, and the service
writes and reads on it. `init-db --sql` prints the same changes and applies
none; applied by hand, they leave init-db nothing to do.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.store import migrations
from gql.store.db import create_engine, event_runs, init_db, metadata
from gql.store.migrations import runner

from .conftest import Api, Backend

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "migrations"
HEAD = migrations.HEAD
# Every revision, oldest first, as the files say.
REVISIONS = [script.revision for script in reversed(list(runner.scripts().walk_revisions()))]
# Schemas earlier releases' init-db made, before migrations (tests/migrations/),
# and the revision each is adopted as: the previous release is the last.
RELEASES = {"5c8c953": "0003", "c200ac1": "0004"}
# The indexes of event_run_log that the service's reads and prune use (db.py).
SERVICE_INDEXES = {
    "sqlite": {
        "ix_event_run_log_run_utc",
        "ix_event_run_log_run_kind_utc",
        "ix_event_run_log_run_phase_utc",
        "ix_event_run_log_run_step_utc",
        "ix_event_run_log_run_kind_step_utc",
        "ix_event_run_log_kind_run_utc",
    },
    "mariadb": {
        "ix_event_run_log_run_at",
        "ix_event_run_log_run_kind_at",
        "ix_event_run_log_run_phase_at",
        "ix_event_run_log_run_step_at",
        "ix_event_run_log_run_kind_step_at",
        "ix_event_run_log_kind_run_at",
    },
}


def applied(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The revisions init-db says it applied, in its order."""
    return [line.split()[2] for line in done.stdout.splitlines() if line.startswith("applied migration ")]


def init_db_cli(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "gql", "init-db", *args],
        env={**os.environ, "RUNLOG_DATABASE_URL": backend.url},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def run_script(backend: Backend, sql: str) -> None:
    """Run a file of SQL statements as a DBA would (the mysql client, sqlite3's .read)."""
    if backend.name == "sqlite":
        raw = backend.sync.raw_connection()
        try:
            raw.driver_connection.executescript(sql)  # type: ignore[union-attr]
        finally:
            raw.close()
        return
    with backend.sync.begin() as conn:
        for statement in sql.split(";\n"):
            if any(line.strip() and not line.startswith("--") for line in statement.splitlines()):
                conn.exec_driver_sql(statement)


def schema(backend: Backend) -> dict[str, Any]:
    """Every table with its columns and indexes, as the database reports them."""
    if backend.name == "sqlite":
        tables = [
            name
            for (name,) in backend.rows(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        found: dict[str, Any] = {t: backend.rows(f"PRAGMA table_info({t})") for t in tables}
        for name, table, sql in backend.rows(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ):
            found[f"{table}.{name}"] = " ".join(sql.split())
        return found
    found = {}
    for (table,) in backend.rows("SHOW TABLES"):
        create = backend.rows(f"SHOW CREATE TABLE `{table}`")[0][1]
        lines = re.sub(r" AUTO_INCREMENT=\d+", "", create).splitlines()
        # The order of a table's keys is the order they were built in, not a difference.
        keys = sorted(line.rstrip(",") for line in lines if line.startswith("  KEY "))
        found[table] = [line.rstrip(",") for line in lines if not line.startswith("  KEY ")] + keys
    return found


def index_names(backend: Backend, table: str = "event_run_log") -> set[str]:
    sql = (
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :t AND sql IS NOT NULL"
        if backend.name == "sqlite"
        else "SELECT DISTINCT index_name FROM information_schema.statistics "
        "WHERE table_schema = DATABASE() AND table_name = :t AND index_name != 'PRIMARY'"
    )
    return {name for (name,) in backend.rows(sql, t=table)}


def version(backend: Backend) -> Any:
    return backend.scalar("SELECT version_num FROM alembic_version")


def the_models_schema(backend: Backend) -> dict[str, Any]:
    """What db.py declares, created straight from its tables (as the tests' fixtures do), then dropped."""
    backend.create_tables()
    made = schema(backend)
    backend.drop_tables()
    return made


def write_and_read(backend: Backend, run_id: int = 7) -> list[dict[str, Any]]:
    """Write a line through the service, then read the run's lines back through it."""
    with TestClient(create_app(backend.settings())) as client:
        api = Api(client)
        assert api.write(run_id, "note", {"text": "after the migration"}) is True
        nodes: list[dict[str, Any]] = api.data(
            "query R($runId: ID!) { runLog(runId: $runId) { nodes { id kind "
            "detail { __typename ... on NoteDetail { text } ... on UnreadableDetail { stored: text } } } } }",
            {"runId": run_id},
        )["runLog"]["nodes"]
    assert nodes[0]["detail"] == {"__typename": "NoteDetail", "text": "after the migration"}
    return nodes


def create_events_runs(backend: Backend) -> None:
    """The events system's event_runs, with a column of its own the service never reads."""
    backend.execute(
        "CREATE TABLE event_runs (id INTEGER PRIMARY KEY, status VARCHAR(32) NOT NULL, "
        "ended_at DATETIME NULL, updated_at DATETIME NOT NULL, title VARCHAR(100) NULL)"
    )
    backend.execute("INSERT INTO event_runs VALUES (7, 'running', NULL, '2026-01-01 00:00:00', 'Yew')")


def seed_database(backend: Backend) -> None:
    """event_run_log made by the seed's DDL, with rows the events system wrote."""
    create_events_runs(backend)
    run_script(backend, (FIXTURES / f"seed.{backend.name}.sql").read_text())
    backend.execute(
        "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) VALUES "
        "(7, NULL, 'run.created', NULL, NULL, '2026-01-01 10:00:00.125'), "
        "(7, 3, 'note', 2, '{\"text\": \"by hand\"}', '2026-01-01 10:00:01.000'), "
        "(7, NULL, 'note', NULL, 'not json {', '2026-01-01 10:00:02.500'), "
        "(8, NULL, 'run.future', NULL, '{\"x\": 1}', '2026-01-01 10:00:03.000')"
    )


def earlier_release(backend: Backend, commit: str = "c200ac1") -> None:
    """The schema an earlier release's init-db made, from its recorded DDL, with a line in it."""
    run_script(backend, (FIXTURES / f"init_db_{commit}.{backend.name}.sql").read_text())
    with backend.sync.begin() as conn:
        event_runs.create(conn)
    backend.execute(
        "INSERT INTO event_run_log (run_id, kind, detail, at) "
        "VALUES (7, 'note', '{\"text\": \"before\"}', '2026-01-01 10:00:00')"
    )


def test_from_empty_init_db_makes_the_tables_and_indexes_db_py_declares(backend: Backend) -> None:
    model = the_models_schema(backend)
    done = init_db_cli(backend)
    assert applied(done) == REVISIONS
    assert f"schema at migration {HEAD}" in done.stdout
    assert version(backend) == HEAD == REVISIONS[-1]
    migrated = schema(backend)
    assert migrated.pop("alembic_version")
    assert migrated == model
    write_and_read(backend)


def test_from_the_seeds_table_init_db_adds_the_services_indexes_and_changes_no_row(backend: Backend) -> None:
    model = the_models_schema(backend)
    seed_database(backend)
    rows = backend.rows("SELECT * FROM event_run_log ORDER BY id")
    runs = schema(backend)["event_runs"]
    done = init_db_cli(backend)
    assert "adopted the existing schema as migration 0001" in done.stdout
    assert applied(done) == REVISIONS[1:]
    assert version(backend) == HEAD
    # Not a row, not a column, not its own index changed; event_runs left alone.
    assert backend.rows("SELECT * FROM event_run_log ORDER BY id") == rows
    assert index_names(backend) == {"idx_evlog_at", *SERVICE_INDEXES[backend.name]}
    if backend.name == "mariadb":
        assert (
            backend.scalar(
                "SELECT data_type FROM information_schema.columns WHERE table_schema = DATABASE() "
                "AND table_name = 'event_run_log' AND column_name = 'detail'"
            )
            == "text"
        )
    after = schema(backend)
    assert after["event_runs"] == runs
    assert set(after) - {"alembic_version"} >= {t for t in model if "." not in t}
    assert after["event_run_log_keys"] == model["event_run_log_keys"]
    nodes = write_and_read(backend)
    assert [node["kind"] for node in nodes[1:]] == ["NOTE", "NOTE", "RUN_CREATED"]
    assert nodes[1]["detail"] == {"__typename": "UnreadableDetail", "stored": "not json {"}
    assert "nothing to create" in init_db_cli(backend).stdout


@pytest.mark.parametrize("commit", RELEASES)
def test_from_an_earlier_release_init_db_adopts_what_it_made_and_adds_the_rest(
    backend: Backend, commit: str
) -> None:
    model = the_models_schema(backend)
    earlier_release(backend, commit)
    done = init_db_cli(backend)
    adopted = RELEASES[commit]
    assert f"adopted the existing schema as migration {adopted}:" in done.stdout
    assert applied(done) == REVISIONS[REVISIONS.index(adopted) + 1 :]
    if adopted == HEAD:  # the previous release: nothing to do but the stamp
        assert "(nothing to create)" in done.stdout
    created = done.stdout.split("(created ")[1].split(")")[0].split(", ") if adopted != HEAD else []
    if adopted == "0003":
        assert "runlog_leases" in created
    if adopted < "0005":  # both releases before event_run_log_pruned (0005, tail's)
        assert "event_run_log_pruned" in created
    assert version(backend) == HEAD
    migrated = schema(backend)
    assert migrated.pop("alembic_version")
    assert migrated == model
    nodes = write_and_read(backend)
    assert nodes[1]["detail"] == {"__typename": "NoteDetail", "text": "before"}


@pytest.mark.parametrize("start", ["empty", "seed", "5c8c953", "c200ac1"])
def test_init_db_sql_prints_the_changes_and_applies_none_of_them(backend: Backend, start: str) -> None:
    if start == "seed":
        seed_database(backend)
    elif start in RELEASES:
        earlier_release(backend, start)
    before = schema(backend)
    sql = init_db_cli(backend, "--sql").stdout
    assert schema(backend) == before, "--sql changed the database"
    # event_runs is the events system's: the migrations never name it.
    assert "event_runs" not in sql
    assert "CREATE TABLE alembic_version" in sql
    stamp = {"empty": "0001", "seed": "0001", **RELEASES}[start]
    assert f"INSERT INTO alembic_version (version_num) VALUES ('{stamp}')" in sql
    if start in RELEASES:
        assert not re.search(r"CREATE TABLE (IF NOT EXISTS )?event_run_log \(", sql)
        # 0002's indexes were there; only 0006's (the phase and step filters) and 0007's (holds) are made.
        made = set(re.findall(r"ix_event_run_log_run\w*", sql))
        assert made == {name for name in SERVICE_INDEXES[backend.name] if "phase" in name or "step" in name}
        assert ("CREATE TABLE runlog_leases" in sql) == (RELEASES[start] == "0003")
    elif backend.name == "mariadb":
        # Built online: the events system goes on writing lines meanwhile.
        assert (
            "ALTER TABLE event_run_log ADD INDEX ix_event_run_log_run_at (run_id, at, id), "
            "ALGORITHM=INPLACE, LOCK=NONE;" in sql
        )
    else:
        assert "CREATE INDEX ix_event_run_log_run_utc ON event_run_log (run_id, coalesce(" in sql
    if start == "empty":
        assert "CREATE TABLE IF NOT EXISTS event_run_log" in sql
    if start == "empty":
        with backend.sync.begin() as conn:
            event_runs.create(conn)
    # Applied by hand, the printed SQL leaves init-db nothing to do.
    run_script(backend, sql)
    assert version(backend) == HEAD
    done = init_db_cli(backend)
    assert "(nothing to create)" in done.stdout and "applied" not in done.stdout
    assert "nothing to apply" in init_db_cli(backend, "--sql").stdout
    write_and_read(backend)


def test_an_init_db_at_head_leaves_alembic_version_and_the_schema_as_they_are(backend: Backend) -> None:
    async def twice() -> None:
        engine = create_engine(backend.settings())
        try:
            first = await init_db(engine)
            second = await init_db(engine)
        finally:
            await engine.dispose()
        assert first.applied and not second.applied and not second.created and second.adopted is None

    asyncio.run(twice())
    assert backend.rows("SELECT version_num FROM alembic_version") == [(HEAD,)]


def test_the_migrations_ship_in_the_package_with_no_alembic_ini() -> None:
    """`pip install .` (and the Docker image, which runs it) carries every file Alembic needs."""
    import setuptools

    found = setuptools.find_packages(str(ROOT), include=["gql*"])
    assert {"gql.store.migrations", "gql.store.migrations.versions"} <= set(found)
    revisions = sorted(p.name for p in (ROOT / "gql" / "store" / "migrations" / "versions").glob("0*.py"))
    assert len(revisions) == len(REVISIONS)
    assert not (ROOT / "gql" / "store" / "migrations" / "alembic.ini").exists()
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "store/migrations/script.py.mako" in data["gql"]


def test_the_models_tables_are_created_by_the_migrations_alone(backend: Backend) -> None:
    """Every table of db.py's model but the events system's comes from a revision."""
    ours = {t.name for t in metadata.sorted_tables} - {event_runs.name}
    with backend.sync.begin() as conn:
        migrations.upgrade(conn)
    assert ours <= set(sa.inspect(backend.sync).get_table_names())
    assert not sa.inspect(backend.sync).has_table(event_runs.name)


def test_a_second_init_db_waits_for_the_first_instead_of_migrating_beside_it(
    mariadb: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deploys at once would both stamp an unversioned database; the second waits its turn."""
    monkeypatch.setattr(runner, "_LOCK_WAIT", 1)
    first = mariadb.sync.connect()
    try:
        assert first.execute(sa.text("SELECT GET_LOCK('runlog.migrations', 0)")).scalar() == 1
        with (
            mariadb.sync.connect() as conn,
            pytest.raises(RuntimeError, match="another init-db held the lock"),
        ):
            migrations.upgrade(conn)
        assert not sa.inspect(mariadb.sync).has_table("event_run_log")
    finally:
        first.execute(sa.text("SELECT RELEASE_LOCK('runlog.migrations')"))
        first.close()
    with mariadb.sync.begin() as conn:
        assert migrations.upgrade(conn).applied
    assert version(mariadb) == HEAD


def test_head_names_the_newest_revision() -> None:
    """A database at HEAD is taken for up to date without reading the revisions: HEAD must be the newest."""
    assert runner.head() == migrations.HEAD == REVISIONS[-1]


def test_a_start_on_a_database_at_head_does_not_load_alembic(tmp_path: Path) -> None:
    """The embedded `serve` runs init-db at every start; at head that is one query, not Alembic's import."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}"
    env = {**os.environ, "RUNLOG_DATABASE_URL": url}
    made = subprocess.run(
        [sys.executable, "-m", "gql", "init-db"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    started = subprocess.run(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from gql.store.db import create_engine, init_db\n"
            "from gql.settings import Settings\n"
            "async def main():\n"
            "    engine = create_engine(Settings.from_env())\n"
            "    print((await init_db(engine)).revision, 'alembic' in sys.modules)\n"
            "    await engine.dispose()\n"
            "asyncio.run(main())\n",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == [HEAD, "False"]


def test_operating_md_lists_every_revision_in_order() -> None:
    """docs/operating.md's table of revisions is the revisions shipped, so a new one cannot go unmentioned."""
    page = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `(\d{4})` \|", page, flags=re.MULTILINE)
    assert listed == REVISIONS
