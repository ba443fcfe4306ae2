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
    steps.add_missing_indexes("event_run_log", _SQLITE, _MYSQL, _AT_UTC)


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
