"""Why a line was not stored, as a writer's program reads it: a stable code, and the sentence it is told.

`reason_of(problem)` and `told(problem)` take writes.py's sentence (the one the server logs).
"""

from __future__ import annotations

__all__ = ["reason_of", "told"]

# A refusal's code, by the start of writes.py's sentence; in lower case it is the `reason`
# label of runlog_writes_total. Codes are stable: a writer's program switches on them.
_REASONS = (
    ("the caller is not a writer", "FORBIDDEN"),
    ("kind ", "UNKNOWN_KIND"),
    ("runId ", "BAD_RUN_ID"),
    ("stepId ", "BAD_STEP_ID"),
    ("phase ", "BAD_PHASE"),
    ("idempotencyKey ", "BAD_IDEMPOTENCY_KEY"),
    ("detail is not storable", "DETAIL_NOT_JSON"),
    ("detail is ", "DETAIL_TOO_LARGE"),
    ("detail does not fit", "DETAIL_DOES_NOT_FIT"),
    ("detail could not be read back", "DETAIL_DOES_NOT_FIT"),
    ("its idempotency key", "KEY_REUSED"),
    ("outcome unknown", "OUTCOME_UNKNOWN"),
    ("unexpected failure", "UNEXPECTED"),
    ("the request was refused before it ran", "REFUSED_BEFORE_RUN"),
    ("its deadline came", "TIMED_OUT"),
    ("the line's deadline came", "TIMED_OUT"),
    ("no database connection within", "TIMED_OUT"),
    ("the database did not answer", "TIMED_OUT"),
    ("the server is shutting down", "SHUTTING_DOWN"),
)
DATABASE = "DATABASE"  # anything else: what the database (or its driver) said

# Told in place of a sentence that holds the driver's words (a host, a path) or our own
# failure: the server's log has that, under the request id.
_TOLD = {
    DATABASE: "the database could not store the line; try again shortly (the server's log has why)",
    "UNEXPECTED": "the server failed unexpectedly while storing the line (the server's log has why)",
    "OUTCOME_UNKNOWN": "the database did not answer after the line was sent, so it may have been "
    "stored; retry with an idempotencyKey (the same one, if it had one) to store it at most once",
}


def reason_of(problem: str) -> str:
    """The stable code of a refusal worded `problem`, such as `UNKNOWN_KIND`."""
    for start, reason in _REASONS:
        if problem.startswith(start):
            return reason
    return DATABASE


def told(problem: str) -> tuple[str, str]:
    """The code of a refusal worded `problem`, and the sentence its writer is told."""
    reason = reason_of(problem)
    return reason, _TOLD.get(reason, problem)
