"""runlog_leases: leases that hold across a Galera cluster

Ours: where GET_LOCK holds on one node only (retention.sweep_lock), a lease is
one row, claimed by a conditional UPDATE that only a free or expired row
matches, so that one sweeper at a time holds it cluster-wide.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection

from gql.store.migrations import steps

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def present(conn: Connection) -> bool:
    """Made before migrations by init-db (main at 776a3ad to c200ac1)."""
    return sa.inspect(conn).has_table("runlog_leases")


def upgrade() -> None:
    if steps.has_table("runlog_leases"):
        return
    op.create_table(
        "runlog_leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column(
            "expires_at",
            sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb"),
            nullable=False,
        ),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
