"""One typed detail per kind, and how a stored detail is read and checked.

The Strawberry types below are the single source of truth: the pydantic models
that check a detail on write and read it back are derived from them, so a field
added here is checked, stored and served without a second definition. Each is
declared as its kind's with `@detail_of`, and the `RunLogDetail` union and the
lookups by kind are derived from those declarations (docs/development.md,
"Adding a kind").

A detail is stored as JSON whose keys are the GraphQL field names
(`blockingRunId`), so what a writer sends is what a reader selects. A field name
used by several types has the same GraphQL type in each of them (`from` is
`String` everywhere): the frontend selects every fragment in one query, and
GraphQL refuses fragments that give one name two types.

Extra keys: **refused on write, ignored on read.** A key the kind's type does
not have is almost always a typo (`blockingRunID`), and storing it would lose
the fact silently, so the write answers `false` and logs the line, the same
posture the seed takes for an unknown kind. A stored row with extra keys
(written by hand, or by a newer server) still reads as its typed detail.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired, TypeVar, Union

import pydantic
import strawberry
from graphql import Undefined
from strawberry.scalars import JSON
from strawberry.types.base import (
    StrawberryList,
    StrawberryOptional,
    get_object_definition,
)
from strawberry.types.enum import StrawberryEnumDefinition

# pydantic reads a TypedDict only from typing_extensions before Python 3.12.
from typing_extensions import TypedDict

from .ids import id_problem, parse_id
from .kinds import Kind

# ── enums used inside details ────────────────────────────────────────────────
# Stored as their GraphQL names, like every other value: what a writer sends
# is what a reader selects.


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


def _from() -> Any:
    return strawberry.field(
        name="from",
        description="The status before the change; null for the first status.",
        default=None,
    )


def _to() -> Any:
    return strawberry.field(description="The status after the change.")


def _reason() -> Any:
    return strawberry.field(description="Why, in words, where the writer said.", default=None)


def _actor() -> Any:
    return strawberry.field(
        description="Who acted, as the admin surface names them, where a human acted.",
        default=None,
    )


def _group() -> Any:
    return strawberry.field(description="The cleanup group: resources reverted together.")


def _resource_ids() -> Any:
    return strawberry.field(description="The ledger ids of the group's resources.")


def _error() -> Any:
    return strawberry.field(description="The error, as the module reported it.")


def _attempt() -> Any:
    return strawberry.field(description="Which attempt this was, counting from 1.")


def _condition() -> Any:
    return strawberry.field(
        description="What the gate waits for, as the event's author wrote it (for example `boss.spawned`)."
    )


def _firing() -> Any:
    return strawberry.field(
        description="The firing that was tested or opened the gate (for example `boss.spawned`).",
        default=None,
    )


def _deadline() -> Any:
    return strawberry.field(
        description="When the gate opens by itself if nothing matches (UTC).", default=None
    )


def _resource() -> Any:
    return strawberry.field(description="The resource's id in the run's ledger.")


def _resource_type() -> Any:
    return strawberry.field(description="What kind of thing the resource is (`npc`, `item`).")


def _external_id() -> Any:
    return strawberry.field(description="The resource's id in the world it lives in.")


# ── what a detail links to ───────────────────────────────────────────────────

# Marks a detail field that is looked up when read, never stored: the codecs
# leave it out, so a writer that sends it is refused as for any unknown key.
LOADED = "runlog.loaded"
# Marks a detail field that names a run (event_runs.id, an INT): what a reader
# selects through it (`blockingRun`) is looked up by that id, so a write is
# refused unless it is one (1..2147483647).
NAMES_A_RUN = "runlog.names_a_run"


@strawberry.type(description="A run as the events system has it now (table `event_runs`).")
class Run:
    id: strawberry.ID = strawberry.field(description="The run's id; pass it to `runLog`.")
    status: str = strawberry.field(description="The run's status now (`live`, `completed`, ...).")
    terminal: bool = strawberry.field(
        description="Whether the status is terminal (completed, cancelled, failed, missed): "
        "only a terminal run's lines can be pruned."
    )
    ended_at: datetime.datetime | None = strawberry.field(description="When the run ended (UTC), if it has.")
    updated_at: datetime.datetime | None = strawberry.field(
        description="When the run's row last changed (UTC)."
    )


# ── one type per kind ────────────────────────────────────────────────────────
#
# Each kind's detail type is declared once, with `@detail_of` above its
# `@strawberry.type`; the union, `DETAIL_TYPES` and the write path's checks are
# derived from these declarations (see the end of this section).

_T = TypeVar("_T", bound=type)
_DECLARED: dict[Kind, tuple[type, dict[str, Any]]] = {}


def detail_of(kind: Kind, *, example: dict[str, Any]) -> Callable[[_T], _T]:
    """Declare the decorated Strawberry type as `kind`'s detail.

    `example` is a detail a writer could send, in GraphQL field names: the
    demo shows it for a kind no story of its tells yet, and the tests write,
    read and record it (tests/details_examples.py).
    """

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
    # Plain data, filled in by the page's resolver with one batched lookup
    # (schema.RunLogPage.blocking_run) when the query selects it: an async
    # resolver per line would keep the page off the compiled plan
    # (fastpath.py). An exception in its place is the lookup's failure, which
    # graphql-core raises at this field alone: the line stays on its page.
    blocking_run: Run | None = strawberry.field(
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
                f"kind {kind.value!r} has no detail type: declare one in gql/details.py, as\n"
                f"    @detail_of(Kind.{kind.name}, example={{...}})\n"
                f'    @strawberry.type(description="`{kind.value}`: ...")\n'
                f"    class {named}:\n"
                '(docs/development.md, "Adding a kind")'
            )
    return {kind: _DECLARED[kind][0] for kind in Kind}


DETAIL_TYPES: dict[Kind, type] = _detail_types()
# One detail a writer could send, per kind (see `detail_of`).
EXAMPLES: dict[Kind, dict[str, Any]] = {kind: _DECLARED[kind][1] for kind in Kind}

# The type of a line's `detail`: every kind's detail type, in the kinds'
# order, then the fallback. Built from DETAIL_TYPES, so it is typed `Any`:
# mypy cannot read a union made at run time.
RunLogDetail: Any = Annotated[
    Union[(*DETAIL_TYPES.values(), UnreadableDetail)],
    strawberry.union(
        "RunLogDetail",
        description="A line's detail: the typed detail of its kind, or `UnreadableDetail` "
        "when the stored text cannot be read as that type.",
    ),
]


# ── checking and reading ─────────────────────────────────────────────────────


class DetailError(ValueError):
    """A detail that does not fit its kind's type; the message says where."""


