"""What holds a run: per kind, what opens a hold and what ends it; and the pure derivation from lines.

`RULES` is the one table of them (docs/operating.md's "What holds a run" is checked
against it by tests/test_holds.py); a kind not in it is not read. `plan` says what a run's
`store.HoldLines` leave open and what is left to read (`store.read_trails`); `derive` is then
a pure function of those lines, the run's row and the runs its block names.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kinds import TERMINAL_STATUSES, Kind
from ..store import Evaluations, HoldLines, Line, Run, Trail
from ..store.newest import TAIL
from .detail_codec import read_values
from .phases import Phase, named_steps
from .phases import phases as read_phases
from .phrasing import as_time, cap_words, excerpt, how_long, iso


class HoldReason(enum.Enum):
    """Why a run is not moving, most pressing first; its value is how the docs name it."""

    BLOCKED_BY_RUN = "another run holds the run's concurrency key"
    WAITING_AT_GATE = "a phase waits at its advance gate"
    STEP_PARKED = "a step waits on a human"
    STEP_RETRYING = "a step failed transiently and waits for its next attempt"
    STEP_REFUSED = "a step was not permitted (disabled, or over a cap)"
    CLEANUP_FAILED = "a cleanup group did not come back"


# What outlives its run: a finished run is held by nothing else.
OUTLIVES_THE_RUN = frozenset({HoldReason.CLEANUP_FAILED})
STEP_HOLDS = frozenset({HoldReason.STEP_PARKED, HoldReason.STEP_RETRYING, HoldReason.STEP_REFUSED})


@dataclass(frozen=True)
class Rule:
    """What a line of one kind does to a run's holds."""

    on: str  # what it concerns: "run", "phase" (the line's phase), "step" (its step), "group" (its detail's)
    opens: HoldReason | None = None
    ends: frozenset[HoldReason] = frozenset()
    facts: bool = False  # read for the facts of another kind's hold (a gate's evaluations)


_S = STEP_HOLDS
# The rules as docs/operating.md states them; gql/store/newest.py reads the lines they name.
RULES: dict[Kind, Rule] = {
    Kind.RUN_BLOCKED: Rule("run", opens=HoldReason.BLOCKED_BY_RUN),
    # A later status: the run started, or ended; either way the block and the gate are over.
    Kind.RUN_STATUS: Rule("run", ends=frozenset({HoldReason.BLOCKED_BY_RUN, HoldReason.WAITING_AT_GATE})),
    Kind.PHASE_GATE: Rule("phase", opens=HoldReason.WAITING_AT_GATE),
    Kind.CONDITION_EVALUATED: Rule("phase", facts=True),
    Kind.PHASE_ADVANCED: Rule("phase", ends=frozenset({HoldReason.WAITING_AT_GATE})),
    Kind.PHASE_ENTERED: Rule("phase", ends=frozenset({HoldReason.WAITING_AT_GATE})),
    # A newer line about a step replaces what an older one said of it.
    Kind.STEP_PARKED: Rule("step", opens=HoldReason.STEP_PARKED, ends=_S - {HoldReason.STEP_PARKED}),
    Kind.STEP_RETRY: Rule("step", opens=HoldReason.STEP_RETRYING, ends=_S - {HoldReason.STEP_RETRYING}),
    Kind.STEP_REFUSED: Rule("step", opens=HoldReason.STEP_REFUSED, ends=_S - {HoldReason.STEP_REFUSED}),
    Kind.STEP_STATUS: Rule("step", ends=_S),
    # Every step of the phase reached a terminal status: none of them holds it.
    Kind.PHASE_COMPLETED: Rule("phase", ends=_S),
    Kind.CLEANUP_FAILED: Rule("group", opens=HoldReason.CLEANUP_FAILED),
    Kind.CLEANUP_REVERTED: Rule("group", ends=frozenset({HoldReason.CLEANUP_FAILED})),
}
_OPENS: dict[str, str] = {
    kind.value: rule.opens.name for kind, rule in RULES.items() if rule.opens is not None
}
_STEP_OPENS = frozenset(kind.value for kind, rule in RULES.items() if rule.on == "step" and rule.opens)
_STATUS, _GATE, _COMPLETED = Kind.RUN_STATUS.value, Kind.PHASE_GATE.value, Kind.PHASE_COMPLETED.value
_ENTERED, _ADVANCED = Kind.PHASE_ENTERED.value, Kind.PHASE_ADVANCED.value
_GATE_ENDERS = frozenset({_ENTERED, _ADVANCED})
_FAILED, _REVERTED = Kind.CLEANUP_FAILED.value, Kind.CLEANUP_REVERTED.value
# The order holds are listed in, and the headline told from: HoldReason's, declared most pressing first.
_ORDER = list(HoldReason)
SILENT_STEPS_MAX = 100  # the most steps of a phase the headline looks through for one with no line
QUIET = datetime.timedelta(minutes=10)  # a blocking run silent this long is said to have gone quiet


