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

from dataclasses import dataclass, field
from typing import TextIO

import sqlalchemy as sa
from sqlalchemy.engine import Connection

# The newest revision in versions/. Set it with each new revision:
# runner.head() refuses to run when it is not the newest.
HEAD = "0005"
VERSION_TABLE = "alembic_version"


@dataclass
class Migrated:
    """What one init-db did to the schema."""

    revision: str
    """Where the database is now: the head."""
    adopted: str | None = None
    """The revision an unversioned database was found at and stamped with.

    None when it was versioned already, or empty.
    """
    applied: list[str] = field(default_factory=list)
    """Each revision applied, oldest first, as `0002 (its first docstring line)`."""
    created: list[str] = field(default_factory=list)
    """Tables created, and `table.index` for each index added to a table that was there."""

    def lines(self, where: str) -> list[str]:
        """What was done, a sentence each, as init-db prints it and the embedded start logs it."""
        said = []
        if self.adopted:
            said.append(
                f"adopted the existing schema as migration {self.adopted}: it had no alembic_version "
                "table (an earlier release or the events system made it); no row changed"
            )
        said += [f"applied migration {applied}" for applied in self.applied]
        made = f"created {', '.join(self.created)}" if self.created else "nothing to create"
        said.append(f"tables ready on {where} ({made}); schema at migration {self.revision}")
        return said


def version(conn: Connection) -> str | None:
    """The revision alembic_version names; None when the database has no such table (or no row)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()  # noqa: S608


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
