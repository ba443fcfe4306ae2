"""Alembic at work: adopting an unversioned database, applying revisions, printing their SQL.

Imported only when there is work to do; needs no alembic.ini.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection

from .revision import HEAD, VERSION_TABLE, Migrated, version

# Two init-db runs at once (two deploys) would both stamp an unversioned database: one waits.
_LOCK = "runlog.migrations"
_LOCK_WAIT = 60


def config() -> Config:
    """Alembic's configuration, set here rather than read from an alembic.ini."""
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent))
    return cfg


@functools.cache
def scripts() -> ScriptDirectory:
    """The revisions (read once a process: each init-db after the first costs no file reads)."""
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision, as the files say (gql.store.migrations.HEAD must name it; a test checks)."""
    found = scripts().get_current_head()
    if found is None:
        raise RuntimeError("gql/store/migrations/versions holds no revision: the package is incomplete")
    if found != HEAD:
        raise RuntimeError(f"gql.store.migrations.HEAD is {HEAD!r}, the newest revision is {found!r}: set it")
    return found


def detect(conn: Connection) -> str | None:
    """The revision an unversioned database is at: the last, oldest first, whose objects it all has.

    None for a database without event_run_log. Only the revisions made before
    migrations have a `present` check; the walk stops at the first without one.
    """
    found = None
    for script in reversed(list(scripts().walk_revisions("base", "heads"))):
        present: Callable[[Connection], bool] | None = getattr(script.module, "present", None)
        if present is None or not present(conn):
            break
        found = script.revision
    return found


def upgrade(conn: Connection, *, writable: bool = True) -> Migrated:
    """What gql.store.migrations.upgrade does when the database is not at head."""
    target = head()
    if not writable and version(conn) is None and detect(conn) == target:
        return Migrated(target)
    with _locked(conn):
        start = version(conn)  # again: another init-db may have run meanwhile
        if start == target:
            return Migrated(target)
        before = _objects(conn)
        adopted = detect(conn) if start is None else None
        done = Migrated(target, adopted=adopted)

        def record(*, ctx: MigrationContext, step: MigrationInfo, **_: Any) -> None:
            if not step.is_stamp and step.up_revision_id is not None:
                done.applied.append(_describe(step.up_revision_id))

        _run(conn, start=start, adopted=adopted, on_version_apply=record)
        after = _objects(conn)
    # A new table's indexes come with it: it is named alone.
    tables = {name for name in before if "." not in name}
    done.created = sorted(
        name for name in after if name not in before and ("." not in name or name.split(".")[0] in tables)
    )
    return done


def write_sql(conn: Connection, out: TextIO) -> None:
    """Print to `out` the SQL that `upgrade` would run on this database (to head), running none of it."""
    start = version(conn)
    adopted = detect(conn) if start is None else None
    if start == head():
        out.write(f"-- {VERSION_TABLE} is at head ({head()}): nothing to apply\n")
        return
    if start is not None:
        out.write(f"-- {VERSION_TABLE} is at {start}: the migrations after it, to head ({head()})\n")
    elif adopted is not None:
        out.write(
            f"-- no {VERSION_TABLE} yet, and the database has what migration {adopted} makes "
            f"(an earlier release or the events system made it): stamped {adopted}, then to head ({head()})\n"
        )
    else:
        out.write(f"-- an empty database: every migration, to head ({head()})\n")
    _run(conn.engine.url, start=start, adopted=adopted, out=out)


# ── inside ───────────────────────────────────────────────────────────────────


def _describe(revision: str) -> str:
    script = scripts().get_revision(revision)
    return f"{revision} ({script.doc if script is not None else '?'})"


def _run(
    target: Connection | URL,
    *,
    start: str | None,
    adopted: str | None,
    on_version_apply: Callable[..., None] | None = None,
    out: TextIO | None = None,
) -> None:
    """Run the revisions after `start` (versioned) or after `adopted` (stamped first).

    On a connection, applied; for a URL, printed to `out` (offline mode).
    """
    cfg = config()
    offline = isinstance(target, URL)
    if offline:
        cfg.attributes.update(url=target, out=out)
    else:
        cfg.attributes.update(connection=target, on_version_apply=on_version_apply)
    if adopted is not None:
        # An unversioned database: alembic_version is created and stamped
        # with what the database already has, then the rest runs.
        command.stamp(cfg, adopted, sql=offline)
        start = adopted
    # Offline, Alembic cannot read where the database is: it is told.
    command.upgrade(cfg, f"{start}:head" if offline and start is not None else "head", sql=offline)


@contextmanager
def _locked(conn: Connection) -> Iterator[None]:
    if conn.dialect.name == "sqlite":
        yield
        return
    taken = conn.execute(
        sa.text("SELECT GET_LOCK(:name, :wait)"), {"name": _LOCK, "wait": _LOCK_WAIT}
    ).scalar()
    if taken != 1:
        raise RuntimeError(
            f"another init-db held the lock {_LOCK!r} for {_LOCK_WAIT}s: it is still migrating; try again"
        )
    try:
        yield
    finally:
        conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": _LOCK})


def _objects(conn: Connection) -> list[str]:
    """Every table (but alembic_version) and `table.index` of each of their indexes."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT tbl_name, CASE type WHEN 'index' THEN name END FROM sqlite_master "
            "WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'"
        )
    else:
        rows = conn.execute(
            sa.text(
                "SELECT t.table_name, s.index_name FROM information_schema.tables t "
                "LEFT JOIN information_schema.statistics s ON s.table_schema = t.table_schema "
                "AND s.table_name = t.table_name AND s.index_name != 'PRIMARY' "
                "WHERE t.table_schema = DATABASE()"
            )
        )
    found: dict[str, None] = {}
    for table, index in rows:
        if table == VERSION_TABLE:
            continue
        found[table] = None
        if index is not None:
            found[f"{table}.{index}"] = None
    return list(found)