@dataclass(frozen=True)
class _Codec:
    """How one strawberry type is checked and built from JSON."""

    # Reading: a TypedDict, extra keys ignored, read by the GraphQL names into
    # the Python ones. Not a model: pydantic builds a dict in about a third of
    # the time it builds a model instance, on every line of every page.
    reader: Any
    writer: type[pydantic.BaseModel]  # refuses extra keys
    build: Callable[[dict[str, Any]], Any]  # the reader's dict to the strawberry type
    read_json: Callable[[str | bytes], dict[str, Any]]  # pydantic-core's own, no wrapper
    # How `build` takes each stored field from the reader's dict, by Python
    # name: what the compiled plan (gql/fastpath.py) does in its place.
    stored: dict[str, StoredField]


@dataclass(frozen=True)
class StoredField:
    """One stored field of a detail type, as read: its default, if it may be left out, and its conversion."""

    default: Any  # `...` when the field is required
    convert: Callable[[Any], Any] | None  # None when pydantic's value is served as it is


def _graphql_name(field: Any) -> str:
    if field.graphql_name:
        return str(field.graphql_name)
    head, *rest = str(field.python_name).split("_")
    return head + "".join(part.title() for part in rest)


def _pydantic_type(tp: Any, forbid: bool, codecs: dict[type, _Codec]) -> tuple[Any, Callable[[Any], Any]]:
    """Map a strawberry field type to a strict pydantic type and a builder for its value."""
    if isinstance(tp, StrawberryOptional):
        inner, build = _pydantic_type(tp.of_type, forbid, codecs)
        if build is _same:
            return inner | None, _same
        return inner | None, lambda v: None if v is None else build(v)
    if isinstance(tp, StrawberryList):
        inner, build = _pydantic_type(tp.of_type, forbid, codecs)
        return list[inner], lambda v: [build(x) for x in v]  # type: ignore[valid-type]
    if tp is strawberry.ID:
        # A writer may send an id as a number or a string; GraphQL serves it as a string.
        if forbid:  # the writer's dump (`canonical_detail`) says it as it is served
            return Annotated[pydantic.StrictStr | pydantic.StrictInt, pydantic.PlainSerializer(str)], str
        return pydantic.StrictStr | pydantic.StrictInt, str
    if tp is JSON:
        return Any, _same
    if tp is str:
        return pydantic.StrictStr, _same
    if tp is bool:
        return pydantic.StrictBool, _same
    if tp is int:
        # GraphQL's Int is 32-bit signed; a larger number could be stored but not served.
        return Annotated[pydantic.StrictInt, pydantic.Field(ge=-(2**31), lt=2**31)], _same
    if tp is float:
        return float, _same
    if tp is datetime.datetime:
        if forbid:  # as for ids: the writer's dump says the time as it is served, in UTC
            return Annotated[datetime.datetime, pydantic.PlainSerializer(_as_utc_text)], _as_utc
        return datetime.datetime, _as_utc
    if isinstance(tp, StrawberryEnumDefinition):
        return tp.origin, _same  # the Python enum
    if get_object_definition(tp) is not None:
        codec = _codec(tp, codecs)
        model = codec.writer if forbid else codec.reader
        return model, codec.build
    raise TypeError(f"no JSON mapping for detail field type {tp!r}")


