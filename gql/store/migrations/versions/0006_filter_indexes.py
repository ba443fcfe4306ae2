"""The indexes runLog's phase and step filters use, on event_run_log

`(run_id, phase, at, id, kind)` and `(run_id, step_id, at, id, kind)`: a page
filtered to a phase or a step is an index range in the page's order, and the
page's kindCounts under that filter is counted from the index alone (the kind
is last, so it orders nothing). SQLite's are over `at` normalised to UTC, as
0002's are.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from gql.store.migrations import steps

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# A copy, as in 0002: a revision stays what it was when it shipped.
_AT_UTC = (
    "coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
    "THEN strftime('%Y-%m-%d %H:%M:%f', at) END, '')"
)
_MYSQL = {
    "ix_event_run_log_run_phase_at": ["run_id", "phase", "at", "id", "kind"],
    "ix_event_run_log_run_step_at": ["run_id", "step_id", "at", "id", "kind"],
}
_SQLITE = {
    "ix_event_run_log_run_phase_utc": ["run_id", "phase", _AT_UTC, "id", "kind"],
    "ix_event_run_log_run_step_utc": ["run_id", "step_id", _AT_UTC, "id", "kind"],
}


def upgrade() -> None:
    steps.add_missing_indexes("event_run_log", _SQLITE, _MYSQL, _AT_UTC)


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