def is_terminal(status: str) -> bool:
    """Whether a run's status is terminal: matched exactly, byte for byte (`Completed` is not)."""
    return status in TERMINAL_STATUSES


# ── what derivation answers ─────────────────────────────────────────────────


@dataclass
class Hold:
    """One thing holding a run, with the lines it rests on (oldest first)."""

    reason: HoldReason
    since: datetime.datetime
    sentence: str
    evidence: list[Line]
    phase: int | None = None
    step_id: str | None = None
    certain: bool = True  # False: the log cannot tell whether it still holds
    doubt: str | None = None  # why not, in words the sentence ends with
    lines: int = 0  # how many lines opened it
    lasted: datetime.timedelta = datetime.timedelta(0)  # from `since` to the time of the answer
    blocking_run_id: int | None = None
    concurrency_key: str | None = None
    condition: str | None = None
    deadline: datetime.datetime | None = None
    evaluations: int | None = None
    matched: int | None = None
    mismatch: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    retry_at: datetime.datetime | None = None
    waiting_for: str | None = None
    refusal: str | None = None
    group: str | None = None
    error: str | None = None


@dataclass
class State:
    """A run's holds, headline and phases, as its lines tell them."""

    holds: list[Hold]
    headline: str
    phases: list[Phase]
    latest_phase: int | None  # the phase entered last (by at, then id)
    last_line_at: datetime.datetime | None = None  # its newest line's `at`; None with no line
    timeline: list[Any] = field(default_factory=list)  # timeline.Span, when asked


# ── derivation ───────────────────────────────────────────────────────────────


def _values(line: Line) -> dict[str, Any] | None:
    """A line's detail values by Python field name; None when it has none or it cannot be read."""
    values = read_values(line.kind, line.detail)
    return values if type(values) is dict else None


@dataclass
class Planned:
    """What a run's `HoldLines` leave open, before its trails and the runs its block names are read."""

    lines: HoldLines
    holds: list[tuple[HoldReason, list[Line], Any]] = field(default_factory=list)  # reason, lines, subject
    trails: list[Trail] = field(default_factory=list)  # the open steps' holds, to be read
    gates: list[Evaluations] = field(default_factory=list)  # the open gates' evaluations, to be read
    details: dict[int, dict[str, Any] | None] = field(default_factory=dict)  # by line id, as read
    named: tuple[int, ...] = ()  # the steps the open latest phase names; () past SILENT_STEPS_MAX

    def values(self, line: Line) -> dict[str, Any] | None:
        """`line`'s detail values, read the first time they are asked for (most lines' never are)."""
        details = self.details
        if line.id in details:
            return details[line.id]
        values = details[line.id] = _values(line)
        return values

    def blocking_ids(self, run: Run | None) -> set[int]:
        """The run the block names, if one is open (none when `run` is terminal): for `derive` to look up."""
        if run is not None and is_terminal(run.status):
            return set()
        found = set()
        for reason, held, _ in self.holds:
            if reason is HoldReason.BLOCKED_BY_RUN:
                values = self.values(held[-1])
                if values is not None:
                    with contextlib.suppress(TypeError, ValueError):
                        found.add(int(values["blocking_run_id"]))
        return found


