"""What holds a run: per kind, what opens a hold and what ends it; and the pure derivation from lines.

`RULES` is the one table of them (docs/operating.md's "What holds a run" is checked
against it by tests/test_holds.py); a kind not in it is not read. `derive` is a pure
function of a run's row, what its lines `opened` and the runs their blocks name.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .detail_codec import read_values
from .kinds import TERMINAL_STATUSES, Kind
from .store import Line, Run


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
    reach: int  # how many of the kind's newest lines a run's holds read
    opens: HoldReason | None = None
    ends: frozenset[HoldReason] = frozenset()
    facts: bool = False  # read for the facts of another kind's hold (a gate's evaluations)


_S = STEP_HOLDS
RULES: dict[Kind, Rule] = {
    Kind.RUN_BLOCKED: Rule("run", 10, opens=HoldReason.BLOCKED_BY_RUN),
    # A later status: the run started, or ended; either way the block and the gate are over.
    Kind.RUN_STATUS: Rule("run", 1, ends=frozenset({HoldReason.BLOCKED_BY_RUN, HoldReason.WAITING_AT_GATE})),
    Kind.PHASE_GATE: Rule("phase", 10, opens=HoldReason.WAITING_AT_GATE),
    Kind.CONDITION_EVALUATED: Rule("phase", 20, facts=True),
    Kind.PHASE_ADVANCED: Rule("phase", 10, ends=frozenset({HoldReason.WAITING_AT_GATE})),
    Kind.PHASE_ENTERED: Rule("phase", 10, ends=frozenset({HoldReason.WAITING_AT_GATE})),
    # A newer line about a step replaces what an older one said of it.
    Kind.STEP_PARKED: Rule("step", 10, opens=HoldReason.STEP_PARKED, ends=_S - {HoldReason.STEP_PARKED}),
    Kind.STEP_RETRY: Rule("step", 10, opens=HoldReason.STEP_RETRYING, ends=_S - {HoldReason.STEP_RETRYING}),
    Kind.STEP_REFUSED: Rule("step", 10, opens=HoldReason.STEP_REFUSED, ends=_S - {HoldReason.STEP_REFUSED}),
    Kind.STEP_STATUS: Rule("step", 50, ends=_S),
    # Every step of the phase reached a terminal status: none of them holds it.
    Kind.PHASE_COMPLETED: Rule("phase", 10, ends=_S),
    Kind.CLEANUP_FAILED: Rule("group", 10, opens=HoldReason.CLEANUP_FAILED),
    Kind.CLEANUP_REVERTED: Rule("group", 10, ends=frozenset({HoldReason.CLEANUP_FAILED})),
}
REACH: dict[str, int] = {kind.value: rule.reach for kind, rule in RULES.items()}
_BY_WIRE: dict[str, Rule] = {kind.value: rule for kind, rule in RULES.items()}
# What derive looks up per line and per hold, by wire name and by reason: tuples of
# members are matched by identity, where a frozenset would hash an Enum in Python.
_ENDS: dict[str, tuple[HoldReason, ...]] = {wire: tuple(rule.ends) for wire, rule in _BY_WIRE.items()}
_ENDED_BY: dict[HoldReason, tuple[str, ...]] = {
    reason: tuple(wire for wire, rule in _BY_WIRE.items() if reason in rule.ends) for reason in HoldReason
}
# An open hold's key is (its reason's name, what it concerns): a str hashes at C speed,
# where a tuple holding an Enum member would hash it in Python. A line ends the holds of
# a reason opened by lines about the same kind of thing (`on`) by that key; any other
# (a phase's line ending its steps' holds) by a look at each hold open.
_OPENED_ON: dict[str, set[str]] = {reason.name: set() for reason in HoldReason}
for _rule in RULES.values():
    if _rule.opens is not None:
        _OPENED_ON[_rule.opens.name].add(_rule.on)
_OPENS: dict[str, str] = {wire: rule.opens.name for wire, rule in _BY_WIRE.items() if rule.opens is not None}
_ENDS_BY_KEY: dict[str, tuple[str, ...]] = {
    wire: tuple(r.name for r in rule.ends if _OPENED_ON[r.name] == {rule.on})
    for wire, rule in _BY_WIRE.items()
}
_ENDS_BY_LOOK: dict[str, tuple[str, ...]] = {
    wire: tuple(r.name for r in rule.ends if _OPENED_ON[r.name] - {rule.on})
    for wire, rule in _BY_WIRE.items()
}
# Wire names compared on every line (an Enum's `.value` is a Python-level lookup each time).
_BLOCKED, _ENTERED = Kind.RUN_BLOCKED.value, Kind.PHASE_ENTERED.value
_STEP_STATUS, _STEP_RETRY = Kind.STEP_STATUS.value, Kind.STEP_RETRY.value
_PHASE_MARKS = {
    _ENTERED: "entered_at",
    Kind.PHASE_GATE.value: "gated_at",
    Kind.PHASE_ADVANCED.value: "advanced_at",
    Kind.PHASE_COMPLETED.value: "completed_at",
}
_STEP_WORDS = {_STEP_RETRY: "retrying", Kind.STEP_PARKED.value: "parked", Kind.STEP_REFUSED.value: "refused"}
# The order holds are listed in, and the headline told from: HoldReason's, declared most pressing first.
_ORDER = list(HoldReason)


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
class Step:
    step_id: str
    status: str | None = None  # null: no line about the step was read
    attempts: int = 0
    at: datetime.datetime | None = None


@dataclass
class Phase:
    phase: int
    entered_at: datetime.datetime | None = None
    gated_at: datetime.datetime | None = None
    advanced_at: datetime.datetime | None = None
    completed_at: datetime.datetime | None = None
    steps: dict[str, Step] = field(default_factory=dict)


@dataclass
class State:
    """A run's holds, headline and phases, as its lines tell them."""

    holds: list[Hold]
    headline: str
    phases: list[Phase]

    @property
    def latest_phase(self) -> int | None:
        entered = [phase.phase for phase in self.phases if phase.entered_at is not None]
        return max(entered) if entered else None


