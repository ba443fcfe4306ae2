"""The GraphQL schema: `Query.runLog`, `Mutation.writeRunLog`, `Mutation.pruneTerminal`.

Per-line fields are plain attributes, filled in by the one async root resolver
that reads the page: an async resolver per line would double the cost of a
2,000-line page.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import functools
import json
import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NamedTuple

import strawberry
from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    ValueNode,
    VariableNode,
    parse,
    value_from_ast_untyped,
)
from sqlalchemy.ext.asyncio import AsyncEngine
from strawberry.extensions import SchemaExtension
from strawberry.scalars import JSON
from strawberry.types import get_object_definition

from . import metrics, retention, store, subscriptions, tail, writes
from .auth import Action, Caller, Policy
from .compat.strawberry import graphql_schema, resolve_info
from .details import (
    DETAIL_TYPES,
    Run,
    RunBlockedDetail,
    RunLogDetail,
    read_detail,
    read_values,
)
from .fastpath import PageExecutor
from .ids import id_problem, parse_id
from .kinds import TERMINAL_STATUSES, Kind
from .limits import WARMING, DetailBudget, detail_servings
from .replica import Replica
from .request_id import note
from .settings import Settings

log = logging.getLogger("gql.runlog")

# Built from `Kind`, so the set is defined once (mypy cannot type the
# functional Enum API, hence `Any`).
RunLogKind: Any = strawberry.enum(  # type: ignore[call-overload]
    enum.Enum(
        "RunLogKind",
        {kind.name: strawberry.enum_value(kind.value, description=kind.records) for kind in Kind},
    ),
    description="What a line records. Append-only: a kind is never renamed or removed. "
    "The wire name a writer sends to `writeRunLog` is the lower-case dotted form "
    "(`RUN_STATUS` is `run.status`).",
)
_ENUM_BY_WIRE_NAME: dict[str, Any] = {member.value: member for member in RunLogKind}

MAX_WAIT_SECONDS = 30  # runLog's `wait`: under the usual 60 s idle timeout of proxies


# ── context ──────────────────────────────────────────────────────────────────


class ClientError(GraphQLError):
    """An error the caller can act on; its message is shown as it is, never masked."""

    def __init__(self, message: str, code: str, **extensions: Any) -> None:
        super().__init__(message, extensions={"code": code, **extensions})


@dataclass
class Context:
    engine: AsyncEngine
    settings: Settings
    writer: writes.Writer  # the app's: its write queue and what it knows of the detail column
    policy: Policy
    caller: Caller
    request_id: str
    # The websocket, on one; None over HTTP, where nothing reads the request
    # once its body is parsed, and a context held by a reference cycle
    # (graphql-core's executor is one) would keep its body until collected.
    request: Any = None
    # The server's `receive` once the body is read: a long poll waits on it
    # to see its client leave.
    receive: Callable[[], Awaitable[Any]] | None = None
    sweeper: retention.Sweeper | None = None  # None when retention is off
    arrived: float | None = None  # the event loop's time when the request (or operation) came
    detail_budget: DetailBudget | None = None  # made by the first page that reads details
    watcher: tail.Watcher | None = None  # the app's; None outside it (no long poll, no tail)
    # On a websocket, one context serves the connection's every operation:
    # the caller is read again from `connection_init`, and the connection's
    # subscriptions are counted against the caps the process's `tails` keeps.
    tails: subscriptions.Tails | None = None
    connection: subscriptions.Connection | None = None
    connection_params: dict[str, Any] | None = None
    replica: Replica | None = None  # the read replica, when RUNLOG_READ_DATABASE_URL is set

    def for_operation(self) -> Context:
        """A context for one operation sent over this websocket: its own arrival and page budget."""
        return dataclasses.replace(self, arrived=asyncio.get_running_loop().time(), detail_budget=None)

    def details_left(self) -> DetailBudget:
        """The request's detail budget, shared by all its pages."""
        if self.detail_budget is None:
            self.detail_budget = DetailBudget(self.settings.max_page_bytes)
        return self.detail_budget

    def require(self, action: Action, what: str) -> None:
        """Raise a refusal that says who the caller would have to be."""
        if self.policy.allows(self.caller, action):
            return
        who = _ROLE_WORDS[action]
        if not self.caller.authenticated:
            # A browser cannot set a websocket's headers: there, the token
            # goes in the connection_init payload.
            where = ' in the connection_init payload: {"Authorization": "Bearer <token>"}'
            raise ClientError(
                f"{what} is refused: the caller is not {who} "
                f"(send `Authorization: Bearer <token>` with {who}'s token"
                f"{where if self.connection is not None else ''})",
                "UNAUTHENTICATED",
            )
        raise ClientError(f"{what} is refused: the caller is not {who}", "FORBIDDEN")


_ROLE_WORDS = {
    Action.READ: "a reader",
    Action.WRITE: "a writer",
    Action.ADMINISTER: "an admin",
}


class Asked(NamedTuple):
    """What a runLog field selects on its lines, beyond their columns."""

    detail: bool  # else the page's details are neither fetched nor read
    blocking_run: bool  # else no run is looked up
    cursor: bool = False  # a line's `cursor`: every line's is made
    ends: bool = False  # `startCursor` or `endCursor`: only the page's ends' are made
    run: bool = False  # the page's `run`
    pruned: bool = False  # the page's `pruned`


# What a runLog field selects, by its nodes: the answer does not depend on
# variables (@skip is not looked at), and the document caches hand back one
# document per query text, so the nodes are the same objects each time.
# Strawberry's `info.selected_fields` converted the whole selection, every
# fragment, on each call. An entry holds its nodes weakly: a node's location
# links every token of its text, so holding 128 of them held 128 documents
# (140 MiB for texts of 2,000 tokens, past every cache's bound in bytes).
_ASKED: OrderedDict[tuple[int, ...], tuple[tuple[weakref.ref[FieldNode], ...], Asked]] = OrderedDict()
_ASKED_SIZE = 128  # fields remembered