def _before(a: Line, b: Line) -> bool:
    return (a.at, a.id) < (b.at, b.id)


def plan(run_id: int, lines: HoldLines) -> Planned:
    """What `lines` leave open (docs/operating.md, "What holds a run"), and what is left to read of it."""
    told = Planned(lines)
    gates: dict[Any, list[Line]] = {}
    cleanups: dict[Any, list[Line]] = {}
    completed: dict[Any, Line] = {}  # each phase's newest phase.completed
    for line in lines.marks:
        kind = line.kind
        if kind == _STATUS:
            gates.clear()
        elif kind == _GATE:
            gates.setdefault(line.phase, []).append(line)
        elif kind in _GATE_ENDERS:
            gates.pop(line.phase, None)
        elif kind == _COMPLETED:
            completed[line.phase] = line
        else:
            group = (told.values(line) or {}).get("group")
            if kind == _FAILED:
                cleanups.setdefault(group, []).append(line)
            else:
                cleanups.pop(group, None)
    if lines.blocked:
        told.holds.append((HoldReason.BLOCKED_BY_RUN, lines.blocked, "run"))
    for phase, held in gates.items():
        told.holds.append((HoldReason.WAITING_AT_GATE, held, phase))
        told.gates.append(Evaluations(run_id, phase, held[0]))
    for step, held in lines.steps.items():
        told.holds.append((HoldReason[_OPENS[held[-1].kind]], held, str(step)))
    unstepped = lines.no_step
    if unstepped is not None and unstepped.kind in _STEP_OPENS:
        ended = completed.get(unstepped.phase)
        if ended is None or _before(ended, unstepped):  # else its phase completed after it: no hold
            told.trails.append(Trail(run_id, unstepped.kind, ended))
    for group, held in cleanups.items():
        told.holds.append((HoldReason.CLEANUP_FAILED, held, group))
    entered = [line for line in lines.marks if line.kind == _ENTERED and line.phase is not None]
    if entered and completed.get(entered[-1].phase) is None:
        with contextlib.suppress(TypeError, ValueError):
            named = (told.values(entered[-1]) or {}).get("step_ids") or ()
            if len(named) <= SILENT_STEPS_MAX:
                told.named = tuple(int(step) for step in named)
    return told


def _unsure(told: Planned) -> list[tuple[frozenset[HoldReason], Line]]:
    """The lines that end a reason's holds but cannot say which: each may have ended any opened before it."""
    found = []
    for line in told.lines.marks:
        if line.kind in (_ENTERED, _ADVANCED) and line.phase is None:
            found.append((frozenset({HoldReason.WAITING_AT_GATE}), line))
        elif line.kind == _COMPLETED and line.phase is None:
            found.append((STEP_HOLDS, line))
        elif line.kind == _REVERTED and (told.values(line) or {}).get("group") is None:
            found.append((frozenset({HoldReason.CLEANUP_FAILED}), line))
    if told.lines.no_step is not None:
        found.append((STEP_HOLDS, told.lines.no_step))
    return found


