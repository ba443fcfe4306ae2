"""A run as GraphQL serves it: its row in `event_runs`, what holds it, its phases; and `runsInFlight`.

`read_runs` reads what holds every run a field answers with, and the runs their blocks
name, together; the runs are plain data, so a page selecting them stays on the
compiled plan (gql/api/execution/compiler.py).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
import json
from collections.abc import Collection, Mapping
from typing import Any

import strawberry
from sqlalchemy.ext.asyncio import AsyncEngine

from .. import store
from ..domain import holds
from ..domain.details import RunBlockedDetail
from ..domain.holds import HoldReason as _Reason
from ..domain.phases import Phase, spans
from ..ids import parse_id
from .page import RunLogLine, as_line

# The reasons, as declared in holds.py (mypy cannot type the functional Enum API, hence `Any`).
HoldReason: Any = strawberry.enum(  # type: ignore[call-overload]
    enum.Enum(
        "HoldReason",
        {
            reason.name: strawberry.enum_value(reason.name, description=reason.value.capitalize() + ".")
            for reason in _Reason
        },
    ),
    description="Why a run is not moving. What opens and ends each, per kind, is in docs/operating.md "
    '("What holds a run"). More may be added.',
)


@strawberry.type(description="One step of a phase, as its newest lines tell it.")
class RunStep:
    step_id: strawberry.ID = strawberry.field(description="The step's id.")
    status: str | None = strawberry.field(
        description="Its latest status: a `step.status` line's `to`, or `retrying`, `parked`, "
        "`refused` after a line of that kind; null when the step has no line yet."
    )
    attempts: int = strawberry.field(
        description="How many times the step was tried, as its lines tell: its `step.retry` "
        "lines' attempts (its newest), and one more when its newest line is a status past `pending`; "
        "0 for a step refused or never run."
    )
    at: datetime.datetime | None = strawberry.field(description="When its latest line was written (UTC).")


@strawberry.type(description="One phase of a run: when it was entered, gated, advanced and completed.")
class RunPhase:
    phase: int = strawberry.field(description="The phase's number.")
    entered_at: datetime.datetime | None = strawberry.field(
        description="Its `phase.entered` line's time (UTC)."
    )
    gated_at: datetime.datetime | None = strawberry.field(
        description="When its advance gate opened (`phase.gate`), if it has one (UTC)."
    )
    advanced_at: datetime.datetime | None = strawberry.field(
        description="When its gate let it through (`phase.advanced`, UTC)."
    )
    completed_at: datetime.datetime | None = strawberry.field(
        description="When every step of it reached a terminal status (`phase.completed`, UTC)."
    )
    steps: list[RunStep] = strawberry.field(
        description="Its steps: those its `phase.entered` named, and any other its lines name."
    )


@strawberry.type(description="A span of a run's timeline: a phase, or one state of one step.")
class RunSpan:
    phase: int | None = strawberry.field(description="The phase: the span's, or its step line's.")
    step_id: strawberry.ID | None = strawberry.field(description="The step; null for a phase's span.")
    state: str = strawberry.field(
        description="In lower case: a step's `parked`, `refused`, `retrying`, or its status from "
        "`step.status`; a phase's `entered` (while it has not completed) or `completed`."
    )
    from_: datetime.datetime = strawberry.field(
        name="from", description="When it began: the line that put it there (UTC)."
    )
    until: datetime.datetime | None = strawberry.field(
        description="When the next line moved it on (a phase: its `phase.completed`); null while it lasts."
    )


@strawberry.type(
    description="One thing holding a run, with the lines it rests on. Facts a reason does not have are null."
)
class RunHold:
    reason: HoldReason = strawberry.field(description="Why the run is held.")
    since: datetime.datetime = strawberry.field(
        description="When the hold began: its first line's time (UTC)."
    )
    sentence: str = strawberry.field(
        description="One plain sentence an operator can read aloud (`Blocked by run 37, which holds "
        "invasion:Yew and is still live.`)."
    )
    certain: bool = strawberry.field(
        description="False when the log cannot tell whether the hold still stands: its newest line "
        "cannot be read, a later line that would end it cannot say what it concerns, or the blocking run "
        "no longer exists or has ended since. The sentence then says so, in words."
    )
    phase: int | None = strawberry.field(
        description="The phase it concerns (a gate's: the phase its `phase.gate` names)."
    )
    step_id: strawberry.ID | None = strawberry.field(description="The step it concerns.")
    held_for_seconds: int = strawberry.field(
        description="How long the hold has lasted, in whole seconds: from `since` to the time of the answer."
    )
    evidence: list[RunLogLine] = strawberry.field(
        description="The lines it rests on, oldest first: its first line and up to four newest (a gate's, "
        "then its three newest evaluations); each `cursor` (read with every kind) opens `runLog` there."
    )
    blocking_run_id: strawberry.ID | None = strawberry.field(
        description="`BLOCKED_BY_RUN`: the run that holds the key."
    )
    blocking_run: Run | None = strawberry.field(
        description="`BLOCKED_BY_RUN`: that run as it is now, with its own holds (the chain); null when "
        "the events system no longer has it."
    )
    concurrency_key: str | None = strawberry.field(description="`BLOCKED_BY_RUN`: the key both runs need.")
    condition: str | None = strawberry.field(
        description="`WAITING_AT_GATE`: what the gate waits for. `STEP_REFUSED`: the cap or the switch."
    )
    deadline: datetime.datetime | None = strawberry.field(
        description="`WAITING_AT_GATE`: when the gate opens by itself."
    )
    evaluations: int | None = strawberry.field(
        description="`WAITING_AT_GATE`: firings tested against the gate since it opened, every one counted."
    )
    matched: int | None = strawberry.field(
        description="`WAITING_AT_GATE`: how many of them matched; null when there are more than 20, or "
        "one cannot be read."
    )
    latest_mismatch: str | None = strawberry.field(
        description="`WAITING_AT_GATE`: what the latest firing that did not match was told."
    )
    attempt: int | None = strawberry.field(
        description="`STEP_RETRYING`: the attempt that failed. `CLEANUP_FAILED`: the newest "
        "failure's attempt."
    )
    max_attempts: int | None = strawberry.field(
        description="`STEP_RETRYING`: how many attempts the step gets."
    )
    retry_at: datetime.datetime | None = strawberry.field(
        description="`STEP_RETRYING`: when the next attempt is due."
    )
    waiting_for: str | None = strawberry.field(
        description="`STEP_PARKED`: what the step needs a human to do."
    )
    refusal: str | None = strawberry.field(description="`STEP_REFUSED`: `DISABLED` or `OVER_CAP`.")
    group: str | None = strawberry.field(description="`CLEANUP_FAILED`: the group that did not come back.")
    error: str | None = strawberry.field(description="`STEP_RETRYING`, `CLEANUP_FAILED`: the error reported.")
    # Bytes of its sentence and its evidence's stored details: what it costs the request's
    # RUNLOG_MAX_PAGE_BYTES (run_log.served_bytes).
    weight: strawberry.Private[int] = 0


@strawberry.type(description="A run as the events system has it now (table `event_runs`), and what holds it.")
class Run:
    id: strawberry.ID = strawberry.field(description="The run's id; pass it to `runLog`.")
    status: str = strawberry.field(description="The run's status now (`live`, `completed`, ...).")
    terminal: bool = strawberry.field(
        description="Whether the status is terminal (completed, cancelled, failed, missed, matched "
        "exactly): only a terminal run's lines can be pruned."
    )
    ended_at: datetime.datetime | None = strawberry.field(description="When the run ended (UTC), if it has.")
    updated_at: datetime.datetime | None = strawberry.field(
        description="When the run's row last changed (UTC)."
    )
    holds: list[RunHold] = strawberry.field(
        default_factory=list,
        description='What holds the run now, derived from its own lines (docs/operating.md, "What '
        'holds a run"); empty when nothing in the log holds it. A finished run is held only by what '
        "outlives it (a cleanup that failed).",
    )
    headline: str = strawberry.field(
        default="",
        description="The one sentence that answers \"why isn't it moving?\": the first hold's, or that "
        "nothing in the log holds it, or that the log cannot tell. It never guesses.",
    )
    phases: list[RunPhase] = strawberry.field(
        default_factory=list,
        description="The run's phases, by number, as its phase lines tell them, each with its steps (a "
        "step under the phase of its newest step line). Reads every step's newest line.",
    )
    timeline: list[RunSpan] = strawberry.field(
        default_factory=list,
        description="Spans drawn from the run's lines: each phase from its `phase.entered` to its "
        "`phase.completed`, and each state of each step from the line that put it there to the line "
        "that moved it on, in the order they began. Reads every step line of the run.",
    )
    last_line_at: datetime.datetime | None = strawberry.field(
        default=None, description="The `at` of the run's newest line (UTC); null for a run with none."
    )
    latest_phase: int | None = strawberry.field(
        default=None,
        description="The phase entered last: its `phase.entered` is the newest (by `at`, then `id`); "
        "null before the first.",
    )


@strawberry.type(description="Where a page of runs ends, and whether more follow.")
class RunsPageInfo:
    has_next_page: bool = strawberry.field(description="Whether more runs follow this page.")
    end_cursor: str | None = strawberry.field(
        description="Pass as `after` for the next page; null on an empty page."
    )


@strawberry.type(description="A page of runs, newest activity first.")
class RunsPage:
    nodes: list[Run] = strawberry.field(description="The runs.")
    page_info: RunsPageInfo = strawberry.field(description="Where the page ends.")


def as_run(row: store.Run) -> Run:
    """A run's row as the `Run` GraphQL serves."""
    return Run(
        id=strawberry.ID(str(row.id)),
        status=row.status,
        terminal=holds.is_terminal(row.status),
        ended_at=row.ended_at,
        updated_at=row.updated_at,
    )


