"""event_run_log_steps: each step's newest step line, kept by triggers on event_run_log

Ours (the contract fixes event_run_log's columns): one row per (run_id, step_id),
naming the step's newest `step.parked`, `step.retry`, `step.refused` or
`step.status` line (by `at`, then `id`), so that a run's open steps are an index
range (gql/store/newest.py). Kept by an INSERT and a DELETE trigger on
event_run_log (gql/store/step_state.py), whoever writes or prunes; filled from the log
already written once the triggers are in place, newest-wins, so that lines
written meanwhile are counted either way. The fill reads every step line once
(seconds per million lines).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from gql.store.migrations import steps
from gql.store.step_state import backfill, triggers

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if not steps.has_table("event_run_log_steps"):
        op.create_table(
            "event_run_log_steps",
            sa.Column("run_id", sa.Integer(), primary_key=True, autoincrement=False),
            sa.Column("step_id", sa.Integer(), primary_key=True, autoincrement=False),
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
            sa.Column("kind", sa.String(64), nullable=True),
            sa.Column(
                "line_at",
                sa.String(32).with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb"),
                nullable=True,
            ),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
        op.create_index("ix_event_run_log_steps_run_kind", "event_run_log_steps", ["run_id", "kind"])
    for trigger in triggers(dialect):  # IF NOT EXISTS: a second run adds nothing
        op.execute(trigger)
    op.execute(backfill(dialect))


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