def derive(
    run_id: int,
    run: Run | None,
    told: Planned,
    trails: Mapping[Trail, list[Line]],
    evaluations: Mapping[Evaluations, tuple[list[Line], int]],
    runs: Mapping[int, Run],
    silent: frozenset[str] = frozenset(),
    *,
    now: datetime.datetime | None = None,
    newest: Mapping[int, Line | None] | None = None,
) -> State:
    """What holds run `run_id`, from its row (None: the events system has none) and what was read of it.

    `trails` and `evaluations`: `store.read_trails`' answers to `told.trails` and `told.gates`;
    `runs`: the runs `told.blocking_ids` names (one missing no longer exists); `silent`: of
    `told.named`, the steps with no step line; `now`: the time the answer is for (how long each
    hold has lasted); `newest`: the newest line of each run read (a blocker gone quiet says so).
    """
    now = now or datetime.datetime.now(datetime.UTC)
    opened = list(told.holds)
    for trail in told.trails:
        held = trails.get(trail) or []
        if held:
            reason = HoldReason[_OPENS[trail.kind]]
            opened.append((reason, held, None))
    terminal = run is not None and is_terminal(run.status)
    unsure = _unsure(told)
    holds = []
    for reason, held, subject in opened:
        if terminal and reason not in OUTLIVES_THE_RUN:
            continue
        hold = _opened(reason, held, told.values(held[-1]), subject)
        if any(
            reason in ends and _before(held[0], line) and not _same_subject(reason, line, subject, told)
            for ends, line in unsure
        ):
            hold.certain = False
            hold.doubt = "a later line that cannot say what it concerns may have ended it"
        if reason is HoldReason.WAITING_AT_GATE:
            _gate_facts(
                hold, *evaluations.get(Evaluations(run_id, hold.phase, held[0]), ([], 0)), told.values
            )
        hold.lasted = max(now - hold.since, datetime.timedelta(0))
        holds.append(_finish(hold, runs, now, newest or {}))
    holds.sort(key=lambda hold: (_ORDER.index(hold.reason), hold.since))
    phases = read_phases(told.lines.marks, told.lines.all_steps, told.lines.retries, told.values)
    latest = _latest_entered(told.lines.marks)
    return State(
        holds=holds,
        headline=_headline(run_id, run, told.lines.newest, holds, phases, latest, _listed(silent, told)),
        phases=phases,
        latest_phase=latest,
        last_line_at=None if told.lines.newest is None else told.lines.newest.at,
    )


def _listed(silent: frozenset[str], told: Planned) -> list[str]:
    order = list(named_steps(told.lines.marks, told.values)) if silent else []  # as its phase lists them
    return sorted((step for step in silent if step in order), key=order.index)


def _same_subject(reason: HoldReason, line: Line, subject: Any, told: Planned) -> bool:
    """Whether an unsure line is about the hold's own subject (then it ended it, or it is not unsure)."""
    if reason in STEP_HOLDS:
        return subject is None and line.step_id is None and line.kind.startswith("step.")
    return subject is None


def _latest_entered(marks: Sequence[Line]) -> int | None:
    """The phase of the newest `phase.entered`: None before the first, or when that line names none."""
    return next((line.phase for line in reversed(marks) if line.kind == _ENTERED), None)


def _evidence(lines: list[Line]) -> list[Line]:
    """A hold's oldest line and its newest few, oldest first."""
    if len(lines) <= 1 + TAIL:
        return list(lines)
    return [lines[0], *lines[-TAIL:]]


def _opened(reason: HoldReason, lines: list[Line], values: dict[str, Any] | None, subject: Any) -> Hold:
    """The hold `lines` opened (oldest first), since its first, told by its newest (`values`)."""
    line = lines[-1]
    hold = Hold(reason=reason, since=lines[0].at, sentence="", evidence=_evidence(lines), phase=line.phase)
    hold.step_id = None if line.step_id is None else str(line.step_id)
    hold.lines = len(lines)
    v = values or {}
    if values is None and line.detail is not None:
        hold.certain, hold.doubt = False, "its newest line cannot be read"
    if reason is HoldReason.BLOCKED_BY_RUN:
        try:
            hold.blocking_run_id = int(v["blocking_run_id"])
        except (KeyError, TypeError, ValueError):
            hold.certain, hold.doubt = False, "its newest line cannot be read"
        hold.concurrency_key = v.get("concurrency_key")
    elif reason is HoldReason.WAITING_AT_GATE:
        hold.condition, hold.deadline = v.get("condition"), as_time(v.get("deadline"))
    elif reason is HoldReason.STEP_RETRYING:
        hold.attempt, hold.max_attempts = v.get("attempt"), v.get("max_attempts")
        hold.retry_at, hold.error = as_time(v.get("retry_at")), v.get("error")
    elif reason is HoldReason.STEP_PARKED:
        hold.waiting_for = v.get("waiting_for")
    elif reason is HoldReason.STEP_REFUSED:
        refusal = v.get("refusal")
        hold.refusal = getattr(refusal, "value", refusal)
        hold.condition = cap_words(v) if hold.refusal == "OVER_CAP" else v.get("switch")
    elif reason is HoldReason.CLEANUP_FAILED:
        hold.group, hold.error = subject, v.get("error")
        hold.attempt = v.get("attempt")
    return hold