# ── reading ──────────────────────────────────────────────────────────────────

# How many runs deep a chain of blocks is followed; a run past it says so.
MAX_CHAIN = 8


async def read_states(
    engine: AsyncEngine,
    rows: Mapping[int, store.Run | None],
    *,
    phases: bool = False,
    timeline: bool = False,
    unread: Collection[int] = (),
) -> tuple[dict[int, store.Run], dict[int, holds.State]]:
    """What holds each run of `rows` (None: a run the events system does not have), and the runs
    their blocks name, by id: their rows, and the state of each whose log was read.

    `unread`: runs whose rows are read with their lines; one the events system does not have is
    left out. One statement per link of a chain of blocks (each run's row and lines together), and
    one for the open holds' lines, never a statement per run. `phases`: each run's steps are read
    too (every step line of the run).
    """
    found = {run_id: row for run_id, row in rows.items() if row is not None}
    planned: dict[int, holds.Planned] = {}
    looked_up = {i for i in unread if i not in rows and 0 < i <= store.LINE_ID_MAX}
    step_lines: dict[int, list[store.Line]] = {}
    todo = sorted({*rows, *looked_up})
    for link in range(MAX_CHAIN):
        if not todo:
            break
        read = await store.read_hold_lines(engine, todo)
        found.update({i: row for i in todo if i in looked_up and (row := read[i].run) is not None})
        todo = [i for i in todo if i in rows or i in found]  # a run looked up and not found: no state
        if timeline and link == 0:
            # A timeline reads every step line of the runs asked: their steps' newest come from those.
            step_lines = {run_id: await store.read_step_lines(engine, run_id) for run_id in todo}
        if phases:
            for run_id in todo:
                if run_id in step_lines:
                    store.take_steps(read[run_id], step_lines[run_id])
            await store.read_steps(
                engine, {run_id: read[run_id] for run_id in todo if run_id not in step_lines}
            )
        planned.update({run_id: holds.plan(run_id, read[run_id]) for run_id in todo})
        named = set().union(*(planned[run_id].blocking_ids(found.get(run_id)) for run_id in todo))
        todo = sorted(i for i in named - looked_up - set(rows) if 0 < i <= store.LINE_ID_MAX)
        looked_up.update(todo)
    trails, gates = [], []
    for told in planned.values():
        trails += told.trails
        gates += told.gates
    trailed, evaluated = await store.read_trails(engine, trails, gates) if trails or gates else ({}, {})
    # Told in the headline, beside the holds: the steps of the current phase with no line yet.
    current = {
        run_id: told.named for run_id, told in planned.items() if told.named and (told.holds or told.trails)
    }
    silent = await store.read_silent(engine, current) if current else {}
    now = datetime.datetime.now(datetime.UTC)
    newest = {run_id: told.lines.newest for run_id, told in planned.items()}
    states = {
        run_id: holds.derive(
            run_id,
            found.get(run_id),
            told,
            trailed,
            evaluated,
            found,
            silent.get(run_id, frozenset()),
            now=now,
            newest=newest,
        )
        for run_id, told in planned.items()
    }
    for run_id, lines in step_lines.items():
        told = planned[run_id]
        states[run_id].timeline = spans(told.lines.marks, lines, told.values)
    return found, states