# ── derivation ───────────────────────────────────────────────────────────────


def _values(line: Line) -> dict[str, Any] | None:
    """A line's detail values by Python field name; None when it has none or it cannot be read."""
    values = read_values(line.kind, line.detail)
    return values if type(values) is dict else None


def _subject(rule: Rule, line: Line, told: Opened) -> Any:
    if rule.on == "phase":
        return line.phase
    if rule.on == "step":
        return None if line.step_id is None else str(line.step_id)
    if rule.on == "group":
        values = told.values(line)
        return None if values is None else values.get("group")
    return "run"


def _concerns(rule: Rule, subject: Any, held: Any, newest: Line) -> bool:
    """Whether a line of `rule`, about `subject`, is about what a hold keyed by `held` holds.

    `newest`: the hold's newest line, which gives its phase and step.
    """
    if rule.on == "phase":
        return bool(newest.phase == subject)
    if rule.on == "step":
        return bool((None if newest.step_id is None else str(newest.step_id)) == subject)
    if rule.on == "group":  # a cleanup hold, the one kind a group's line ends: keyed by its group
        return bool(held == subject)
    return True


@dataclass
class Opened:
    """What a run's lines leave open, before the runs their blocks name are known: `opened`'s answer."""

    ordered: list[Line]  # the lines of a kind in RULES, oldest first
    reached: dict[str, bool]  # by wire name: whether the kind was read to its reach
    oldest_read: dict[str, datetime.datetime]  # of each kind read to its reach, its oldest line's time
    holds: list[Hold] = field(default_factory=list)  # what the lines leave open, in the order they opened
    unsure: list[tuple[tuple[HoldReason, ...], Line]] = field(default_factory=list)  # unreadable enders
    evaluations: list[Line] = field(default_factory=list)
    details: dict[int, dict[str, Any] | None] = field(default_factory=dict)  # by line id, as read

    def values(self, line: Line) -> dict[str, Any] | None:
        """`line`'s detail values, read the first time they are asked for (most lines' never are)."""
        details = self.details
        if line.id in details:
            return details[line.id]
        values = details[line.id] = _values(line)
        return values

    def blocking_ids(self, run: Run | None) -> set[int]:
        """The runs the blocks still open name, in their evidence too: what `derive` needs looked up.

        None of them when `run` is terminal: a finished run is blocked by nothing.
        """
        if run is not None and is_terminal(run.status):
            return set()
        found = set()
        for hold in self.holds:
            if hold.reason is HoldReason.BLOCKED_BY_RUN:
                for line in hold.evidence:
                    values = self.values(line)
                    if values is not None:
                        with contextlib.suppress(TypeError, ValueError):
                            found.add(int(values["blocking_run_id"]))
        return found


