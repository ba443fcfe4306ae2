"""The database's schema as Alembic revisions (versions/): `upgrade(conn)` and `write_sql(conn, out)`.

An unversioned database is adopted (stamped with the latest revision whose objects it has,
by each revision's `present`). No revision touches `event_runs`. At head, Alembic is not imported.
"""

from __future__ import annotations

from typing import TextIO

from sqlalchemy.engine import Connection

from .revision import HEAD, VERSION_TABLE, Migrated, version

__all__ = ["HEAD", "VERSION_TABLE", "Migrated", "upgrade", "version", "write_sql"]


def upgrade(conn: Connection, *, writable: bool = True) -> Migrated:
    """Bring the database to head: adopt it if unversioned, then apply what is missing.

    `writable=False` (a read-only embedded file) leaves a complete unversioned database unstamped.
    """
    if version(conn) == HEAD:
        return Migrated(HEAD)
    from . import runner

    return runner.upgrade(conn, writable=writable)


def write_sql(conn: Connection, out: TextIO) -> None:
    """Print to `out` the SQL that `upgrade` would run on this database, running none of it (see runner)."""
    from . import runner

    runner.write_sql(conn, out)
