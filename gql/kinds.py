"""The closed, append-only set of kinds a run-log line can have.

A kind is a constant in code rather than an ENUM in the DDL: the set grows with
almost every phase of the events system, and an ENUM change is a table alter.
**Append only.** A kind is never renamed or removed, because a stored row would
then name a kind no reader knows; `tests/test_kinds.py` holds the frozen list.
"""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    """Each member's name is its GraphQL value, each value its wire name."""

    # Phase 1
    RUN_CREATED = "run.created"
    RUN_STATUS = "run.status"
    PHASE_ENTERED = "phase.entered"
    STEP_STATUS = "step.status"
    NOTE = "note"
    # Phase 2: each an answer to a question an operator asks out loud.
    RUN_BLOCKED = "run.blocked"
    RUN_HEALTH = "run.health"
    STEP_RETRY = "step.retry"
    STEP_PARKED = "step.parked"
    PHASE_COMPLETED = "phase.completed"
    # Phase 5
    PHASE_GATE = "phase.gate"
    CONDITION_EVALUATED = "condition.evaluated"
    PHASE_ADVANCED = "phase.advanced"
    # Phase 6
    RUN_BUDGET = "run.budget"
    STEP_REFUSED = "step.refused"
    VERSION_VERIFIED = "version.verified"
    # Phase 8: what the event left behind.
    RESOURCE_RECORDED = "resource.recorded"
    RESOURCE_ORPHANED = "resource.orphaned"
    CLEANUP_REVERTED = "cleanup.reverted"
    CLEANUP_FAILED = "cleanup.failed"
    CLEANUP_SWEPT = "cleanup.swept"
    CLEANUP_RETRY = "cleanup.retry"


BY_WIRE_NAME: dict[str, Kind] = {kind.value: kind for kind in Kind}

# The run statuses after which a run's log may be pruned.
TERMINAL_STATUSES = ("completed", "cancelled", "failed", "missed")

# What a line of each kind records, as the seed's comments say; served as the
# description of each `RunLogKind` value.
DESCRIPTIONS: dict[Kind, str] = {
    Kind.RUN_CREATED: "An occurrence was materialised.",
    Kind.RUN_STATUS: "A status transition, with from and to.",
    Kind.PHASE_ENTERED: "A phase's steps were materialised.",
    Kind.STEP_STATUS: "A step transition, with the module's answer.",
    Kind.NOTE: "A human action taken from the admin surface.",
    Kind.RUN_BLOCKED: "An occurrence held off: another run has its concurrency key.",
    Kind.RUN_HEALTH: "A health change, which is not a status change.",
    Kind.STEP_RETRY: "A step failed transiently and will be attempted again.",
    Kind.STEP_PARKED: "A step is waiting on a human and nothing is holding it.",
    Kind.PHASE_COMPLETED: "Every step of a phase reached a terminal status.",
    Kind.PHASE_GATE: "A phase opened an advance gate, with what it waits for.",
    Kind.CONDITION_EVALUATED: "A firing was tested against a gate, matched or not.",
    Kind.PHASE_ADVANCED: "A gate opened: on a firing, on its deadline, or forced.",
    Kind.RUN_BUDGET: "The caps this run was seeded with, and which switch set each.",
    Kind.STEP_REFUSED: "A step was not permitted: disabled, or over a cap.",
    Kind.VERSION_VERIFIED: "A dry run passed against a version, unlocking scheduled starts.",
    Kind.RESOURCE_RECORDED: "A step reported what it created or borrowed, and it is ledgered.",
    Kind.RESOURCE_ORPHANED: "A module reports a ledgered resource is no longer in force.",
    Kind.CLEANUP_REVERTED: "A group of resources came back.",
    Kind.CLEANUP_FAILED: "A group did not come back, with the reason and how it was left.",
    Kind.CLEANUP_SWEPT: "One pass over a run's ledger, and what it found.",
    Kind.CLEANUP_RETRY: "A human cleared the attempt counter and asked again.",
}
