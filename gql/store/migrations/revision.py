"""Where a database's schema is: `version(conn)`, the revision its alembic_version names; and `Migrated`."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

# The newest revision in versions/: runner.head() refuses to run when it is not.
HEAD = "0010"
VERSION_TABLE = "alembic_version"


@dataclass
class Migrated:
    """What one init-db did to the schema."""

    revision: str  # where the database is now: the head
    adopted: str | None = None  # what an unversioned database was found at, and stamped with
    applied: list[str] = field(default_factory=list)  # oldest first, as `0002 (its first docstring line)`
    created: list[str] = field(default_factory=list)  # tables, and `table.index` for an index added

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