def asked_of(nodes: Sequence[FieldNode], fragments: Mapping[str, FragmentDefinitionNode]) -> Asked:
    """What the runLog field of `nodes` (one response key's) selects on its page, @skip or not."""
    key = tuple(map(id, nodes))
    found = _ASKED.get(key)
    if found is not None and all(ref() is node for ref, node in zip(found[0], nodes, strict=True)):
        return found[1]
    names: set[str] = set()
    pending = [node.selection_set for node in nodes if node.selection_set is not None]
    spread: set[str] = set()
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, FieldNode):
                names.add(selection.name.value)
                if selection.selection_set is not None:
                    pending.append(selection.selection_set)
            elif isinstance(selection, InlineFragmentNode):
                pending.append(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode) and selection.name.value not in spread:
                spread.add(selection.name.value)
                fragment = fragments.get(selection.name.value)
                if fragment is not None:
                    pending.append(fragment.selection_set)
    # Only a line has a `detail`, and only a detail a `blockingRun`.
    asked = Asked(
        detail="detail" in names,
        blocking_run="blockingRun" in names,
        cursor="cursor" in names,
        ends="startCursor" in names or "endCursor" in names,
        run="run" in names,
        pruned="pruned" in names,
    )
    _ASKED[key] = (tuple(weakref.ref(node) for node in nodes), asked)  # while they live, their ids are theirs
    while len(_ASKED) > _ASKED_SIZE:
        _ASKED.popitem(last=False)
    return asked


