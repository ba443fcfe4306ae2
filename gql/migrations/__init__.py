"""The database's schema as Alembic revisions (versions/), and how init-db applies them.

A database an earlier release's init-db made has no alembic_version table: it
is adopted, stamped with the latest revision whose objects it already has
(each revision made before migrations says how to tell, in its `present`), and
the newer revisions run from there. `event_runs` is the events system's table
and no revision touches it. A database at head costs one query and no Alembic
(importing it and reading the revisions is about 0.4 s of CPU): Alembic is in
`runner`, imported only when there is work to do.
"""

from __future__ import annotations

from typing import TextIO

from sqlalchemy.engine import Connection

from .revision import HEAD, VERSION_TABLE, Migrated, version

__all__ = ["HEAD", "VERSION_TABLE", "Migrated", "upgrade", "version", "write_sql"]


def upgrade(conn: Connection, *, writable: bool = True) -> Migrated:
    """Bring the database to head: adopt it if unversioned, then apply what is missing.

    `writable=False` (an embedded file this process may not write) leaves an
    unversioned database that has everything unstamped, so that the service
    still starts and serves its reads; it is stamped the first time init-db
    runs on it writable. Anything else to do fails, as the write would.
    """
    if version(conn) == HEAD:
        return Migrated(HEAD)
    from . import runner

    return runner.upgrade(conn, writable=writable)


def write_sql(conn: Connection, out: TextIO) -> None:
    """Print to `out` the SQL that `upgrade` would run on this database, running none of it (see runner)."""
    from . import runner

    runner.write_sql(conn, out)