def _gate_facts(
    hold: Hold, read: list[Line], total: int, values_of: Callable[[Line], dict[str, Any] | None]
) -> None:
    """A gate's evaluations since it opened: how many (`total`), the newest `read`, what they say."""
    values = [values_of(line) for line in read]
    hold.evaluations = total
    if len(read) == total and all(v is not None for v in values):
        hold.matched = sum(1 for v in values if v and v.get("matched"))
    for v in reversed(values):
        if v is not None and not v.get("matched") and v.get("mismatch"):
            hold.mismatch = v["mismatch"]
            break
    hold.evidence += read[-3:]


def _finish(
    hold: Hold, runs: Mapping[int, Run], now: datetime.datetime, newest: Mapping[int, Line | None]
) -> Hold:
    """The hold with its sentence, and what the runs its block names say of it (`newest`: their lines)."""
    step = f"Step {hold.step_id}" if hold.step_id is not None else "A step with no id"
    if hold.reason is HoldReason.BLOCKED_BY_RUN:
        key = (
            f" holds {excerpt(hold.concurrency_key)}"
            if hold.concurrency_key
            else " holds the run's concurrency key"
        )
        blocker = None if hold.blocking_run_id is None else runs.get(hold.blocking_run_id)
        if hold.blocking_run_id is None:
            hold.sentence = "Blocked by another run, but the line cannot be read: the log cannot tell which."
            return hold
        if blocker is None:
            hold.certain = False
            hold.sentence = (
                f"Blocked by run {hold.blocking_run_id}, which{key}; the events system no longer has "
                f"run {hold.blocking_run_id}, so the log cannot tell whether it still holds."
            )
            return hold
        if is_terminal(blocker.status):
            hold.certain = False
            ended = f" at {iso(blocker.ended_at)}" if blocker.ended_at else ""
            hold.sentence = (
                f"Blocked by run {blocker.id}, which{key}; run {blocker.id} has since ended "
                f"({blocker.status}{ended}), and no later line says this run started: the log cannot "
                "tell whether it still waits."
            )
            return hold
        hold.sentence = f"Blocked by run {blocker.id}, which{key} and is still {blocker.status or 'unended'}"
        last = newest.get(blocker.id)  # None: its log has no line, or was not read
        if last is not None and now - last.at >= QUIET:
            hold.sentence += f"; run {blocker.id} has written nothing for {how_long(now - last.at)}"
        hold.sentence += "."
    elif hold.reason is HoldReason.WAITING_AT_GATE:
        waits = f"for {excerpt(hold.condition)}" if hold.condition else "at its gate"
        deadline = f" (deadline {iso(hold.deadline)})" if hold.deadline else ""
        count = hold.evaluations or 0
        counted = f"{count} evaluation{'s' * (count != 1)} since it opened"
        latest = f"; the latest: {excerpt(hold.mismatch)}" if hold.mismatch else ""
        hold.sentence = f"Phase {hold.phase} waits {waits}{deadline}: {counted}{latest}."
    elif hold.reason is HoldReason.STEP_PARKED:
        why = excerpt(hold.waiting_for) if hold.waiting_for else "the line does not say for what"
        hold.sentence = f"{step} waits on a human: {why}."
    elif hold.reason is HoldReason.STEP_RETRYING:
        of = f" of {hold.max_attempts}" if hold.max_attempts else ""
        when = f", next attempt at {iso(hold.retry_at)}" if hold.retry_at else ""
        failed = f"attempt {hold.attempt}{of} failed" if hold.attempt else "an attempt failed"
        hold.sentence = f"{step} is retrying: {failed}{when}."
    elif hold.reason is HoldReason.STEP_REFUSED:
        refused = {
            "OVER_CAP": f"over {hold.condition}",
            "DISABLED": f"disabled by the switch {hold.condition}",
        }
        words = refused.get(hold.refusal or "", "not permitted") if hold.condition else "not permitted"
        hold.sentence = f"{step} was refused: {excerpt(words)}."
    elif hold.reason is HoldReason.CLEANUP_FAILED:
        group = f"Cleanup group {excerpt(hold.group)}" if hold.group else "A cleanup group"
        times = f" ({hold.lines} failures)" if hold.lines > 1 else ""
        error = excerpt(hold.error) if hold.error else "the line does not say why"
        hold.sentence = f"{group} did not come back{times}: {error}."
    else:  # a reason declared since: said as the docs name it
        hold.sentence = f"{hold.reason.value.capitalize()}."
    if not hold.certain:
        doubt = hold.doubt or "a line it rests on cannot be read"
        hold.sentence = f"{hold.sentence[:-1]}; but {doubt}, so the log cannot tell whether it still holds."
    return hold