def _one_connection(resolver: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`resolver` with its reads of the primary taking one pooled connection (store.one_connection).

    Not with `wait`: the long poll would hold it from the pool while it waits.
    Nor while WARMING: start-up's pass reads nothing.
    """

    @functools.wraps(resolver)
    async def resolve(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("wait") or kwargs["info"].context is WARMING:
            return await resolver(*args, **kwargs)
        async with store.one_connection(kwargs["info"].context.engine):
            return await resolver(*args, **kwargs)

    return resolve


async def _find_runs(
    context: Context, lines: list[store.Line], deadline: float, page_run: int | None
) -> tuple[dict[int, store.Run] | Exception, Run | Exception | None]:
    """The runs the page's blocked lines name, and the page's own run, in one query, by `deadline`.

    The runs are plain data on the page, so it is completed by the compiled
    plan like any other (`RunLogPage.blocking_run`). A failed lookup is put
    in their place instead: graphql-core raises it at each `blockingRun` (and
    at the page's `run`), and the lines stay on the page with that field null.
    """
    blocked = Kind.RUN_BLOCKED.value
    wanted: list[int] = []
    for line in lines:
        if line.kind == blocked and line.detail is not None:
            values = read_values(blocked, line.detail)
            if type(values) is dict:
                number = parse_id(values["blocking_run_id"])
                if number is not None:
                    wanted.append(number)
    if page_run is not None:
        wanted.append(page_run)
    if not wanted:
        return {}, None
    found: dict[int, store.Run] | Exception
    try:
        async with asyncio.timeout_at(deadline):
            found = await store.find_runs(context.engine, wanted)
    except Exception as exc:  # raised at each `blockingRun` (and the page's `run`), not swallowed
        found = _unavailable(context, "run lookup", exc) if store.is_unavailable(exc) else exc
    if page_run is None:
        return found, None
    if isinstance(found, Exception):
        return found, found
    row = found.get(page_run)
    return found, None if row is None else _run(row)


def _run(row: store.Run) -> Run:
    return Run(
        id=strawberry.ID(str(row.id)),
        status=row.status,
        terminal=row.status in TERMINAL_STATUSES,
        ended_at=row.ended_at,
        updated_at=row.updated_at,
    )


# ── types ────────────────────────────────────────────────────────────────────


def _read(expression: str, **names: Any) -> dict[str, Any]:
    """A `RunLogLine` field's one description of how it is read from a stored line.

    `expression` reads the field from the stored line `r` (a `store.Line`)
    and its cursor `c`, using `names`. It is the only place a field says so:
    `_line` (the line as a `RunLogLine`, for graphql-core, the tail and the
    rest) and the compiled page plan (gql/fastpath.py, which serves the line
    straight from the row) are both made from it, so they cannot disagree.
    A field without one (`detail`) is read its own way.
    """
    return {READ: (expression, names)}


READ = "runlog.read"  # the key of a field's `_read` in its metadata


@strawberry.type(description="One line of a run's log.")
class RunLogLine:
    id: strawberry.ID = strawberry.field(
        description=(
            "The line's id: unique, and the tie-break after `at` in a page's order. Ids are not in "
            "time order: a line whose commit was slow has a smaller id than lines written after it, "
            "and a Galera cluster hands ids out interleaved by node. Order by `at`, then `id`."
        ),
        metadata=_read("str(r.id)"),
    )
    run_id: strawberry.ID = strawberry.field(
        description="The run the line is about.", metadata=_read("str(r.run_id)")
    )
    step_id: strawberry.ID | None = strawberry.field(
        description="The step the line is about, if it is about one.",
        metadata=_read("None if r.step_id is None else str(r.step_id)"),
    )
    kind: RunLogKind | None = strawberry.field(
        description="What the line records; null only for a kind this server does not know "
        "(written by a newer writer): `kindName` still names it.",
        metadata=_read("_KIND_OF.get(r.kind)", _KIND_OF=_ENUM_BY_WIRE_NAME),
    )
    kind_name: str = strawberry.field(
        description="The kind's wire name as stored (`run.status`), known to this server or not.",
        metadata=_read("r.kind"),
    )
    phase: int | None = strawberry.field(
        description="The phase the line is about, if any.", metadata=_read("r.phase")
    )
    at: datetime.datetime = strawberry.field(
        description="When the line was written, UTC, to the millisecond. On a line whose "
        "stored `at` is not a time (see `problem`), 0001-01-01T00:00:00Z; such a line keeps "
        "the place the database orders it in, after every line with a time (MariaDB puts a "
        "date with a zero month or day, `2026-00-00`, among that year's).",
        metadata=_read("r.at"),
    )
    detail: object | None = strawberry.field(
        graphql_type=RunLogDetail | None,
        description="What the line records, typed by its kind; `UnreadableDetail` when the "
        "stored text cannot be read as that type; null when the line has no detail.",
    )
    problem: str | None = strawberry.field(
        default=None,
        description="Null on a line as this service writes it. On a row another writer left "
        "with a value no line can hold, what was stored (`stored at 'yesterday' is not a "
        "time`, `stored kind is null`, `stored phase 4294967296 is not an integer ...`); the "
        "field shows a stand-in instead: `at` 0001-01-01T00:00:00Z, `kindName` '', `phase` "
        "null. The line keeps its place in the order, and pages go on past it.",
        metadata=_read("r.problem"),
    )
    cursor: str = strawberry.field(
        default="",
        description="The line's position, opaque: pass it as `after` for the lines older than "
        "it, as `before` for the lines newer than it, or as `runLogTail`'s `since`, with the "
        "same run and kinds it was read with (anything else is refused). A cursor of a line of "
        "the last few seconds also remembers the recent lines read up to it (128 at most, so a "
        "cursor stays small), so that a line whose commit was slow, landing behind it, is still "
        "read once.",
        metadata=_read('c or r.cursor or ""'),
    )


@strawberry.type(description="Where a page begins and ends, and whether pages follow either way.")
class PageInfo:
    has_next_page: bool = strawberry.field(
        description="Whether older lines follow this page. False on the last page. On a "
        "`before` page, true: the lines up to its cursor are older."
    )
    end_cursor: str | None = strawberry.field(
        description="The last, oldest line's cursor: pass as `after` to read the next, older "
        "page; null on an empty page."
    )
    has_previous_page: bool = strawberry.field(
        default=False,
        description="On a `before` page, whether newer lines remain past it (read them with "
        "`before: startCursor`). On the first page, false: nothing newer was written when it "
        "was read. On an `after` page, true: the lines down to its cursor are newer.",
    )
    start_cursor: str | None = strawberry.field(
        default=None,
        description="The first, newest line's cursor: pass as `before` to read the lines "
        "written since (with `wait` to wait for them). On an empty first page, a cursor of the "
        "read itself; on an empty `before` page, the `before` it was given; null on an empty "
        "`after` page.",
    )


@strawberry.type(description="Lines of a run that pruning deleted: older lines than a page's last.")
class PrunedLines:
    lines: int = strawberry.field(description="How many of the run's lines were pruned, in all.")
    through: datetime.datetime | None = strawberry.field(
        description="The newest `at` among them (UTC): the run's lines up to this were pruned. "
        "Null when none of them held a time."
    )
    pruned_at: datetime.datetime | None = strawberry.field(
        description="When a prune last deleted lines of the run (UTC)."
    )


# Each `RunLogLine` field's `_read`, by its Python name: what the compiled
# plan reads a line with, and `_line` is made from. `detail` is read with
# `details.read_values` by the plan and `read_detail` by `_line`.
LINE_SOURCES: dict[str, tuple[str, dict[str, Any]]] = {
    field.python_name: field.metadata[READ]
    for field in get_object_definition(RunLogLine, strict=True).fields
    if READ in field.metadata
}


@strawberry.type(description="A page of a run's lines, newest first.")
class RunLogPage:
    """A page as its resolver read it: the stored lines, made into `RunLogLine`s only when asked.

    The compiled plan (gql/fastpath.py) serves a page straight from `lines`,
    reading each field as `LINE_SOURCES` says and each detail with
    `details.read_values`; it never calls `nodes`. graphql-core, when it
    completes a page the plan does not (a selection outside its cover, a
    value it did not expect), calls `nodes`, which makes the lines as the
    tail and everything else does, with `_line`.
    """

    nodes: list[RunLogLine] = strawberry.field(
        resolver=lambda self: self.made_lines(),
        description="The lines, ordered by `at` then `id`, newest first.",
    )
    page_info: PageInfo = strawberry.field(description="Where the page ends.")
    run: Run | None = strawberry.field(
        default=None,
        description="The run as the events system has it now (status, terminal, ended, "
        "updated); null when the events system has no such run, so an unknown run is told "
        "apart from a quiet one. Looked up with the page's `blockingRun`s, in one query.",
    )
    pruned: PrunedLines | None = strawberry.field(
        default=None,
        description="On a page that reaches the run's oldest surviving line (`hasNextPage` "
        "false, read newest first), what pruning deleted of the run's log: how many lines, "
        "up to when, and when it last did. Null when no line of the run was pruned, and on "
        "every other page: older lines follow it, and the last page says.",
    )
    lines: strawberry.Private[list[store.Line]] = dataclasses.field(default_factory=list)
    line_cursors: strawberry.Private[Sequence[str | None]] = dataclasses.field(default_factory=list)
    # The blocking runs found, by id; the lookup's failure in their place;
    # None when the query selects neither `blockingRun` nor `run`.
    runs: strawberry.Private[dict[int, store.Run] | Exception | None] = None
    line_sources: ClassVar[dict[str, tuple[str, dict[str, Any]]]] = LINE_SOURCES

    def made_lines(self) -> list[RunLogLine]:
        """The page's lines as `RunLogLine`s, each blocked line's `blockingRun` in place."""
        lines = [_line(row, cursor) for row, cursor in zip(self.lines, self.line_cursors, strict=True)]
        if self.runs is not None:
            for line in lines:
                if type(line.detail) is RunBlockedDetail:
                    # A failed lookup in the field's place: graphql-core raises it there.
                    line.detail.blocking_run = (
                        self.runs  # type: ignore[assignment]  # see RunBlockedDetail
                        if isinstance(self.runs, Exception)
                        else self.blocking_run(line.detail.blocking_run_id)
                    )
        return lines

    def blocking_run(self, blocking_run_id: object) -> Run | None:
        """A line's `blockingRun`; the lookup's failure raised, for graphql-core to put at the field."""
        if isinstance(self.runs, Exception):
            raise self.runs
        number = parse_id(blocking_run_id)
        row = None if number is None or self.runs is None else self.runs.get(number)
        return None if row is None else _run(row)

    def loaded(self, name: str, values: dict[str, Any]) -> Any:
        """The value of a detail's LOADED field (looked up, not stored), for the compiled plan."""
        if name == "blocking_run":
            return self.blocking_run(values["blocking_run_id"])
        raise LookupError(f"no {name} is looked up for a page")


def _line_maker(sources: dict[str, tuple[str, dict[str, Any]]]) -> Callable[..., RunLogLine]:
    """`_line`, made from each field's `_read`: one call, each field's expression in place."""
    names: dict[str, Any] = {"RunLogLine": RunLogLine, "_read_detail": read_detail}
    arguments = []
    for field, (expression, used) in sources.items():
        names.update(used)
        arguments.append(f"{field}={expression}")
    text = (
        "def _line(r, c=None):\n"
        f"    return RunLogLine({', '.join(arguments)}, detail=_read_detail(r.kind, r.detail))\n"
    )
    exec(compile(text, "<RunLogLine from its fields' _read>", "exec"), names)  # noqa: S102
    made: Callable[..., RunLogLine] = names["_line"]
    return made


# A stored line `r` (store.Line), with its cursor `c` if it has one, as a `RunLogLine`.
_line = _line_maker(LINE_SOURCES)


# ── retention ────────────────────────────────────────────────────────────────


@strawberry.enum(description="What one tick of the retention sweeper did.")
class SweepOutcome(enum.Enum):
    SWEPT = strawberry.enum_value(
        "swept", description="It took the sweep lock and pruned a slice (possibly of 0 lines)."
    )
    SKIPPED = strawberry.enum_value(
        "skipped",
        description="Another server process on the same database holds the sweep lock and "
        "sweeps instead: nothing to do here.",
    )
    FAILED = strawberry.enum_value(
        "failed", description="The slice failed; see `error`. The next tick tries again."
    )


@strawberry.type(description="One tick of this server process's retention sweeper.")
class RetentionSweep:
    started_at: datetime.datetime = strawberry.field(description="When the tick began, UTC.")
    finished_at: datetime.datetime = strawberry.field(description="When the tick ended, UTC.")
    horizon: datetime.datetime = strawberry.field(
        description="The horizon it pruned with: lines of terminal runs that ended before this."
    )
    outcome: SweepOutcome = strawberry.field(description="Whether it swept, skipped or failed.")
    lines_deleted: int = strawberry.field(description="Lines the tick deleted.")
    runs_touched: int = strawberry.field(description="Runs the deleted lines belonged to.")
    error: str | None = strawberry.field(
        description="Why the tick failed, in one line; null unless `outcome` is FAILED."
    )


async def _eligible_lines(root: RetentionStatus, info: strawberry.Info[Context, None]) -> int | None:
    if root.horizon is None:
        return None
    context = info.context
    try:
        async with asyncio.timeout(context.settings.read_timeout):
            return await store.count_eligible(context.engine, before=root.horizon)
    except Exception as exc:
        if not store.is_unavailable(exc):
            raise  # a fault of this server: masked, and logged with its stack
        raise _unavailable(context, "retention.eligibleLines", exc) from None


@strawberry.type(
    description="Retention as this server process runs it: its settings, what its sweeper "
    "has done since the process started, and what is eligible now. Each process has its own "
    "sweeper; with several on one database, one sweeps at a time and the others skip."
)
class RetentionStatus:
    enabled: bool = strawberry.field(
        description="Whether this process sweeps: true when RUNLOG_RETENTION is set."
    )
    retention: str | None = strawberry.field(
        description="RUNLOG_RETENTION as a duration (`30d`): lines of terminal runs that ended "
        "longer ago than this are pruned. Null when retention is off."
    )
    sweep_interval: str = strawberry.field(
        description="RUNLOG_SWEEP_INTERVAL as a duration (`60s`): the wait between two ticks, "
        "give or take 20% so that processes do not tick in lockstep."
    )
    slice_limit: int = strawberry.field(description="Lines one tick deletes at most.")
    horizon: datetime.datetime | None = strawberry.field(
        description="Now minus the retention: lines of terminal runs that ended before this "
        "are eligible. Null when retention is off."
    )
    last_sweep: RetentionSweep | None = strawberry.field(
        description="This process's last tick; null before its first (or when retention is off)."
    )
    sweeps: int = strawberry.field(description="Ticks of this process since it started.")
    failures: int = strawberry.field(description="Ticks of this process that failed.")
    lines_deleted: int = strawberry.field(
        description="Lines this process's sweeper has deleted since it started."
    )
    eligible_lines: int | None = strawberry.field(
        resolver=_eligible_lines,
        description="How many lines are eligible for pruning now, at `horizon` (counted when "
        "asked, so it may take a moment on a large table). Null when retention is off.",
    )


def _retention_status(info: strawberry.Info[Context, None]) -> RetentionStatus:
    context = info.context
    context.require(Action.ADMINISTER, "retention")
    sweeper, settings = context.sweeper, context.settings
    last = None if sweeper is None else sweeper.last
    return RetentionStatus(
        enabled=sweeper is not None,
        retention=None if sweeper is None else retention.format_duration(sweeper.retention),
        sweep_interval=retention.format_duration(settings.sweep_interval),
        slice_limit=store.PRUNE_LIMIT_DEFAULT if sweeper is None else sweeper.limit,
        horizon=None if sweeper is None else sweeper.horizon(),
        last_sweep=None
        if last is None
        else RetentionSweep(
            started_at=last.started_at,
            finished_at=last.finished_at,
            horizon=last.horizon,
            outcome=SweepOutcome(last.outcome.value),
            lines_deleted=last.deleted,
            runs_touched=last.runs,
            error=last.error,
        ),
        sweeps=0 if sweeper is None else sweeper.sweeps,
        failures=0 if sweeper is None else sweeper.failures,
        lines_deleted=0 if sweeper is None else sweeper.deleted,
    )


# ── operations ───────────────────────────────────────────────────────────────


async def read_run_log(
    context: Context,
    asked: Asked,
    servings: Callable[[], Any],
    *,
    run_id: Any,
    kinds: list[str] | None,
    limit: int | None,
    after: str | None,
    before: str | None,
    wait: int | None,
    fresh: bool | None,
) -> RunLogPage:
    """What `runLog` answers, its arguments as graphql-core coerced them (`kinds` as wire names).

    The resolver's, and the read plan's (gql/read_plan.py), which calls it
    without graphql-core's executor. `asked` is what the field selects, and
    `servings()` how its page's details are served (limits.detail_servings),
    asked for only when the page reads details.
    """
    context.require(Action.READ, "runLog")
    number = parse_id(run_id)
    note(run_id=number)
    if number is None:
        raise ClientError(
            id_problem("runId", run_id),
            "BAD_USER_INPUT",
        )
    if after is not None and before is not None:
        raise ClientError(
            "after and before cannot be given together: after reads the lines older than its "
            "cursor, before the lines newer than its cursor; pass one of them",
            "BAD_USER_INPUT",
        )
    if wait is not None and not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ClientError(f"wait must be 0 to {MAX_WAIT_SECONDS} seconds, got {wait}", "BAD_USER_INPUT")
    if wait and before is None:
        raise ClientError(
            "wait needs before: pass a page's pageInfo.startCursor as before, to wait for the "
            "lines written after it",
            "BAD_USER_INPUT",
        )
    wire_kinds = kinds
    scope = store.cursor_scope(number, wire_kinds)
    try:
        cursor = store.decode_cursor(after, "after", scope) if after is not None else None
        newer = store.decode_cursor(before, "before", scope) if before is not None else None
    except store.CursorError as exc:
        raise ClientError(str(exc), "BAD_USER_INPUT") from None
    window = tail.late_window(context.settings)
    loop = asyncio.get_running_loop()

    def read_on(engine: AsyncEngine, max_detail_bytes: int | None) -> Awaitable[store.Page]:
        return store.read_page(
            engine,
            run_id=number,
            kinds=wire_kinds,
            limit=store.clamp_read_limit(limit),
            after=cursor,
            before=newer,
            detail=asked.detail,
            max_detail_bytes=max_detail_bytes,
            largest_detail=context.settings.max_detail_bytes,
        )

    # Pages read newest first may read a replica (gql/replica.py);
    # `before` pages and the long poll read the primary, as the tail does.
    replica = context.replica if newer is None else None

    async def read_once() -> tuple[store.Page, datetime.datetime, float]:
        # One deadline for the page and, when selected, its runs.
        deadline = loop.time() + context.settings.read_timeout
        # Taken before the read: a line stamped before it has committed
        # by the time the read sees the database (see tail.late_window).
        # On a replica, it also has to have arrived there: a page that
        # may trail the primary leaves that much more to `before` reads.
        trails = replica.allowance if replica is not None and replica.in_use and not fresh else 0.0
        settled = store.settled_before(window + trails)

        async def read(max_detail_bytes: int | None) -> store.Page:
            if replica is None:
                return await read_on(context.engine, max_detail_bytes)
            source = await replica.source(fresh=bool(fresh), deadline=deadline)
            if source is not context.engine:
                try:
                    # Half the read's time at most, so the primary has the rest.
                    async with asyncio.timeout((deadline - loop.time()) / 2):
                        return await read_on(source, max_detail_bytes)
                except Exception as exc:
                    if not store.is_unavailable(exc):
                        raise
                    metrics.swallowed("replica.read")
                    log.warning(
                        "runLog of run %d: request %s: the replica failed (%s): read from the primary",
                        number,
                        context.request_id,
                        _reason(exc),
                    )
                    replica.failed(exc)
            return await read_on(context.engine, max_detail_bytes)

        try:
            async with asyncio.timeout_at(deadline):
                # A page without details weighs nothing against the budget.
                if asked.detail:
                    page = await context.details_left().read(read, servings())
                else:
                    page = await read(None)
        except Exception as exc:
            if not store.is_unavailable(exc):
                raise  # a fault of this server: masked, and logged with its stack
            raise _unavailable(context, f"runLog of run {number}", exc) from None
        return page, settled, deadline

    def cursors_of(page: store.Page, settled: datetime.datetime) -> store.PageCursors | None:
        if not (asked.cursor or asked.ends):
            return None
        if newer is not None:
            return store.newer_cursors(page.lines, before=newer, settled=settled, scope=scope)
        return store.page_cursors(
            page.lines, has_next=page.has_next, settled=settled, scope=scope, only_ends=not asked.cursor
        )

    page, settled, deadline = await read_once()
    made = cursors_of(page, settled)
    if wait and context.watcher is not None and not (page.lines if made is None else made.texts):
        polled = await _long_poll(
            context, number, wait, read_once, cursors_of, 0.0 if made is None else made.settles_in
        )
        if polled is not None:
            page, settled, deadline, made = polled
    lines = page.lines
    cursors = [] if made is None else made.texts
    # A page stops short where a cursor would name more recent lines than
    # it may (store.RECENT_LINES): the rest is the next page's.
    has_more = page.has_next
    if made is not None and len(cursors) < len(lines):
        lines, has_more = lines[: len(cursors)], True
    if newer is not None:
        # Read oldest first; shown newest first, as every page.
        lines = lines[::-1]
        cursors.reverse()
    metrics.lines_read(len(lines))
    runs: dict[int, store.Run] | Exception | None = None
    run: Run | Exception | None = None
    if asked.blocking_run or asked.run:
        runs, run = await _find_runs(context, lines, deadline, number if asked.run else None)
    if newer is not None:
        info_ = PageInfo(
            has_next_page=True,
            end_cursor=cursors[-1] if cursors else None,
            has_previous_page=has_more,
            start_cursor=cursors[0] if cursors else before,
        )
    else:
        start = cursors[0] if cursors else None
        if not lines and cursor is None and (asked.ends or asked.cursor):
            start = store.encode_cursor(store.Cursor(at=None, id=0), scope, store.Window(settled=settled))
        info_ = PageInfo(
            has_next_page=has_more,
            end_cursor=cursors[-1] if cursors else None,
            has_previous_page=cursor is not None and cursor.at is not None,
            start_cursor=start,
        )
    pruned: PrunedLines | Exception | None = None
    if asked.pruned and newer is None and not has_more:
        pruned = await _pruned(context, number, deadline)
    return RunLogPage(
        page_info=info_,
        run=run,  # type: ignore[arg-type]  # see _find_runs
        pruned=pruned,  # type: ignore[arg-type]
        lines=lines,
        line_cursors=cursors if asked.cursor else [None] * len(lines),
        runs=runs,
    )


@strawberry.type
class Query:
    @strawberry.field(
        description="The lines of one run, newest first (by `at`, then `id`). `kinds` null "
        "means every kind, `[]` none. `limit` null or 0 means 500, otherwise it is clamped "
        "to 1..2000. Pass a page's `pageInfo.endCursor` as `after` for the next, older page: "
        "no line is repeated or skipped while new lines are written. Pass `pageInfo.startCursor` "
        "(or any line's `cursor`) as `before` for the `limit` lines just newer, still newest "
        "first, each once even when a line's commit was slow and it landed behind lines already "
        "read; `after` and `before` together are refused. With `before`, `wait` (0 to 30 "
        "seconds) is the long poll: when no newer line is there yet, the call answers as soon as "
        "one is written, by any process of the service, or with an empty page when the wait is "
        "up. A page ends before `limit` lines, with `hasNextPage` (or, reading `before`, "
        "`hasPreviousPage`) true, where its details would pass the request's byte budget (8 MiB "
        "of stored details by default, shared by every runLog of one request); its first line "
        "comes whatever its size. A page whose cursors are selected also ends early where a "
        "cursor would name more than 128 lines of the last few seconds; reading `before`, the "
        "rest of such a burst comes once its oldest lines have settled (`wait` waits for that)."
    )
    @_one_connection
    async def run_log(
        self,
        info: strawberry.Info[Context, None],
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run to read.")],
        kinds: Annotated[
            list[RunLogKind] | None,
            strawberry.argument(description="Only lines of these kinds; null for all, [] for none."),
        ] = None,
        limit: Annotated[
            int | None,
            strawberry.argument(description="Lines per page: null or 0 means 500; 1..2000."),
        ] = None,
        after: Annotated[
            str | None,
            strawberry.argument(
                description="A previous page's `pageInfo.endCursor` (or a line's `cursor`): "
                "read the older lines."
            ),
        ] = None,
        before: Annotated[
            str | None,
            strawberry.argument(
                description="A previous page's `pageInfo.startCursor` (or a line's `cursor`): read "
                "the lines just newer, newest first."
            ),
        ] = None,
        wait: Annotated[
            int | None,
            strawberry.argument(
                description="With `before`: seconds (0 to 30) to wait for a newer line when there "
                "is none yet. Null or 0: answer at once."
            ),
        ] = None,
        fresh: Annotated[
            bool | None,
            strawberry.argument(
                description="Read-your-writes, where the service reads from a replica: true "
                "makes the page hold every line stored before the call (the replica is waited "
                "for, briefly, or the primary is read). Costs two round trips more; null or "
                "false: a page may trail the newest lines by up to the replica lag the server "
                "allows."
            ),
        ] = None,
    ) -> RunLogPage:
        context = info.context
        if context is WARMING:
            # Start-up's pass over the trusted documents (app.py): an empty
            # page, read from nowhere, has its plan compiled all the same.
            return RunLogPage(page_info=PageInfo(has_next_page=False, end_cursor=None))
        # Strawberry's Info has no public field nodes or fragments;
        # graphql-core's own info has both.
        raw = resolve_info(info)
        return await read_run_log(
            context,
            asked_of(raw.field_nodes, raw.fragments),
            functools.partial(detail_servings, raw.field_nodes[0], raw.fragments),
            run_id=run_id,
            kinds=None if kinds is None else [k.value for k in kinds],
            limit=limit,
            after=after,
            before=before,
            wait=wait,
            fresh=fresh,
        )

    retention: RetentionStatus = strawberry.field(
        resolver=_retention_status,
        description="Admin only. Retention as this server process runs it: the settings, the "
        "sweeper's last tick and totals since start, and how many lines are eligible now.",
    )


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Write one line; answers whether it was stored: true once it is stored, "
        "exactly once; false when it is not. Never a GraphQL error: an unknown kind, a detail "
        "that does not fit its kind, a run id that is not a positive integer, a caller that "
        "may not write, or a database that is down or slow all answer false, and the line is "
        "logged by the server so nothing is lost without a trace. One case is not known: a "
        "database that stops answering after the line was sent may have stored it; send an "
        "`idempotencyKey` to retry such a line safely. `kind` is the wire name (`run.status`)."
    )
    async def write_run_log(
        self,
        info: strawberry.Info[Context, None],
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run, a positive integer.")],
        kind: Annotated[str, strawberry.argument(description="The kind's wire name (`run.status`).")],
        step_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="The step, a positive integer, if any."),
        ] = None,
        phase: Annotated[int | None, strawberry.argument(description="The phase, if any.")] = None,
        detail: Annotated[
            JSON | None,
            strawberry.argument(
                description="The detail: an object whose keys are the fields of the kind's "
                'detail type (`{"from": "scheduled", "to": "live"}`); at most '
                "64 KiB as JSON by default."
            ),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            strawberry.argument(
                description="Makes a retry safe: the same key for the same run stores the line "
                "at most once, and a retry of a line already stored under it answers true. "
                "Send the same key when retrying after false or no answer; keys are kept a "
                "day. 1 to 256 characters; a key reused for a different line answers false."
            ),
        ] = None,
    ) -> bool:
        return await write_line(
            info.context,
            run_id=run_id,
            kind=kind,
            step_id=step_id,
            phase=phase,
            detail=detail,
            idempotency_key=idempotency_key,
        )

    @strawberry.mutation(
        description="Admin only. Delete at most `limit` lines (null or 0 means 5000, clamped "
        "to 1..50000) of runs in a terminal status (completed, cancelled, failed, missed) "
        "whose `COALESCE(ended_at, updated_at)` is before `before` (read as UTC when it has "
        "no offset); answers how many were deleted. A run that is not terminal keeps every "
        "line. Call again until it answers 0 to drain a backlog: on a busy database it may "
        "answer fewer than `limit` while more remain (what it deleted by its deadline)."
    )
    async def prune_terminal(
        self,
        info: strawberry.Info[Context, None],
        before: Annotated[
            datetime.datetime,
            strawberry.argument(description="Prune runs that ended before this (UTC if no offset)."),
        ],
        limit: Annotated[
            int | None,
            strawberry.argument(description="Lines to delete at most: null or 0 means 5000."),
        ] = None,
    ) -> int:
        context = info.context
        context.require(Action.ADMINISTER, "pruneTerminal")
        try:
            store.as_naive_utc(before)
        except OverflowError:
            # 0001-01-01T00:00:00+05:00 is a valid DateTime, but in UTC it is
            # before the year 1, which no database column can compare with.
            raise ClientError(
                f"before={before.isoformat()} is outside the years 1 to 9999 once read as UTC",
                "BAD_USER_INPUT",
            ) from None
        # The store answers what it deleted by the deadline (slice by slice,
        # see store.prune_terminal); it fails only when it deleted nothing.
        deadline = asyncio.get_running_loop().time() + context.settings.prune_timeout
        try:
            deleted = await store.prune_terminal(
                context.engine, before=before, limit=store.clamp_prune_limit(limit), deadline=deadline
            )
        except Exception as exc:
            if not store.is_unavailable(exc):
                raise  # a fault of this server: masked, and logged with its stack
            raise _unavailable(context, "pruneTerminal", exc) from None
        metrics.lines_pruned(deleted, "pruneTerminal")
        log.info("pruneTerminal: %d lines deleted, before %s", deleted, before.isoformat())
        return deleted


