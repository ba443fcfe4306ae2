"""One typed detail per kind, declared with `@detail_of(Kind.X, example=...)` above its `@strawberry.type`.

The types are the one source: gql/domain/detail_codec.py derives the checks and reads from them. Stored
as JSON keyed by GraphQL field names; one field name has one GraphQL type in every detail.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, Union

import strawberry
from strawberry.scalars import JSON
from strawberry.types import get_object_definition

from ..kinds import Kind

# ── enums used inside details (stored as their GraphQL names) ───────────────


@strawberry.enum(description="How a phase's advance gate opened.")
class GateOpening(enum.Enum):
    FIRING = strawberry.enum_value("FIRING", description="A firing matched the gate's condition.")
    DEADLINE = strawberry.enum_value(
        "DEADLINE", description="The gate's deadline passed with no matching firing."
    )
    FORCED = strawberry.enum_value("FORCED", description="A human forced the gate open.")


@strawberry.enum(description="Why a step was not permitted to run.")
class Refusal(enum.Enum):
    DISABLED = strawberry.enum_value("DISABLED", description="A switch disables what the step would do.")
    OVER_CAP = strawberry.enum_value(
        "OVER_CAP", description="Running the step would exceed one of the run's caps."
    )


@strawberry.enum(description="Whether a step created a resource or borrowed an existing one.")
class Ownership(enum.Enum):
    CREATED = strawberry.enum_value("CREATED", description="The step created it; cleanup removes it.")
    BORROWED = strawberry.enum_value(
        "BORROWED", description="It existed before; cleanup gives it back as it was."
    )


# ── field shapes shared by several details (one name, one type) ─────────────


def _shared(description: str, **options: Any) -> Callable[[], Any]:
    """A field several details have: called in each, it makes that detail's field."""
    return lambda: strawberry.field(description=description, **options)


_from = _shared("The status before the change; null for the first status.", name="from", default=None)
_to = _shared("The status after the change.")
_reason = _shared("Why, in words, where the writer said.", default=None)
_actor = _shared("Who acted, as the admin surface names them, where a human acted.", default=None)
_group = _shared("The cleanup group: resources reverted together.")
_resource_ids = _shared("The ledger ids of the group's resources.")
_error = _shared("The error, as the module reported it.")
_attempt = _shared("Which attempt this was, counting from 1.")
_condition = _shared("What the gate waits for, as the event's author wrote it (for example `boss.spawned`).")
_firing = _shared("The firing that was tested or opened the gate (for example `boss.spawned`).", default=None)
_deadline = _shared("When the gate opens by itself if nothing matches (UTC).", default=None)
_resource = _shared("The resource's id in the run's ledger.")
_resource_type = _shared("What kind of thing the resource is (`npc`, `item`).")
_external_id = _shared("The resource's id in the world it lives in.")


# ── what a detail links to ───────────────────────────────────────────────────

# Marks a detail field looked up when read, never stored (a writer sending it is refused).
LOADED = "runlog.loaded"
# Marks a detail field that names a run (event_runs.id): a write must give 1..2147483647.
NAMES_A_RUN = "runlog.names_a_run"


# ── one type per kind ────────────────────────────────────────────────────────

_T = TypeVar("_T", bound=type)
_DECLARED: dict[Kind, tuple[type, dict[str, Any]]] = {}


def detail_of(kind: Kind, *, example: dict[str, Any]) -> Callable[[_T], _T]:
    """Declare the decorated Strawberry type as `kind`'s detail; `example` is one a writer could send."""

    def declare(cls: _T) -> _T:
        named = _detail_type_name(kind)
        if cls.__name__ != named:
            raise TypeError(f"{kind.value}'s detail type must be named {named} (the contract's rule)")
        if kind in _DECLARED:
            raise TypeError(f"{kind.value} has two detail types: {_DECLARED[kind][0].__name__} and {named}")
        if get_object_definition(cls) is None:
            raise TypeError(f"put @detail_of(Kind.{kind.name}, ...) above {named}'s @strawberry.type")
        _DECLARED[kind] = (cls, example)
        return cls

    return declare


def _detail_type_name(kind: Kind) -> str:
    """`run.status` is `RunStatusDetail`: Pascal case plus `Detail`, as the contract says."""
    return "".join(part.title() for part in kind.value.split(".")) + "Detail"