def _same(value: Any) -> Any:
    return value


def _as_utc(value: datetime.datetime) -> datetime.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC)


def _as_utc_text(value: datetime.datetime) -> str:
    return _as_utc(value).isoformat()


def _codec(tp: type, codecs: dict[type, _Codec]) -> _Codec:
    if tp in codecs:
        return codecs[tp]
    definition = get_object_definition(tp, strict=True)
    builders: dict[str, Callable[[Any], Any]] = {}
    defaults: dict[str, Any] = {}  # a stored field's value when the stored detail leaves it out
    readable: dict[str, Any] = {}
    writable: dict[str, Any] = {}
    for field in definition.fields:
        if field.base_resolver is not None or field.metadata.get(LOADED):
            continue  # computed or looked up, never stored
        alias = _graphql_name(field)
        default = None if isinstance(field.type, StrawberryOptional) else ...
        if field.default is not dataclasses.MISSING:
            # A field added to a detail type after lines of its kind were
            # stored reads those older lines with this default: without one
            # they would come back as UnreadableDetail (see
            # tests/test_stored_details.py).
            default = field.default
        read_type, build = _pydantic_type(field.type, False, codecs)
        builders[field.python_name] = build
        annotated: Any = Annotated[read_type, pydantic.Field(validation_alias=alias)]
        if default is ...:
            readable[field.python_name] = annotated
        else:
            if not isinstance(default, _IMMUTABLE):
                # Shared by every line read without the field.
                raise TypeError(
                    f"{definition.name}.{field.python_name}: a stored field's default must be immutable"
                )
            defaults[field.python_name] = default
            readable[field.python_name] = NotRequired[annotated]
        write_type, _ = _pydantic_type(field.type, True, codecs)
        writable[field.python_name] = (write_type, pydantic.Field(default, alias=alias))
    # A TypedDict made from a name and fields at run time (typing's functional form).
    make_typed_dict: Any = TypedDict
    reader = make_typed_dict(f"{definition.name}Read", readable)
    reader.__pydantic_config__ = pydantic.ConfigDict(extra="ignore", strict=True)
    writer = pydantic.create_model(
        f"{definition.name}Write",
        __config__=pydantic.ConfigDict(extra="forbid", strict=True, populate_by_name=False),
        **writable,
    )

    # Read on every line of every page: only the fields that need converting
    # are touched, the rest are passed on as pydantic left them.
    converters = tuple((name, fn) for name, fn in builders.items() if fn is not _same)
    every = len(builders)
    stored = {
        name: StoredField(defaults.get(name, ...), None if fn is _same else fn)
        for name, fn in builders.items()
    }

    def construct(values: dict[str, Any]) -> Any:
        if len(values) != every:
            values = {**defaults, **values}
        for name, fn in converters:
            values[name] = fn(values[name])
        return tp(**values)

    read_json = pydantic.TypeAdapter(reader).validator.validate_json
    codec = _Codec(reader=reader, writer=writer, build=construct, read_json=read_json, stored=stored)
    codecs[tp] = codec
    return codec