async def _pruned(context: Context, run_id: int, deadline: float) -> PrunedLines | Exception | None:
    """What pruning took from the run's log, by `deadline`; a failure in its place (see _find_runs)."""
    try:
        async with asyncio.timeout_at(deadline):
            found = await store.find_pruned(context.engine, run_id)
    except Exception as exc:  # raised at the page's `pruned`, not swallowed
        return _unavailable(context, "pruned lines", exc) if store.is_unavailable(exc) else exc
    if found is None:
        return None
    return PrunedLines(lines=found.lines, through=found.through, pruned_at=found.pruned_at)


async def _long_poll(
    context: Context,
    run_id: int,
    seconds: int,
    read_once: Callable[[], Awaitable[tuple[store.Page, datetime.datetime, float]]],
    cursors_of: Callable[[store.Page, datetime.datetime], store.PageCursors | None],
    settles_in: float,
) -> tuple[store.Page, datetime.datetime, float, store.PageCursors | None] | None:
    """Wait up to `seconds` for the run's next lines, then read them; None when none came.

    The wait costs no query of its own: the process's watcher probes every
    watched run in one query per interval (gql/tail.py) and wakes this call
    when its run's count of recent lines moves. It ends early, with nothing,
    when the server shuts down, or when its client hangs up: a wait no one
    will read held its place against RUNLOG_MAX_WAITS, and its request
    against the server's RUNLOG_MAX_CONNECTIONS, for the rest of its time.
    Lines held back by the cursor's bound (`settles_in` seconds,
    store.PageCursors) are read again once they can be delivered, whether
    or not anything new was written.
    """
    watcher = context.watcher
    if watcher is None:
        return None
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    try:
        with metrics.long_poll_waiting():  # runlog_long_polls_waiting
            async with watcher.watch(run_id, counted=True) as watch:
                leaving = None
                if context.receive is not None:
                    leaving = loop.create_task(_until_gone(context.receive, watch.abandon))
                try:
                    while (left := end - loop.time()) > 0:
                        held_back = 0 < settles_in < left
                        changed = await watch.changed(settles_in if held_back else left)
                        if watch.abandoned or (not changed and not held_back):
                            return None
                        page, settled, deadline = await read_once()
                        made = cursors_of(page, settled)
                        if page.lines if made is None else made.texts:
                            return page, settled, deadline, made
                        settles_in = 0.0 if made is None else made.settles_in
                finally:
                    if leaving is not None:
                        leaving.cancel()
    except tail.TooManyWaits as exc:
        raise ClientError(str(exc), "TOO_MANY_WAITS") from None
    except tail.Closed:
        return None
    return None