def opened(lines: Iterable[Line]) -> Opened:
    """What `lines` (the newest of each kind in RULES, at most its reach, any order) leave open."""
    ordered = sorted((line for line in lines if line.kind in _BY_WIRE), key=lambda line: (line.at, line.id))
    counted = dict.fromkeys(REACH, 0)
    for line in ordered:
        counted[line.kind] += 1
    reached = {kind: counted[kind] >= reach for kind, reach in REACH.items()}
    # Of each kind read to its reach, its oldest line read: older lines of it were not read.
    oldest_read: dict[str, datetime.datetime] = {}
    for line in ordered:
        if reached[line.kind]:
            oldest_read.setdefault(line.kind, line.at)
    told = Opened(ordered, reached, oldest_read)
    # Each hold open, by (reason's name, subject): its lines, oldest first. Made a Hold only
    # if still open after the last line: most lines' holds are ended by a later one.
    open_: dict[tuple[str, Any], list[Line]] = {}
    for line in ordered:
        kind = line.kind
        rule = _BY_WIRE[kind]
        if rule.facts:
            told.evaluations.append(line)
            continue
        subject = _subject(rule, line, told)
        if rule.ends:
            if subject is None and rule.on != "run":
                told.unsure.append((_ENDS[kind], line))
            for name in _ENDS_BY_KEY[kind]:
                open_.pop((name, subject), None)
            looked = _ENDS_BY_LOOK[kind]
            if looked:
                over = [
                    key
                    for key, held in open_.items()
                    if key[0] in looked and _concerns(rule, subject, key[1], held[-1])
                ]
                for key in over:
                    del open_[key]
        opens = _OPENS.get(kind)
        if opens is not None:
            # The same hold again: it stands since its first line, told by its newest.
            open_.setdefault((opens, subject), []).append(line)
    told.holds = [
        _opened(HoldReason[name], held, told.values(held[-1]), subject)
        for (name, subject), held in open_.items()
    ]
    return told


def derive(run_id: int, run: Run | None, lines: Opened, runs: Mapping[int, Run]) -> State:
    """What holds run `run_id`, from its row (None: the events system has none) and what its lines opened.

    `runs`: the runs `lines.blocking_ids` names (one missing no longer exists). Call once per `Opened`:
    its holds are finished in place.
    """
    holds = []
    terminal = run is not None and is_terminal(run.status)
    for hold in lines.holds:
        if terminal and hold.reason not in OUTLIVES_THE_RUN:
            continue
        if any(hold.reason in ends and line.at >= hold.since for ends, line in lines.unsure):
            hold.certain = False
        if any(lines.oldest_read.get(kind, hold.since) > hold.since for kind in _ENDED_BY[hold.reason]):
            hold.certain = False  # a line that ends it may lie between it and the oldest read
        finished = _finish(hold, runs, lines.evaluations, lines.reached, lines.values)
        if finished is not None:
            holds.append(finished)
    holds.sort(key=lambda hold: (_ORDER.index(hold.reason), hold.since))
    phases = _phases(lines.ordered, lines.values)
    return State(holds=holds, headline=_headline(run_id, run, lines.ordered, holds, phases), phases=phases)


def _opened(reason: HoldReason, lines: list[Line], values: dict[str, Any] | None, subject: Any) -> Hold:
    """The hold `lines` opened (oldest first), since its first, told by its newest (`values`)."""
    line = lines[-1]
    hold = Hold(reason=reason, since=lines[0].at, sentence="", evidence=list(lines), phase=line.phase)
    hold.step_id = None if line.step_id is None else str(line.step_id)
    v = values or {}
    hold.certain = values is not None or line.detail is None
    if reason is HoldReason.BLOCKED_BY_RUN:
        try:
            hold.blocking_run_id = int(v["blocking_run_id"])
        except (KeyError, TypeError, ValueError):
            hold.certain = False
        hold.concurrency_key = v.get("concurrency_key")
    elif reason is HoldReason.WAITING_AT_GATE:
        hold.condition, hold.deadline = v.get("condition"), _time(v.get("deadline"))
    elif reason is HoldReason.STEP_RETRYING:
        hold.attempt, hold.max_attempts = v.get("attempt"), v.get("max_attempts")
        hold.retry_at, hold.error = _time(v.get("retry_at")), v.get("error")
    elif reason is HoldReason.STEP_PARKED:
        hold.waiting_for = v.get("waiting_for")
    elif reason is HoldReason.STEP_REFUSED:
        refusal = v.get("refusal")
        hold.refusal = getattr(refusal, "value", refusal)
        hold.condition = _cap_words(v) if hold.refusal == "OVER_CAP" else v.get("switch")
    elif reason is HoldReason.CLEANUP_FAILED:
        hold.group, hold.error = subject, v.get("error")
        hold.attempt = v.get("attempt")
    return hold