async def read_runs(
    engine: AsyncEngine,
    rows: Mapping[int, store.Run],
    *,
    phases: bool = False,
    timeline: bool = False,
    unread: Collection[int] = (),
) -> dict[int, Run]:
    """`rows` (and of `unread`, those the events system has) as `Run`s with what holds each
    (`read_states`), and the runs their blocks name, by id."""
    found, states = await read_states(engine, rows, phases=phases, timeline=timeline, unread=unread)
    runs = {run_id: as_run(row) for run_id, row in found.items()}
    for run_id, run in runs.items():
        state = states.get(run_id)
        if state is None:
            run.headline = (
                f"Run {run_id} ends a chain of blocks longer than {MAX_CHAIN} runs: its log was not read."
            )
            continue
        run.holds = [_as_hold(run_id, hold, runs) for hold in state.holds]
        run.headline = state.headline
        run.phases = [_as_phase(phase) for phase in state.phases] if phases else []
        run.latest_phase = state.latest_phase
        run.last_line_at = state.last_line_at
        run.timeline = [
            RunSpan(
                phase=span.phase,
                step_id=None if span.step_id is None else strawberry.ID(span.step_id),
                state=span.state,
                from_=span.start,
                until=span.until,
            )
            for span in state.timeline
        ]
    return runs


