"""What revisions are made of: indexes built online, and checks of what is already there.

Revisions use it as `from gql.store.migrations import steps`, online or offline (`init-db --sql`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from alembic import context, op
from sqlalchemy.engine import Connection

_MYSQL = ("mysql", "mariadb")


def offline() -> bool:
    """Whether this run prints SQL instead of applying it (no database to look at)."""
    return context.is_offline_mode()


def has_table(name: str) -> bool:
    """Whether the database has `name` (never, offline: the SQL then says IF NOT EXISTS or assumes not)."""
    return not offline() and sa.inspect(op.get_bind()).has_table(name)


def add_index(name: str, table: str, columns: Sequence[str]) -> None:
    """Build an index on plain columns of a table that may be large and in use.

    On MySQL/MariaDB online (ALGORITHM=INPLACE, LOCK=NONE: refused rather than block writers).
    """
    dialect = op.get_context().dialect
    if dialect.name in _MYSQL:
        quote = dialect.identifier_preparer.quote
        listed = ", ".join(quote(column) for column in columns)
        op.execute(
            f"ALTER TABLE {quote(table)} ADD INDEX {quote(name)} ({listed}), ALGORITHM=INPLACE, LOCK=NONE"
        )
    else:
        op.create_index(name, table, list(columns))


def add_missing_indexes(
    table: str, sqlite: Mapping[str, Sequence[str]], mysql: Mapping[str, Sequence[str]], expression: str
) -> None:
    """Build each index (name: columns) of this database's dialect that `table` lacks, as `add_index` does.

    A column spelled `expression` is that SQL expression (SQLite's normalised `at`), not a name.
    """
    on_sqlite = op.get_context().dialect.name == "sqlite"
    for name, columns in (sqlite if on_sqlite else mysql).items():
        if not offline() and index_is_there(op.get_bind(), table, name, columns):
            continue
        if on_sqlite:
            op.create_index(name, table, [sa.text(c) if c == expression else c for c in columns])
        else:
            add_index(name, table, columns)


def index_is_there(conn: Connection, table: str, name: str, columns: Sequence[str]) -> bool:
    """Whether `table` has the index `name`, or (MySQL) one on the same columns under another name."""
    if conn.dialect.name == "sqlite":
        # SQLAlchemy does not reflect an index on an expression on SQLite: the name says.
        rows = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
        )
        return name in set(rows.scalars())
    found = sa.inspect(conn).get_indexes(table)
    return any(ix["name"] == name or list(ix["column_names"]) == list(columns) for ix in found)