def _cap_words(v: dict[str, Any]) -> str:
    cap, limit, used = v.get("cap"), v.get("limit"), v.get("used")
    used_words = f", {used} of {limit} used" if used is not None and limit is not None else ""
    return f"the {cap} cap{used_words}" if cap else "a cap"


def _time(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, str):
        try:
            return _time(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _finish(
    hold: Hold,
    runs: Mapping[int, Run],
    evaluations: list[Line],
    reached: dict[str, bool],
    values_of: Callable[[Line], dict[str, Any] | None],
) -> Hold | None:
    """The hold with its sentence and the facts other lines give; None when it no longer holds."""
    unreadable = "" if hold.certain else "; a line it rests on cannot be read, so the log cannot tell more"
    step = f"Step {hold.step_id}" if hold.step_id is not None else "A step"
    if hold.reason is HoldReason.BLOCKED_BY_RUN:
        key = f" holds {hold.concurrency_key}" if hold.concurrency_key else " holds the run's concurrency key"
        if hold.blocking_run_id is None:
            hold.sentence = "Blocked by another run, but the line cannot be read: the log cannot tell which."
            return hold
        blocker = runs.get(hold.blocking_run_id)
        if blocker is None:
            hold.certain = False
            hold.sentence = (
                f"Blocked by run {hold.blocking_run_id}, which{key}; the events system no longer has "
                f"run {hold.blocking_run_id}, so the log cannot tell whether it still holds."
            )
        elif is_terminal(blocker.status):
            return None  # the blocking run ended: its key is free
        else:
            hold.sentence = (
                f"Blocked by run {blocker.id}, which{key} and is still {blocker.status or 'unended'}."
            )
    elif hold.reason is HoldReason.WAITING_AT_GATE:
        since = [line for line in evaluations if line.phase == hold.phase and line.at >= hold.since]
        read = [values_of(line) for line in since]
        whole = not (reached[Kind.CONDITION_EVALUATED.value] and since and since[0] is evaluations[0])
        if whole:
            hold.evaluations = len(since)
            if all(v is not None for v in read):
                hold.matched = sum(1 for v in read if v and v.get("matched"))
        for values in reversed(read):
            if values is not None and not values.get("matched") and values.get("mismatch"):
                hold.mismatch = values["mismatch"]
                break
        hold.evidence += since[-3:]
        waits = f"for {hold.condition}" if hold.condition else "at its gate"
        deadline = f" (deadline {_iso(hold.deadline)})" if hold.deadline else ""
        counted = (
            f"{hold.evaluations} evaluation{'s' * (hold.evaluations != 1)} since it opened"
            if hold.evaluations is not None
            else f"more than {REACH[Kind.CONDITION_EVALUATED.value]} evaluations since it opened"
        )
        latest = f"; the latest: {hold.mismatch}" if hold.mismatch else ""
        hold.sentence = f"Phase {hold.phase} waits {waits}{deadline}: {counted}{latest}{unreadable}."
    elif hold.reason is HoldReason.STEP_PARKED:
        hold.sentence = f"{step} waits on a human: {hold.waiting_for or 'the line does not say for what'}."
    elif hold.reason is HoldReason.STEP_RETRYING:
        of = f" of {hold.max_attempts}" if hold.max_attempts else ""
        when = f", next attempt at {_iso(hold.retry_at)}" if hold.retry_at else ""
        failed = f"attempt {hold.attempt}{of} failed" if hold.attempt else "an attempt failed"
        hold.sentence = f"{step} is retrying: {failed}{when}{unreadable}."
    elif hold.reason is HoldReason.STEP_REFUSED:
        why = {"OVER_CAP": f"over {hold.condition}", "DISABLED": f"disabled by {hold.condition}"}
        words = why.get(hold.refusal or "", "not permitted") if hold.condition else "not permitted"
        hold.sentence = f"{step} was refused: {words}{unreadable}."
    elif hold.reason is HoldReason.CLEANUP_FAILED:
        group = f"Cleanup group {hold.group}" if hold.group else "A cleanup group"
        failures = len(hold.evidence)
        times = f" ({failures} failures)" if failures > 1 else ""
        hold.sentence = f"{group} did not come back{times}: {hold.error or 'the line does not say why'}."
    else:  # a reason declared since: said as the docs name it
        hold.sentence = f"{hold.reason.value.capitalize()}{unreadable}."
    return hold


def _iso(value: datetime.datetime | None) -> str:
    return (
        ""
        if value is None
        else value.astimezone(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _phases(ordered: Sequence[Line], values_of: Callable[[Line], dict[str, Any] | None]) -> list[Phase]:
    """Each phase the lines name: when it was entered, gated, advanced, completed; its steps."""
    phases: dict[int, Phase] = {}
    marks, step_words = _PHASE_MARKS, _STEP_WORDS
    for line in ordered:
        if line.phase is None:
            continue
        phase = phases.get(line.phase)
        if phase is None:  # made once a phase, not once a line
            phase = phases[line.phase] = Phase(line.phase)
        mark = marks.get(line.kind)
        if mark is not None:
            setattr(phase, mark, line.at)
            if line.kind == _ENTERED:
                for step_id in (values_of(line) or {}).get("step_ids", []):
                    phase.steps.setdefault(str(step_id), Step(str(step_id)))
            continue
        if line.step_id is None or not line.kind.startswith("step."):
            continue
        step_id = str(line.step_id)
        step = phase.steps.get(step_id)
        if step is None:
            step = phase.steps[step_id] = Step(step_id)
        step.at = line.at
        values = values_of(line) or {}
        if line.kind == _STEP_STATUS:
            step.status = values.get("to", "unreadable")
            step.attempts = (
                step.attempts + 1 if step.status not in ("pending", "unreadable") else step.attempts
            )
        else:
            step.status = step_words[line.kind]
            if line.kind == _STEP_RETRY:
                step.attempts = max(step.attempts, int(values.get("attempt") or 0))
    return [phases[number] for number in sorted(phases)]


def _headline(
    run_id: int, run: Run | None, ordered: Sequence[Line], holds: list[Hold], phases: list[Phase]
) -> str:
    """The one sentence that answers "why isn't it moving?"; it never guesses."""
    if run is not None and is_terminal(run.status):
        ended = f"Run {run_id} ended: {run.status}"
        if run.ended_at is not None:
            ended += f" at {_iso(run.ended_at)}"
        if not holds:
            return f"{ended}; nothing it left holds it."
        return f"{ended}; still open: {_told(holds)}"
    if not ordered:
        if run is None:
            return f"The events system has no run {run_id}, and its log has no line that says what holds it."
        status = run.status or "without a status"
        return f"Run {run_id} is {status}, and its log has no line: the log cannot tell what holds it."
    if holds:
        told = _told(holds)
        entered = [phase for phase in phases if phase.entered_at is not None]
        if entered and entered[-1].completed_at is None and any(h.reason in STEP_HOLDS for h in holds[:1]):
            latest = entered[-1]
            silent = [step.step_id for step in latest.steps.values() if step.status is None]
            quiet = ""
            if len(silent) == 1:
                quiet = f" Step {silent[0]} has no line."
            elif silent:
                quiet = f" Steps {', '.join(silent)} have no line."
            return f"Phase {latest.phase} has not completed. {told}{quiet}"
        return told
    status = "unknown to the events system" if run is None else (run.status or "without a status")
    latest_phase = max((phase.phase for phase in phases if phase.entered_at is not None), default=None)
    where = "" if latest_phase is None else f"; phase {latest_phase} is the latest entered"
    return f"Nothing in the log holds run {run_id} (status {status}{where})."


def _told(holds: list[Hold]) -> str:
    more = len(holds) - 1
    tail = "" if not more else f" And {more} more hold{'s' * (more > 1)}."
    return holds[0].sentence + tail


def rules_table() -> str:
    """RULES as the Markdown table docs/operating.md shows (tests/test_holds.py checks it is there)."""
    rows = [
        "| kind | concerns | opens | ends | newest lines read |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, rule in RULES.items():
        opens = f"`{rule.opens.name}`" if rule.opens else ("facts of the gate" if rule.facts else "")
        ends = ", ".join(f"`{reason.name}`" for reason in _ORDER if reason in rule.ends)
        rows.append(f"| `{kind.value}` | the {rule.on} | {opens} | {ends} | {rule.reach} |")
    return "\n".join(rows) + "\n"
