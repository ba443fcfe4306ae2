"""event_run_log_pruned: what pruning took from each run's log

Ours: one row per run, written in the transaction of each prune slice that
deletes lines of the run (gql/store/pruning.py): how many lines in all, the
newest `at` among them, and when. A page that reaches a run's oldest
surviving line says from it that older lines were pruned (RunLogPage.pruned).
`line_count`, not `lines`: LINES is a reserved word in MariaDB.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from gql.store.migrations import steps

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if steps.has_table("event_run_log_pruned"):
        return
    millis = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
    op.create_table(
        "event_run_log_pruned",
        sa.Column("run_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("line_count", sa.BigInteger(), nullable=False),
        sa.Column("through", millis, nullable=True),
        sa.Column("pruned_at", millis, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
