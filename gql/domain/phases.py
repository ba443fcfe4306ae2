"""A run's phases and steps, and its timeline, drawn from its lines: `phases` and `spans`, both pure.

`phases` says when each phase was entered, gated, advanced and completed, and each step's latest
state; `spans` draws a span per phase and per state of each step.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kinds import Kind
from ..store import Line

_WORDS = {
    Kind.STEP_PARKED.value: "parked",
    Kind.STEP_REFUSED.value: "refused",
    Kind.STEP_RETRY.value: "retrying",
}
_STATUS, _ENTERED, _COMPLETED = Kind.STEP_STATUS.value, Kind.PHASE_ENTERED.value, Kind.PHASE_COMPLETED.value
_PHASE_MARKS = {
    _ENTERED: "entered_at",
    Kind.PHASE_GATE.value: "gated_at",
    Kind.PHASE_ADVANCED.value: "advanced_at",
    _COMPLETED: "completed_at",
}


@dataclass
class Step:
    """One step of a phase, as its newest step line tells it."""

    step_id: str
    status: str | None = None  # None: the step has no line yet
    attempts: int = 0
    at: datetime.datetime | None = None


@dataclass
class Phase:
    """One phase: when it was entered, gated, advanced and completed, and its steps."""

    phase: int
    entered_at: datetime.datetime | None = None
    gated_at: datetime.datetime | None = None
    advanced_at: datetime.datetime | None = None
    completed_at: datetime.datetime | None = None
    steps: dict[str, Step] = field(default_factory=dict)


def phases(
    marks: Sequence[Line],
    newest_steps: Sequence[Line] | None,
    retries: Mapping[str, Line],
    values_of: Callable[[Line], dict[str, Any] | None],
) -> list[Phase]:
    """Each phase the lines name: when it was entered, gated, advanced, completed; its steps.

    `marks`: the run's phase lines, oldest first; `newest_steps`: each step's newest step line (None:
    not read, and the phases have no steps); `retries`: each step's newest `step.retry`. A step is
    described under the phase of its newest step line, or, with none, under the phase whose
    `phase.entered` names it.
    """
    phases: dict[int, Phase] = {}

    def phase_of(number: int) -> Phase:
        found = phases.get(number)
        if found is None:
            found = phases[number] = Phase(number)
        return found

    for line in marks:
        mark = _PHASE_MARKS.get(line.kind)
        if mark is not None and line.phase is not None:
            setattr(phase_of(line.phase), mark, line.at)
    if newest_steps is None:  # the steps were not read: the phases' moments alone
        return [phases[number] for number in sorted(phases)]
    named = named_steps(marks, values_of)
    newest = {str(line.step_id): line for line in newest_steps or () if line.step_id is not None}
    for step_id, number in named.items():
        if step_id not in newest:
            phase_of(number).steps[step_id] = Step(step_id)
    for step_id, line in newest.items():
        if line.phase is None:
            continue
        step = phase_of(line.phase).steps[step_id] = Step(step_id, at=line.at)
        values = values_of(line) or {}
        retried = retries.get(step_id)
        attempt = int((values_of(retried) or {}).get("attempt") or 0) if retried is not None else 0
        if line.kind == _STATUS:
            step.status = values.get("to") or "unreadable"
            step.attempts = attempt + (step.status != "pending")
        else:
            step.status = _WORDS[line.kind]
            step.attempts = attempt
    order = {step_id: n for n, step_id in enumerate(named)}  # as phase.entered names them, then by id
    for phase in phases.values():
        listed = sorted(
            phase.steps.values(), key=lambda step: (order.get(step.step_id, len(order)), _id(step))
        )
        phase.steps = {step.step_id: step for step in listed}
    return [phases[number] for number in sorted(phases)]


def named_steps(marks: Sequence[Line], values_of: Callable[[Line], dict[str, Any] | None]) -> dict[str, int]:
    """Each step a `phase.entered` of `marks` names, in the order first named: the phase of the last."""
    named: dict[str, int] = {}
    for line in marks:
        if line.kind == _ENTERED and line.phase is not None:
            for step_id in (values_of(line) or {}).get("step_ids") or []:
                named[str(step_id)] = line.phase
    return named


def _id(step: Step) -> tuple[int, str]:
    return (int(step.step_id), "") if step.step_id.isdigit() else (0, step.step_id)


@dataclass
class Span:
    """One phase's span (`step_id` None: entered to completed) or one state of one step."""

    phase: int | None
    step_id: str | None
    state: str
    start: datetime.datetime
    until: datetime.datetime | None = None  # None: it has not ended


def spans(
    marks: Sequence[Line],
    step_lines: Sequence[Line],
    values_of: Callable[[Line], dict[str, Any] | None],
) -> list[Span]:
    """The phases' spans, then the steps', each in the order it began."""
    drawn: list[Span] = []
    phases: dict[int, Span] = {}
    for line in marks:
        if line.phase is None:
            continue
        if line.kind == _ENTERED and line.phase not in phases:
            phases[line.phase] = Span(line.phase, None, "entered", line.at)
            drawn.append(phases[line.phase])
        elif line.kind == _COMPLETED and line.phase in phases:
            phases[line.phase].until = line.at
            phases[line.phase].state = "completed"
    now: dict[str, Span] = {}  # each step's current span
    for line in step_lines:
        if line.step_id is None:
            continue
        step = str(line.step_id)
        if line.kind == _STATUS:
            state = str((values_of(line) or {}).get("to") or "unreadable").lower()
        else:
            state = _WORDS[line.kind]
        current = now.get(step)
        if current is not None and current.state == state:
            continue  # the same state again: its span goes on
        if current is not None:
            current.until = line.at
        now[step] = Span(line.phase, step, state, line.at)
        drawn.append(now[step])
    return drawn