# What a default shared by every line read without its field may be.
_IMMUTABLE = (type(None), str, int, float, bool, enum.Enum)


_codecs: dict[type, _Codec] = {}
_BY_KIND: dict[Kind, _Codec] = {kind: _codec(tp, _codecs) for kind, tp in DETAIL_TYPES.items()}
# What reading a line needs, by stored kind name: read on every line of every page.
_READERS: dict[str, tuple[Callable[[Any], Any], Callable[[str | bytes], Any]]] = {
    kind.value: (codec.build, codec.read_json) for kind, codec in _BY_KIND.items()
}


def stored_fields(tp: type) -> dict[str, StoredField]:
    """The stored fields of detail type `tp` (or of a type a detail holds), by Python name."""
    return _codecs[tp].stored


def _describe(error: pydantic.ValidationError) -> str:
    """Say which field is wrong and how, in the detail's own (GraphQL) names."""
    parts = []
    for item in error.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "detail"
        kind = item["type"]
        if kind == "missing":
            parts.append(f"{where} is required")
        elif kind == "extra_forbidden":
            parts.append(f"{where} is not a field of this kind's detail")
        elif kind == "json_invalid":
            parts.append(f"not JSON ({item['msg'].removeprefix('Invalid JSON: ')})")
        else:
            msg = item["msg"]
            parts.append(f"{where}: {msg[:1].lower()}{msg[1:]}")
    more = error.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


# Detail fields that name a run (marked NAMES_A_RUN), by kind: only an id that
# can be one is stored.
_RUN_ID_FIELDS: dict[Kind, tuple[tuple[str, str], ...]] = {
    kind: names
    for kind, tp in DETAIL_TYPES.items()
    if (
        names := tuple(
            (field.python_name, _graphql_name(field))
            for field in get_object_definition(tp, strict=True).fields
            if field.metadata.get(NAMES_A_RUN)
        )
    )
}


def check_detail(kind: Kind, text: str) -> None:
    """Raise DetailError unless `text` is a JSON detail that fits `kind`'s type exactly.

    What is accepted must be readable: beyond the type, a run id must be one
    (1..2147483647), and the detail must come back typed through
    `read_detail`, the function every read uses (a date that is past the
    year 9999 once in UTC, say, fits the type but cannot be served).
    """
    try:
        model = _BY_KIND[kind].writer.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise DetailError(f"detail does not fit {kind.value}: {_describe(exc)}") from None
    for name, alias in _RUN_ID_FIELDS.get(kind, ()):
        value = getattr(model, name)
        if value is not None and parse_id(value) is None:
            raise DetailError(f"detail does not fit {kind.value}: {id_problem(alias, value)}")
    read = read_detail(kind.value, text)
    if isinstance(read, UnreadableDetail):
        raise DetailError(f"detail could not be read back as written: {read.problem}")