async def _until_gone(receive: Callable[[], Awaitable[Any]], then: Callable[[], None]) -> None:
    """Call `then` once the client of an HTTP request whose body was read disconnects.

    Past its body, a request's `receive` gives only `http.disconnect`: when
    the client closes its connection, or once the response is sent.
    """
    while (await receive())["type"] != "http.disconnect":
        pass
    then()


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="The lines of one run as they are written, oldest first, by whichever "
        "process of the service wrote them. With `since` (a line's `cursor`), first every "
        "line newer than it, then live ones: a client that reconnects with the last cursor "
        "it saw misses nothing and sees nothing twice. Without `since`, from now on. A line "
        "whose commit was slow arrives late rather than never. Served at /graphql over "
        "websockets (`graphql-transport-ws`, or the older `graphql-ws`); a reader's token goes "
        'in the connection_init payload as {"Authorization": "Bearer <token>"}.'
    )
    async def run_log_tail(
        self,
        info: strawberry.Info[Context, None],
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run to follow.")],
        kinds: Annotated[
            list[RunLogKind] | None,
            strawberry.argument(description="Only lines of these kinds; null for all, [] for none."),
        ] = None,
        since: Annotated[
            str | None,
            strawberry.argument(
                description="A line's `cursor`: start with the lines newer than it. Null: from now on."
            ),
        ] = None,
    ) -> AsyncIterator[RunLogLine]:
        # A coroutine that returns the stream, not a generator: its refusals
        # (the caller, the run id, the caps) are raised before the stream
        # starts, so the client gets them as the operation's error.
        context = info.context
        context.require(Action.READ, "runLogTail")
        number = parse_id(run_id)
        if number is None:
            raise ClientError(
                id_problem("runId", run_id),
                "BAD_USER_INPUT",
            )
        if since is not None:
            try:
                # Refused now, as the operation's error.
                store.decode_cursor(
                    since,
                    "since",
                    store.cursor_scope(number, None if kinds is None else [k.value for k in kinds]),
                )
            except store.CursorError as exc:
                raise ClientError(str(exc), "BAD_USER_INPUT") from None
        if context.tails is None:
            raise ClientError("runLogTail is served over a websocket at /graphql", "BAD_REQUEST")
        try:
            slot = context.tails.take(context.connection)
        except subscriptions.Refused as exc:
            raise ClientError(str(exc), exc.code) from None
        source = tail.tail_lines(
            context,
            number,
            None if kinds is None else [k.value for k in kinds],
            since,
            most_catch_up=context.settings.max_catch_up_lines,
        )

        def fail(exc: Exception) -> Exception:
            if isinstance(exc, store.CursorError):
                return ClientError(str(exc), "BAD_USER_INPUT")
            if isinstance(exc, tail.CatchUpTooLong):
                most = context.settings.max_catch_up_lines
                return ClientError(
                    f"runLogTail ended its catch-up after {exc.args[0]} lines: `since` is more than "
                    f"{most} lines behind (RUNLOG_MAX_CATCH_UP_LINES). Subscribe again with the last "
                    "cursor received as `since` to go on, or read the lines with runLog(before:) pages "
                    "first",
                    "CATCH_UP_TOO_LONG",
                    delivered=exc.args[0],
                    maxLines=most,
                )
            if isinstance(exc, GraphQLError) or not store.is_unavailable(exc):
                return exc  # a ClientError as it is; a fault of this server masked and logged
            return _unavailable(context, f"runLogTail of run {number}", exc)

        return subscriptions.Stream(slot, source, _line, fail)


