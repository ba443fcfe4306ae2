"""event_run_log_keys: the idempotency keys of keyed writes

Ours (the contract fixes event_run_log's columns): a key is written in the
same transaction as its line, kept as its SHA-256, with the digest of the line
it stored, and forgotten after a day (writes.KEY_TTL).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection

from gql.store.migrations import steps

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def present(conn: Connection) -> bool:
    """Made before migrations by init-db."""
    return sa.inspect(conn).has_table("event_run_log_keys")


def upgrade() -> None:
    if steps.has_table("event_run_log_keys"):
        return
    millis = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
    op.create_table(
        "event_run_log_keys",
        sa.Column("run_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("key_digest", sa.String(64), primary_key=True),
        sa.Column("line_digest", sa.String(64), nullable=False),
        sa.Column("created_at", millis, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    # A new, empty table: no online build needed.
    op.create_index("ix_event_run_log_keys_created", "event_run_log_keys", ["created_at"])


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