def _headline(
    run_id: int,
    run: Run | None,
    newest: Line | None,
    holds: list[Hold],
    phases: list[Phase],
    latest: int | None,
    silent: list[str],
) -> str:
    """The one sentence that answers "why isn't it moving?"; it never guesses."""
    if run is not None and is_terminal(run.status):
        ended = f"Run {run_id} ended: {run.status}"
        if run.ended_at is not None:
            ended += f" at {iso(run.ended_at)}"
        if not holds:
            return f"{ended}; nothing it left holds it."
        return f"{ended}; still open: {_told(holds)}"
    if newest is None:
        if run is None:
            return f"The events system has no run {run_id}, and its log has no line that says what holds it."
        status = run.status or "without a status"
        return f"Run {run_id} is {status}, and its log has no line: the log cannot tell what holds it."
    if not holds:
        status = "unknown to the events system" if run is None else (run.status or "without a status")
        where = "" if latest is None else f"; phase {latest} is the latest entered"
        return f"Nothing in the log holds run {run_id} (status {status}{where})."
    told = _told(holds)
    current = next((phase for phase in phases if phase.phase == latest), None)
    if current is None or current.completed_at is not None:
        return told
    # The phase entered last has not completed: that is why the next cannot start.
    later = sorted(phase.phase for phase in phases if phase.phase > current.phase)
    if later:  # a later phase the log names
        waiting = f"Phase {later[0]} cannot start: phase {current.phase} has not completed;"
    else:
        waiting = f"Phase {current.phase} has not completed, so the next phase cannot start:"
    quiet = ""
    if silent:
        which = f"step {silent[0]} has" if len(silent) == 1 else f"steps {', '.join(silent)} have"
        quiet = f" Apart from the holds, {which} no line yet in phase {current.phase}."
    return f"{waiting} {told[0].lower()}{told[1:]}{quiet}"


def _told(holds: list[Hold]) -> str:
    more = len(holds) - 1
    return holds[0].sentence + (f" And {more} more hold{'s' * (more > 1)}." if more else "")


def rules_table() -> str:
    """RULES as the Markdown table docs/operating.md shows (tests/test_holds.py checks it is there)."""
    rows = [
        "| kind | concerns | opens | ends |",
        "| --- | --- | --- | --- |",
    ]
    for kind, rule in RULES.items():
        opens = f"`{rule.opens.name}`" if rule.opens else ("facts of the gate" if rule.facts else "")
        ends = ", ".join(f"`{reason.name}`" for reason in _ORDER if reason in rule.ends)
        rows.append(f"| `{kind.value}` | the {rule.on} | {opens} | {ends} |")
    return "\n".join(rows) + "\n"