def _unavailable(context: Context, what: str, exc: Exception) -> ClientError:
    """The refusal for a database that is down, unreachable, slow or busy.

    The caller can act on that (try again later), so it is a `ClientError`,
    logged here with the driver's account under the same request id. Any other
    failure is a fault of this server and is left to the masking extension,
    which logs it with its stack and shows the caller only the request id.
    """
    log.error("%s failed: request %s: %s", what, context.request_id, _reason(exc))
    return ClientError(
        f"The run log's database is not answering; try again shortly (request id {context.request_id}).",
        "DATABASE_UNAVAILABLE",
        requestId=context.request_id,
    )


def _reason(exc: BaseException) -> str:
    """A one-line account of a failure for the server's log."""
    if isinstance(exc, TimeoutError):
        return "the database did not answer in time"
    original = getattr(exc, "orig", None) or exc
    return f"{type(original).__name__}: {original}".splitlines()[0]


async def write_line(context: Context, **arguments: Any) -> bool:
    """What `writeRunLog` does with its arguments (the resolver's and the write plan's, gql/write_plan.py)."""
    # The write path (checks, deadline, grouping, the answer and its log) is writes.py's.
    return await context.writer.write_run_log(
        may_write=context.policy.allows(context.caller, Action.WRITE),
        request_id=context.request_id,
        arrived=context.arrived,
        **arguments,
    )


