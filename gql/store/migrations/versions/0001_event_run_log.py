"""event_run_log: created where missing; the events system's own kept as it is

The baseline. Where the table exists (the events system made it, with its
TEXT detail and its own indexes such as idx_evlog_at), this revision changes
nothing: not a column, not an index, not a row. Where it does not (a fresh
database), it creates it as the service would have it.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection

from gql.store.migrations import steps

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def present(conn: Connection) -> bool:
    """Made before migrations: any database that has the table is at this revision at least."""
    return sa.inspect(conn).has_table("event_run_log")


def upgrade() -> None:
    if steps.has_table("event_run_log"):
        return
    op.create_table(
        "event_run_log",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("phase", sa.Integer(), nullable=True),
        # TEXT holding JSON, not a JSON column: rows written before this
        # service may hold text that is not JSON.
        sa.Column("detail", sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), nullable=True),
        sa.Column(
            "at", sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb"), nullable=False
        ),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        # Printed for a DBA (init-db --sql), the SQL may meet the events
        # system's table: it must leave it alone there too.
        if_not_exists=steps.offline(),
    )


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only; event_run_log holds the events system's lines")
