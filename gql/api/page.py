"""What runLog answers with, as GraphQL serves it: a line, a page, its page info; and what a page asked for.

Per-line fields are plain attributes set by the page's one root resolver, not resolvers of their own.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, NamedTuple

import strawberry
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
)
from strawberry.types import get_object_definition

from .. import store
from ..domain.detail_codec import read_detail
from ..domain.details import RunBlockedDetail, RunLogDetail
from ..ids import parse_id
from ..kinds import Kind
from .query_shape import selections

log = logging.getLogger("gql.runlog")

# Built from `Kind`, so the set is defined once (`Any`: mypy cannot type the functional Enum API).
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


def kind_of(wire_name: str) -> Any:
    """The `RunLogKind` of a stored kind; None for one this server does not know."""
    return _ENUM_BY_WIRE_NAME.get(wire_name)


class Asked(NamedTuple):
    """What a runLog field selects on its lines, beyond their columns."""

    detail: bool  # else the page's details are neither fetched nor read
    blocking_run: bool  # else no run is looked up
    cursor: bool = False  # a line's `cursor`: every line's is made
    ends: bool = False  # `startCursor` or `endCursor`: only the page's ends' are made
    run: bool = False  # the page's `run`
    pruned: bool = False  # the page's `pruned`
    holds: bool = False  # a run's holds, headline, phases or latest phase, anywhere in the selection
    kind_counts: bool = False  # the page's `kindCounts`: one grouped query
    phases: bool = False  # a run's phases: every step's newest line is read
    timeline: bool = False  # a run's timeline: every step line is read


# What a runLog field selects, by its nodes (cached per query text), held weakly: a node keeps its document.
_ASKED: OrderedDict[tuple[int, ...], tuple[tuple[weakref.ref[FieldNode], ...], Asked]] = OrderedDict()
_ASKED_SIZE = 128  # fields remembered


RUN_STATE_FIELDS = frozenset(
    {"holds", "headline", "phases", "latestPhase", "lastLineAt", "timeline"}
)  # read only when selected


def asked_of(nodes: Sequence[FieldNode], fragments: Mapping[str, FragmentDefinitionNode]) -> Asked:
    """What the runLog field of `nodes` (one response key's) selects on its page, @skip or not."""
    key = tuple(map(id, nodes))
    found = _ASKED.get(key)
    if found is not None and all(ref() is node for ref, node in zip(found[0], nodes, strict=True)):
        return found[1]
    sets = (node.selection_set for node in nodes)
    names = {s.name.value for s in selections(sets, fragments) if isinstance(s, FieldNode)}
    # Only a line has a `detail`, and only a detail a `blockingRun`.
    asked = Asked(
        detail="detail" in names,
        blocking_run="blockingRun" in names,
        cursor="cursor" in names,
        ends="startCursor" in names or "endCursor" in names,
        run="run" in names,
        pruned="pruned" in names,
        holds=not names.isdisjoint(RUN_STATE_FIELDS),
        kind_counts="kindCounts" in names,
        phases="phases" in names,
        timeline="timeline" in names,
    )
    _ASKED[key] = (tuple(weakref.ref(node) for node in nodes), asked)  # while they live, their ids are theirs
    while len(_ASKED) > _ASKED_SIZE:
        _ASKED.popitem(last=False)
    return asked


# ── types ────────────────────────────────────────────────────────────────────


def _read(expression: str, **names: Any) -> dict[str, Any]:
    """A `RunLogLine` field's metadata: `expression` reads it from stored line `r` and cursor `c`, by `names`.

    Both `as_line` and the compiled page plan are made from it, so they cannot disagree.
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
    scan_limit_reached: bool = strawberry.field(
        default=False,
        description="Always false: a page with `search` holds `limit` matches unless the run has "
        "no more, however many lines it reads to find them. Kept for the clients that select it.",
    )


@strawberry.type(
    description="How many of a run's lines are of one kind, under a page's filters other than `kinds`."
)
class KindCount:
    kind: RunLogKind | None = strawberry.field(
        description="The kind; null for a kind this server does not know (`kindName` names it)."
    )
    kind_name: str = strawberry.field(description="The kind's wire name as stored (`run.status`).")
    count: int = strawberry.field(description="How many lines of the run are of this kind.")


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


# Each `RunLogLine` field's `_read`, by its Python name (`detail` is read its own way).
LINE_SOURCES: dict[str, tuple[str, dict[str, Any]]] = {
    field.python_name: field.metadata[READ]
    for field in get_object_definition(RunLogLine, strict=True).fields
    if READ in field.metadata
}


@strawberry.type(description="A page of a run's lines, newest first.")
class RunLogPage:
    """A page as its resolver read it: the stored `lines`, made into `RunLogLine`s only by `nodes`.

    The compiled plan serves `lines` directly; graphql-core, when it completes the page, calls `nodes`.
    """

    nodes: list[RunLogLine] = strawberry.field(
        resolver=lambda self: self.made_lines(),
        description="The lines, ordered by `at` then `id`, newest first.",
    )
    page_info: PageInfo = strawberry.field(description="Where the page ends.")
    # `Run` is gql/api/runs.py, which imports this module: named lazily, never imported.
    run: Annotated["Run", strawberry.lazy("gql.api.runs")] | None = strawberry.field(  # type: ignore[name-defined]  # noqa: F821, UP037
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
    kind_counts: list[KindCount] = strawberry.field(
        default_factory=list,
        description="How many of the run's lines there are of each kind under the page's "
        "filters other than `kinds` (so the counts beside a kind filter say what each kind "
        "would give), by wire name; a kind with no line is left out. One grouped query; with "
        "`search`, the matches of each kind.",
    )
    lines: strawberry.Private[list[store.Line]] = dataclasses.field(default_factory=list)
    line_cursors: strawberry.Private[Sequence[str | None]] = dataclasses.field(default_factory=list)
    # `runs.Run`s by id, or the lookup's failure; None when neither `blockingRun` nor `run` is selected.
    runs: strawberry.Private[dict[int, Any] | Exception | None] = None
    line_sources: ClassVar[dict[str, tuple[str, dict[str, Any]]]] = LINE_SOURCES

    def made_lines(self) -> list[RunLogLine]:
        """The page's lines as `RunLogLine`s, each blocked line's `blockingRun` in place."""
        lines = [as_line(row, cursor) for row, cursor in zip(self.lines, self.line_cursors, strict=True)]
        if self.runs is not None:
            for line in lines:
                if type(line.detail) is RunBlockedDetail:
                    # A failed lookup in the field's place: graphql-core raises it there.
                    line.detail.blocking_run = (
                        self.runs  # see RunBlockedDetail
                        if isinstance(self.runs, Exception)
                        else self.blocking_run(line.detail.blocking_run_id)
                    )
        return lines

    def blocking_run(self, blocking_run_id: object) -> Any:
        """A line's `blockingRun`; the lookup's failure raised, for graphql-core to put at the field."""
        if isinstance(self.runs, Exception):
            raise self.runs
        number = parse_id(blocking_run_id)
        return None if number is None or self.runs is None else self.runs.get(number)

    def loaded(self, name: str, values: dict[str, Any]) -> Any:
        """The value of a detail's LOADED field (looked up, not stored), for the compiled plan."""
        if name == "blocking_run":
            return self.blocking_run(values["blocking_run_id"])
        raise LookupError(f"no {name} is looked up for a page")


def _line_maker(sources: dict[str, tuple[str, dict[str, Any]]]) -> Callable[..., RunLogLine]:
    """`as_line`, made from each field's `_read`: one call, each field's expression in place."""
    names: dict[str, Any] = {"RunLogLine": RunLogLine, "_read_detail": read_detail}
    arguments = []
    for field, (expression, used) in sources.items():
        names.update(used)
        arguments.append(f"{field}={expression}")
    text = (
        "def as_line(r, c=None):\n"
        f"    return RunLogLine({', '.join(arguments)}, detail=_read_detail(r.kind, r.detail))\n"
    )
    exec(compile(text, "<RunLogLine from its fields' _read>", "exec"), names)  # noqa: S102
    made: Callable[..., RunLogLine] = names["as_line"]
    return made


# A stored line `r` (store.Line), with its cursor `c` if it has one, as a `RunLogLine`.
as_line = _line_maker(LINE_SOURCES)
