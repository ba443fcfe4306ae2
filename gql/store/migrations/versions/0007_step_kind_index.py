"""The index a run's holds find its steps' newest lines by, on event_run_log

`(run_id, kind, step_id, at, id)`: whether a step has a step line newer than
another is a seek per kind, so a run's open step holds are found without
reading its steps' other lines (gql/store/newest.py). SQLite's is over `at`
normalised to UTC, as 0002's are.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from gql.store.migrations import steps

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# A copy, as in 0002: a revision stays what it was when it shipped.
_AT_UTC = (
    "coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
    "THEN strftime('%Y-%m-%d %H:%M:%f', at) END, '')"
)
_MYSQL = {"ix_event_run_log_run_kind_step_at": ["run_id", "kind", "step_id", "at", "id"]}
_SQLITE = {"ix_event_run_log_run_kind_step_utc": ["run_id", "kind", "step_id", _AT_UTC, "id"]}


def upgrade() -> None:
    steps.add_missing_indexes("event_run_log", _SQLITE, _MYSQL, _AT_UTC)


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
