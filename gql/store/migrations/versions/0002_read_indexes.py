"""The two indexes the reads and the prune use, on event_run_log

`(run_id, at, id)` serves a run's pages newest first (keyset on at, id) and
the prune's join from a terminal run to its lines; `(run_id, kind, at, id)`
makes a read filtered to a rare kind an index range, never a scan of the
run's whole log. SQLite orders by `at` normalised to UTC (db.SQLITE_AT_ORDER),
so its two are over that expression, spelt exactly as its reads spell it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from gql.store.migrations import steps

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# A copy, not an import of db.SQLITE_AT_ORDER: a revision stays what it was
# when it shipped. tests/test_migrations.py checks that head still matches db.py.
_AT_UTC = (
    "coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
    "THEN strftime('%Y-%m-%d %H:%M:%f', at) END, '')"
)
_MYSQL = {
    "ix_event_run_log_run_at": ["run_id", "at", "id"],
    "ix_event_run_log_run_kind_at": ["run_id", "kind", "at", "id"],
}
_SQLITE = {
    "ix_event_run_log_run_utc": ["run_id", _AT_UTC, "id"],
    "ix_event_run_log_run_kind_utc": ["run_id", "kind", _AT_UTC, "id"],
}


def _wanted(dialect: str) -> dict[str, list[str]]:
    return _SQLITE if dialect == "sqlite" else _MYSQL


def present(conn: Connection) -> bool:
    """Made before migrations by init-db, which added both to any event_run_log."""
    return all(
        steps.index_is_there(conn, "event_run_log", name, columns)
        for name, columns in _wanted(conn.dialect.name).items()
    )


def upgrade() -> None:
    steps.add_missing_indexes("event_run_log", _SQLITE, _MYSQL, _AT_UTC)


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
