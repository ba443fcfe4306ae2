"""The index finished runs held by a failed cleanup are found by, on event_run_log

`(kind, run_id, at, id)`: the runs with a `cleanup.failed` line are an index
range of that kind, so /metrics finds the finished runs a failed cleanup still
holds without probing every run that ever ended (gql/edge/hold_metrics.py).
`at` and `id` follow as in 0002's run_kind index, so that a page by kind is an
ordered range whichever of the two a planner takes. SQLite's is over `at`
normalised to UTC, as 0002's are.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gql.store.migrations import steps

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# A copy, as in 0002: a revision stays what it was when it shipped.
_AT_UTC = (
    "coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
    "THEN strftime('%Y-%m-%d %H:%M:%f', at) END, '')"
)
_MYSQL = {"ix_event_run_log_kind_run_at": ["kind", "run_id", "at", "id"]}
_SQLITE = {"ix_event_run_log_kind_run_utc": ["kind", "run_id", _AT_UTC, "id"]}


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    wanted = _SQLITE if dialect == "sqlite" else _MYSQL
    for name, columns in wanted.items():
        if not steps.offline() and steps.index_is_there(op.get_bind(), "event_run_log", name, columns):
            continue
        if dialect == "sqlite":
            op.create_index(name, "event_run_log", [sa.text(c) if c == _AT_UTC else c for c in columns])
        else:
            steps.add_index(name, "event_run_log", columns)


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