# ── lines refused before they ran ────────────────────────────────────────────


def log_unrun_writes(request_id: str, body: bytes, errors: list[GraphQLError], settings: Settings) -> None:
    """Log, at WARNING, each `writeRunLog` line of a request refused before it ran.

    An argument GraphQL cannot coerce (`phase: 2147483648`, `phase: 3.5`,
    `kind: null`), as a literal or as a variable, makes the whole request an
    error before any resolver runs, as the spec has it: the writer gets that
    error, which a typed client catches when it is generated. The line still
    leaves its trace, as every other line that was not stored does, with the
    arguments as sent (a variable's value as it came, a literal as written).
    """
    if b"writeRunLog" not in body:
        return
    reason = "the request was refused before it ran: " + "; ".join(
        writes.short_text(error.message, 300) for error in errors[:3]
    )
    try:
        request = json.loads(body)
        query, variables = request.get("query"), request.get("variables") or {}
        if len(query) > settings.max_query_bytes:
            raise ValueError("a text this long is not parsed again")  # it costs the loop
        document = parse(query, no_location=True, max_tokens=settings.max_tokens)
    except Exception:  # not a request this can read: the body, bounded, is the trace
        metrics.count_write(reason)
        writes.log_refused(
            reason, request_id, {"request": body.decode("utf-8", "replace")}, settings.max_detail_bytes
        )
        return
    for arguments in _write_arguments(document, variables if isinstance(variables, dict) else {}):
        metrics.count_write(reason)
        writes.log_refused(reason, request_id, arguments, settings.max_detail_bytes)


