"""The closed, append-only set of kinds a run-log line can have: `Kind`, and `BY_WIRE_NAME`.

Append only: a stored row must never name a kind no reader knows. docs/development.md, "Adding a kind".
"""

from __future__ import annotations

import enum

# The seed's reasons, one per phase that added kinds.
_PHASE_1 = (
    "Phase 1, a run's own history: \"why didn't phase 3 start?\" must be a query, "
    "and activity_log's TEXT detail cannot answer it; the audit of who published "
    "what stays there, the diagnosis comes here."
)
_PHASE_2 = "Phase 2: an answer to a question an operator asks out loud."
_PHASE_5 = (
    "Phase 5, conditions: a phase that waits at a gate for something in the world, "
    'so "why didn\'t phase 3 start?" must say what it waits for and what came instead.'
)
_PHASE_6 = (
    "Phase 6, cap draws: what the deployment permits a run, so that a run that "
    "stopped can be read as refused rather than broken."
)
_PHASE_8 = 'Phase 8, ledger movements: an answer to "what did this event leave behind".'


class Kind(enum.Enum):
    """A kind: its member name is its GraphQL value, its value its wire name."""

    _value_: str
    records: str  # what a line of it records; served as the `RunLogKind` value's description
    why: str  # the seed's reason for the kind: what would be lost without it

    def __new__(cls, wire_name: str, records: str, why: str) -> Kind:
        member = object.__new__(cls)
        member._value_ = wire_name
        member.records = records
        member.why = why
        return member

    RUN_CREATED = ("run.created", "An occurrence was materialised.", _PHASE_1)
    RUN_STATUS = ("run.status", "A status transition, with from and to.", _PHASE_1)
    PHASE_ENTERED = ("phase.entered", "A phase's steps were materialised.", _PHASE_1)
    STEP_STATUS = ("step.status", "A step transition, with the module's answer.", _PHASE_1)
    NOTE = ("note", "A human action taken from the admin surface.", _PHASE_1)
    RUN_BLOCKED = (
        "run.blocked",
        "An occurrence held off: another run has its concurrency key.",
        _PHASE_2 + " It is the whole reason this table exists rather than a server log "
        'line: "it did not start because run 37 holds invasion:Yew" is a fact with two '
        "run ids in it, and it has to be queryable from the run that did NOT start.",
    )
    RUN_HEALTH = ("run.health", "A health change, which is not a status change.", _PHASE_2)
    STEP_RETRY = ("step.retry", "A step failed transiently and will be attempted again.", _PHASE_2)
    STEP_PARKED = ("step.parked", "A step is waiting on a human and nothing is holding it.", _PHASE_2)
    PHASE_COMPLETED = ("phase.completed", "Every step of a phase reached a terminal status.", _PHASE_2)
    PHASE_GATE = ("phase.gate", "A phase opened an advance gate, with what it waits for.", _PHASE_5)
    CONDITION_EVALUATED = (
        "condition.evaluated",
        "A firing was tested against a gate, matched or not.",
        _PHASE_5 + " Written for BOTH outcomes, and the non-matching one is the more "
        'valuable on the night: "the boss did spawn, in Britain" and "no boss has '
        'spawned" are different answers to the same question and look identical without it.',
    )
    PHASE_ADVANCED = (
        "phase.advanced",
        "A gate opened: on a firing, on its deadline, or forced.",
        _PHASE_5,
    )
    RUN_BUDGET = (
        "run.budget",
        "The caps this run was seeded with, and which switch set each.",
        _PHASE_6,
    )
    STEP_REFUSED = (
        "step.refused",
        "A step was not permitted: disabled, or over a cap.",
        _PHASE_6 + " Named apart from step.status because a refusal is not a failure: an "
        "operator reading a run that stopped needs to see at a glance that nothing is "
        "broken, the deployment simply does not permit what the author asked for.",
    )
    VERSION_VERIFIED = (
        "version.verified",
        "A dry run passed against a version, unlocking scheduled starts.",
        _PHASE_6,
    )
    RESOURCE_RECORDED = (
        "resource.recorded",
        "A step reported what it created or borrowed, and it is ledgered.",
        _PHASE_8 + " Written at the step's ANSWER rather than at the placeholder, because "
        "a placeholder is a promise and the operator's question is about the world.",
    )
    RESOURCE_ORPHANED = (
        "resource.orphaned",
        "A module reports a ledgered resource is no longer in force.",
        _PHASE_8,
    )
    CLEANUP_REVERTED = ("cleanup.reverted", "A group of resources came back.", _PHASE_8)
    CLEANUP_FAILED = (
        "cleanup.failed",
        "A group did not come back, with the reason and how it was left.",
        _PHASE_8,
    )
    CLEANUP_SWEPT = ("cleanup.swept", "One pass over a run's ledger, and what it found.", _PHASE_8)
    CLEANUP_RETRY = ("cleanup.retry", "A human cleared the attempt counter and asked again.", _PHASE_8)
    # A new kind goes here, after the last one (docs/development.md, "Adding a kind").


def _check_declarations() -> None:
    """Refuse a kind declared without what every kind has; the message says what to write."""
    for kind in Kind:
        spelled = kind.value.replace(".", "_").upper()
        if kind.name != spelled:
            raise TypeError(f"kind {kind.value!r} must be declared as {spelled}, its wire name in upper case")
        if not kind.records.strip():
            raise TypeError(f"kind {kind.value!r} is declared without what a line of it records")
        if not kind.why.strip():
            raise TypeError(
                f"kind {kind.value!r} is declared without a reason: say why the events system "
                "writes it, as the seed's comments do for each kind"
            )


_check_declarations()

BY_WIRE_NAME: dict[str, Kind] = {kind.value: kind for kind in Kind}

# The run statuses after which a run's log may be pruned.
TERMINAL_STATUSES = ("completed", "cancelled", "failed", "missed")