@detail_of(
    Kind.RUN_CREATED, example={"eventId": 12, "eventVersion": "3", "scheduledFor": "2026-06-01T18:00:00Z"}
)
@strawberry.type(description="`run.created`: an occurrence of an event was materialised.")
class RunCreatedDetail:
    event_id: strawberry.ID = strawberry.field(description="The event this run is an occurrence of.")
    scheduled_for: datetime.datetime | None = strawberry.field(
        description="When the occurrence is due to start (UTC).", default=None
    )
    event_version: str | None = strawberry.field(
        description="The version of the event the run was materialised from.", default=None
    )


@detail_of(Kind.RUN_STATUS, example={"from": "scheduled", "to": "live"})
@strawberry.type(description="`run.status`: the run moved from one status to another.")
class RunStatusDetail:
    from_: str | None = _from()
    to: str = _to()
    reason: str | None = _reason()


@detail_of(Kind.PHASE_ENTERED, example={"stepIds": [101, 102]})
@strawberry.type(description="`phase.entered`: a phase's steps were materialised.")
class PhaseEnteredDetail:
    step_ids: list[strawberry.ID] = strawberry.field(
        description="The steps the phase materialised, in order."
    )


@detail_of(
    Kind.STEP_STATUS, example={"from": "pending", "to": "done", "module": "spawn", "answer": {"ok": True}}
)
@strawberry.type(description="`step.status`: a step moved, with the module's answer.")
class StepStatusDetail:
    from_: str | None = _from()
    to: str = _to()
    module: str | None = strawberry.field(description="The module that ran the step.", default=None)
    answer: JSON | None = strawberry.field(
        description="What the module answered, as it answered it.", default=None
    )


@detail_of(Kind.NOTE, example={"text": "paused for the server restart", "actor": "gm.alice"})
@strawberry.type(description="`note`: a human action taken from the admin surface.")
class NoteDetail:
    text: str = strawberry.field(description="What the human wrote or did.")
    actor: str | None = _actor()


@detail_of(Kind.RUN_BLOCKED, example={"blockingRunId": 37, "concurrencyKey": "invasion:Yew"})
@strawberry.type(
    description="`run.blocked`: the run was held off because another run holds its "
    "concurrency key. Read it as: it did not start because run `blockingRunId` holds "
    "`concurrencyKey`."
)
class RunBlockedDetail:
    blocking_run_id: strawberry.ID = strawberry.field(
        description="The run that holds the key; pass it to `runLog` to read why that run "
        "is still live, or select `blockingRun`.",
        metadata={NAMES_A_RUN: True},
    )
    concurrency_key: str = strawberry.field(description="The key both runs need (`invasion:Yew`).")
    # Plain data, set by the page's one batched lookup (a resolver would keep the page off
    # the compiled plan); an exception in its place is raised at this field alone.
    # `Run` is gql/api/runs.py, which imports the modules that import this one: named lazily.
    blocking_run: Annotated["Run", strawberry.lazy("gql.api.runs")] | None = strawberry.field(  # type: ignore[name-defined]  # noqa: F821, UP037
        default=None,
        description="The run that holds the key, as it is now; null if the events system "
        "no longer has it. Loaded once per request for all lines that name it.",
        metadata={LOADED: True},
    )


@detail_of(Kind.RUN_HEALTH, example={"from": "ok", "to": "degraded", "reason": "module timeouts"})
@strawberry.type(description="`run.health`: the run's health changed (not its status).")
class RunHealthDetail:
    from_: str | None = _from()
    to: str = _to()
    reason: str | None = _reason()


@detail_of(Kind.STEP_RETRY, example={"attempt": 2, "maxAttempts": 5, "error": "timeout", "retryAt": None})
@strawberry.type(description="`step.retry`: a step failed transiently and will be attempted again.")
class StepRetryDetail:
    attempt: int = _attempt()
    max_attempts: int | None = strawberry.field(
        description="How many attempts the step gets in all.", default=None
    )
    error: str = _error()
    retry_at: datetime.datetime | None = strawberry.field(
        description="When the next attempt is due (UTC).", default=None
    )


@detail_of(Kind.STEP_PARKED, example={"waitingFor": "a GM to confirm the reward"})
@strawberry.type(description="`step.parked`: a step waits on a human, and nothing is holding it.")
class StepParkedDetail:
    waiting_for: str = strawberry.field(description="What the step needs a human to do.")
    reason: str | None = _reason()


@strawberry.type(description="How many of a phase's steps ended in one status.")
class StatusCount:
    status: str = strawberry.field(description="A terminal step status.")
    count: int = strawberry.field(description="How many steps ended in it.")