def canonical_detail(kind: Kind, text: str) -> str:
    """`text`, a detail `check_detail` accepted, as one JSON text for every way of writing it.

    Two details read the same (keys in another order, a field left out or
    sent as its default, an id as 7 or "7", a time in another offset) give
    the same text, and two that read differently give different texts: an
    idempotent retry compares lines by it, not by the JSON as sent.
    """
    model = _BY_KIND[kind].writer.model_validate_json(text)
    return json.dumps(
        model.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def read_detail(kind_name: str, text: str | bytes | None) -> Any:
    """Build the typed detail for a stored line; never raises on bad data.

    `text` may be the stored bytes (SQLite's reads, an older binary column):
    pydantic reads UTF-8 bytes as they are, and bytes that are not UTF-8 come
    back as `UnreadableDetail` saying where.
    """
    if text is None:
        return None
    read = _READERS.get(kind_name)
    if read is None:
        return _unreadable(text, f"kind {kind_name!r} is not known to this server")
    build, validate_json = read
    try:
        return build(validate_json(text))
    except pydantic.ValidationError as exc:
        return _unreadable(text, f"does not fit {kind_name}: {_describe(exc)}")
    except (ValueError, OverflowError) as exc:  # a datetime out of range, say
        return _unreadable(text, f"does not fit {kind_name}: {exc}")


def read_values(kind_name: str, text: str | bytes | None) -> dict[str, Any] | UnreadableDetail | None:
    """As `read_detail`, but a detail that fits comes back as the values pydantic read, not yet built.

    A dict by Python field name, with no default filled in and nothing
    converted (`stored_fields` says how): the compiled plan (gql/fastpath.py)
    serves it straight, without making the strawberry object. A conversion
    that fails there (a date past year 9999 once in UTC) makes the plan hand
    the page to graphql-core, whose lines are read by `read_detail`.
    """
    if text is None:
        return None
    read = _READERS.get(kind_name)
    if read is None:
        return _unreadable(text, f"kind {kind_name!r} is not known to this server")
    try:
        values: dict[str, Any] = read[1](text)
    except pydantic.ValidationError as exc:
        return _unreadable(text, f"does not fit {kind_name}: {_describe(exc)}")
    except (ValueError, OverflowError) as exc:
        return _unreadable(text, f"does not fit {kind_name}: {exc}")
    return values


def _unreadable(stored: str | bytes, problem: str) -> UnreadableDetail:
    if isinstance(stored, str):
        return UnreadableDetail(text=stored, problem=problem)
    try:
        return UnreadableDetail(text=stored.decode(), problem=problem)
    except UnicodeDecodeError as exc:
        return UnreadableDetail(
            # U+FFFD in place of each byte that is not UTF-8, so the rest still reads.
            text=stored.decode(errors="replace"),
            problem=f"is not UTF-8 text: byte {exc.start} is 0x{stored[exc.start]:02x}",
        )


def dump_detail(detail: Any) -> str:
    """The JSON text a detail is stored as; ValueError if it cannot be JSON."""
    try:
        return _DETAIL_ENCODER.encode(detail)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        # A detail nested about a thousand deep: the request's JSON parser,
        # higher on the stack, read it; the encoder, deeper, cannot.
        raise ValueError("it nests too deeply to be written as JSON") from None


def _undefined(value: Any) -> None:
    # A JSON literal naming a variable the request left out (`{actor: $actor}`)
    # reaches us as graphql-core's Undefined: the caller gave no value, so null.
    if value is Undefined:
        return None
    raise TypeError(f"{type(value).__name__} is not JSON")


# What json.dumps(detail, ensure_ascii=False, separators=(",", ":"),
# allow_nan=False, default=_undefined) would build on every call.
_DETAIL_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_undefined
)