def _as_hold(run_id: int, hold: holds.Hold, runs: dict[int, Run]) -> RunHold:
    scope = store.cursor_scope(run_id, None)
    evidence = [as_line(line, store.encode_cursor(line, scope)) for line in hold.evidence]
    for line in evidence:
        if type(line.detail) is RunBlockedDetail:  # as a page's blocked line has it (page.RunLogPage)
            number = parse_id(line.detail.blocking_run_id)
            line.detail.blocking_run = None if number is None else runs.get(number)
    return RunHold(
        reason=HoldReason[hold.reason.name],
        since=hold.since,
        sentence=hold.sentence,
        certain=hold.certain,
        phase=hold.phase,
        step_id=None if hold.step_id is None else strawberry.ID(hold.step_id),
        held_for_seconds=int(hold.lasted.total_seconds()),
        evidence=evidence,
        blocking_run_id=None if hold.blocking_run_id is None else strawberry.ID(str(hold.blocking_run_id)),
        blocking_run=None if hold.blocking_run_id is None else runs.get(hold.blocking_run_id),
        concurrency_key=hold.concurrency_key,
        condition=hold.condition,
        deadline=hold.deadline,
        evaluations=hold.evaluations,
        matched=hold.matched,
        latest_mismatch=hold.mismatch,
        attempt=hold.attempt,
        max_attempts=hold.max_attempts,
        retry_at=hold.retry_at,
        waiting_for=hold.waiting_for,
        refusal=hold.refusal,
        group=hold.group,
        error=hold.error,
        weight=len(hold.sentence)
        + sum(len(line.detail) for line in hold.evidence if line.detail is not None),
    )


def _as_phase(phase: Phase) -> RunPhase:
    return RunPhase(
        phase=phase.phase,
        entered_at=phase.entered_at,
        gated_at=phase.gated_at,
        advanced_at=phase.advanced_at,
        completed_at=phase.completed_at,
        steps=[
            RunStep(
                step_id=strawberry.ID(step.step_id), status=step.status, attempts=step.attempts, at=step.at
            )
            for step in phase.steps.values()
        ],
    )


# ── runsInFlight ─────────────────────────────────────────────────────────────

_CURSOR_PREFIX = "runs:"  # a runsInFlight cursor: (activity, run id), opaque


def encode_cursor(activity: str | None, run_id: int) -> str:
    text = json.dumps([activity, run_id], separators=(",", ":"))
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str | None, int] | None:
    if not cursor.startswith(_CURSOR_PREFIX) or len(cursor) > 200:
        return None
    raw = cursor[len(_CURSOR_PREFIX) :]
    try:
        activity, run_id = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if activity is not None:
            datetime.datetime.fromisoformat(activity)
    except (binascii.Error, ValueError, TypeError):
        return None
    if type(run_id) is not int or not (activity is None or type(activity) is str):
        return None
    return activity, run_id