@detail_of(Kind.PHASE_COMPLETED, example={"stepCount": 3, "byStatus": [{"status": "done", "count": 3}]})
@strawberry.type(description="`phase.completed`: every step of a phase reached a terminal status.")
class PhaseCompletedDetail:
    step_count: int = strawberry.field(description="How many steps the phase had.")
    by_status: list[StatusCount] = strawberry.field(
        description="How many steps ended in each terminal status."
    )


@detail_of(
    Kind.PHASE_GATE,
    example={
        "condition": "boss.spawned",
        "parameters": {"region": "Yew"},
        "deadline": "2026-06-01T19:00:00Z",
    },
)
@strawberry.type(description="`phase.gate`: a phase opened an advance gate, and what it waits for.")
class PhaseGateDetail:
    condition: str = _condition()
    parameters: JSON | None = strawberry.field(
        description="The condition's parameters (for example the region the boss must spawn in).",
        default=None,
    )
    deadline: datetime.datetime | None = _deadline()


@detail_of(
    Kind.CONDITION_EVALUATED,
    example={
        "matched": False,
        "condition": "boss.spawned",
        "firing": "boss.spawned",
        "facts": {"region": "Britain"},
        "mismatch": "spawned in Britain, the gate waits for Yew",
    },
)
@strawberry.type(
    description="`condition.evaluated`: a firing was tested against a gate. Written for both "
    "outcomes: a firing that did not match says what was different."
)
class ConditionEvaluatedDetail:
    matched: bool = strawberry.field(description="Whether the firing satisfied the condition.")
    condition: str = _condition()
    firing: str | None = _firing()
    facts: JSON | None = strawberry.field(
        description="What the firing carried (for example where the boss spawned).", default=None
    )
    mismatch: str | None = strawberry.field(
        description="For a firing that did not match: what was different "
        "(`spawned in Britain, gate waits for Yew`).",
        default=None,
    )


@detail_of(Kind.PHASE_ADVANCED, example={"via": "FIRING", "firing": "boss.spawned"})
@strawberry.type(description="`phase.advanced`: a gate opened, on a firing, on its deadline, or forced.")
class PhaseAdvancedDetail:
    via: GateOpening = strawberry.field(description="How the gate opened.")
    firing: str | None = _firing()
    deadline: datetime.datetime | None = _deadline()
    actor: str | None = _actor()


@strawberry.type(description="One cap a run was seeded with, and the switch that set it.")
class BudgetCap:
    cap: str = strawberry.field(description="What the cap limits (`spawns`, `rewards`).")
    limit: int = strawberry.field(description="The most the run may use.")
    switch: str | None = strawberry.field(
        description="The switch that set this cap; null where the default applies.", default=None
    )


@detail_of(
    Kind.RUN_BUDGET, example={"caps": [{"cap": "spawns", "limit": 40, "switch": "events.spawns.small"}]}
)
@strawberry.type(description="`run.budget`: the caps this run was seeded with, and which switch set each.")
class RunBudgetDetail:
    caps: list[BudgetCap] = strawberry.field(description="Each cap, with the switch that set it.")


@detail_of(Kind.STEP_REFUSED, example={"refusal": "OVER_CAP", "cap": "spawns", "limit": 40, "used": 40})
@strawberry.type(
    description="`step.refused`: a step was not permitted. A refusal is not a failure: "
    "the deployment does not permit what the author asked for."
)
class StepRefusedDetail:
    refusal: Refusal = strawberry.field(description="Disabled, or over a cap.")
    switch: str | None = strawberry.field(
        description="The switch that disabled it, or that set the cap.", default=None
    )
    cap: str | None = strawberry.field(description="The cap it would exceed, when over a cap.", default=None)
    limit: int | None = strawberry.field(description="The cap's limit.", default=None)
    used: int | None = strawberry.field(description="How much of the cap was already used.", default=None)


@detail_of(Kind.VERSION_VERIFIED, example={"version": "3", "dryRunId": 77})
@strawberry.type(
    description="`version.verified`: a dry run passed against a version, unlocking scheduled starts."
)
class VersionVerifiedDetail:
    version: str = strawberry.field(description="The event version that was verified.")
    dry_run_id: strawberry.ID | None = strawberry.field(
        description="The dry run that passed.", default=None, metadata={NAMES_A_RUN: True}
    )


@detail_of(
    Kind.RESOURCE_RECORDED,
    example={
        "resourceId": 5,
        "resourceType": "npc",
        "externalId": "0x4001",
        "ownership": "CREATED",
    },
)
@strawberry.type(
    description="`resource.recorded`: a step reported what it created or borrowed, and it is ledgered."
)
class ResourceRecordedDetail:
    resource_id: strawberry.ID = _resource()
    resource_type: str = _resource_type()
    external_id: str = _external_id()
    ownership: Ownership = strawberry.field(description="Created by the step, or borrowed.")