def _write_arguments(document: DocumentNode, variables: dict[str, Any]) -> list[dict[str, Any]]:
    """The arguments of every `writeRunLog` field in `document`, as sent."""
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    found: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(selections: Any) -> None:
        for selection in selections or ():
            if isinstance(selection, FieldNode):
                if selection.name.value == "writeRunLog":
                    found.append(
                        {a.name.value: _as_sent(a.value, variables) for a in selection.arguments or ()}
                    )
            elif isinstance(selection, InlineFragmentNode):
                visit(selection.selection_set.selections)
            elif isinstance(selection, FragmentSpreadNode) and selection.name.value not in seen:
                seen.add(selection.name.value)
                fragment = fragments.get(selection.name.value)
                if fragment is not None:
                    visit(fragment.selection_set.selections)

    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode) and definition.operation == OperationType.MUTATION:
            visit(definition.selection_set.selections)
    return found


def _as_sent(node: ValueNode, variables: dict[str, Any]) -> Any:
    """A literal's value as written (an integer Python will not read stays its digits)."""
    if isinstance(node, VariableNode):
        return variables.get(node.name.value)
    if isinstance(node, IntValueNode):
        return int(node.value) if len(node.value) <= 1000 else node.value
    if isinstance(node, ListValueNode):
        return [_as_sent(value, variables) for value in node.values]
    if isinstance(node, ObjectValueNode):
        return {field.name.value: _as_sent(field.value, variables) for field in node.fields}
    return value_from_ast_untyped(node, variables)


# ── schema ───────────────────────────────────────────────────────────────────


class RunLogSchema(strawberry.Schema):
    @functools.cached_property
    def root_labels(self) -> dict[OperationType, dict[str, str]]:
        """For each operation type, the label (`answers.operation_label`) of each root field it may select."""
        found = {}
        for kind in OperationType:
            root = graphql_schema(self).get_root_type(kind)
            if root is not None:
                names = {name: name for name in root.fields}
                found[kind] = {
                    **names,
                    "__typename": "__typename",
                    "__schema": "introspection",
                    "__type": "introspection",
                }
        return found

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Strawberry logs every error with its stack. A refusal the caller can
        # act on is not a server problem, and unexpected errors are logged
        # once, with their request id, by the masking extension.
        for error in errors:
            log.debug("GraphQL error: %s", error.message)


def build_schema(
    extensions: list[type[SchemaExtension] | Any] | None = None, *, fast_path: bool = True
) -> strawberry.Schema:
    """The schema; `fast_path=False` completes pages with graphql-core alone (tests compare the two)."""
    return RunLogSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        # Detail types reached only through the union are listed so the SDL
        # always has all of them in a stable order.
        types=list(DETAIL_TYPES.values()),
        extensions=extensions or [],
        execution_context_class=PageExecutor.with_plans() if fast_path else None,
    )


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
