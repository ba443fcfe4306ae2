"""The index finished runs held by a failed cleanup are found by, on event_run_log

`(kind, run_id)`: the runs with a `cleanup.failed` line are an index range of
that kind, so /metrics finds the finished runs a failed cleanup still holds
without probing every run that ever ended (gql/edge/hold_metrics.py).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

from gql.store.migrations import steps

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_NAME, _COLUMNS = "ix_event_run_log_kind_run", ["kind", "run_id"]


def upgrade() -> None:
    if not steps.offline() and steps.index_is_there(op.get_bind(), "event_run_log", _NAME, _COLUMNS):
        return
    steps.add_index(_NAME, "event_run_log", _COLUMNS)


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
