"""A run's timeline: spans for each phase and for each state of each step, drawn from its lines.

`spans(marks, step_lines, values_of)` is pure: `marks` are the run's phase lines and
`step_lines` every line of a step kind, both oldest first (by `at`, then `id`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .kinds import Kind
from .store import Line

_WORDS = {
    Kind.STEP_PARKED.value: "parked",
    Kind.STEP_REFUSED.value: "refused",
    Kind.STEP_RETRY.value: "retrying",
}
_STATUS, _ENTERED, _COMPLETED = Kind.STEP_STATUS.value, Kind.PHASE_ENTERED.value, Kind.PHASE_COMPLETED.value


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