@detail_of(Kind.RESOURCE_ORPHANED, example={"resourceId": 5, "resourceType": "npc", "externalId": "0x4001"})
@strawberry.type(
    description="`resource.orphaned`: a module reports a ledgered resource is no longer in force."
)
class ResourceOrphanedDetail:
    resource_id: strawberry.ID = _resource()
    resource_type: str = _resource_type()
    external_id: str = _external_id()
    reason: str | None = _reason()


@detail_of(Kind.CLEANUP_REVERTED, example={"group": "spawns", "resourceIds": [5, 6]})
@strawberry.type(description="`cleanup.reverted`: a group of resources came back.")
class CleanupRevertedDetail:
    group: str = _group()
    resource_ids: list[strawberry.ID] = _resource_ids()


@detail_of(
    Kind.CLEANUP_FAILED,
    example={
        "group": "decorations",
        "resourceIds": [7],
        "error": "item is in a player's backpack",
        "leftAs": "untouched",
        "attempt": 1,
    },
)
@strawberry.type(description="`cleanup.failed`: a group did not come back, why, and how it was left.")
class CleanupFailedDetail:
    group: str = _group()
    resource_ids: list[strawberry.ID] = _resource_ids()
    error: str = _error()
    left_as: str = strawberry.field(description="How the group was left (`untouched`, `partially reverted`).")
    attempt: int = _attempt()


@detail_of(
    Kind.CLEANUP_SWEPT, example={"checked": 3, "reverted": 2, "failed": 1, "orphaned": 0, "remaining": 1}
)
@strawberry.type(description="`cleanup.swept`: one pass over a run's ledger, and what it found.")
class CleanupSweptDetail:
    checked: int = strawberry.field(description="Resources looked at.")
    reverted: int = strawberry.field(description="Resources that came back in this pass.")
    failed: int = strawberry.field(description="Resources that did not.")
    orphaned: int = strawberry.field(description="Resources no longer in force.")
    remaining: int = strawberry.field(description="Resources still ledgered after the pass.")


@detail_of(Kind.CLEANUP_RETRY, example={"group": "decorations", "previousAttempts": 3, "actor": "gm.bob"})
@strawberry.type(description="`cleanup.retry`: a human cleared a group's attempt counter and asked again.")
class CleanupRetryDetail:
    group: str = _group()
    previous_attempts: int = strawberry.field(description="The attempt count that was cleared.")
    actor: str | None = _actor()


# A new kind's detail type goes here, after the last one (docs/development.md,
# "Adding a kind").


@strawberry.type(
    description="A stored detail that could not be read as its kind's type: not JSON, not "
    "the shape its kind has, or written under a kind this server does not know. "
    "It is served, never turned into an error: one bad line must not break a page."
)
class UnreadableDetail:
    text: str = strawberry.field(
        description="The stored detail, exactly as stored (bytes that are not UTF-8 read as U+FFFD)."
    )
    problem: str = strawberry.field(description="What was wrong with it.")


def _detail_types() -> dict[Kind, type]:
    """Each kind's detail type, in the kinds' order; a kind without one stops the import."""
    for kind in Kind:
        if kind not in _DECLARED:
            named = _detail_type_name(kind)
            raise TypeError(
                f"kind {kind.value!r} has no detail type: declare one in gql/domain/details.py, as\n"
                f"    @detail_of(Kind.{kind.name}, example={{...}})\n"
                f'    @strawberry.type(description="`{kind.value}`: ...")\n'
                f"    class {named}:\n"
                '(docs/development.md, "Adding a kind")'
            )
    return {kind: _DECLARED[kind][0] for kind in Kind}


DETAIL_TYPES: dict[Kind, type] = _detail_types()
# One detail a writer could send, per kind (see `detail_of`).
EXAMPLES: dict[Kind, dict[str, Any]] = {kind: _DECLARED[kind][1] for kind in Kind}

# Every kind's detail type in the kinds' order, then the fallback (`Any`: made at run time).
RunLogDetail: Any = Annotated[
    Union[(*DETAIL_TYPES.values(), UnreadableDetail)],
    strawberry.union(
        "RunLogDetail",
        description="A line's detail: the typed detail of its kind, or `UnreadableDetail` "
        "when the stored text cannot be read as that type.",
    ),
]
