"""What holds a run, told the slow and obvious way: a reference for tests/test_holds_exact.py.

`expected_holds(run, lines, runs)` reads every line of one run and answers its holds
and its latest phase, by the rules of docs/operating.md's "What holds a run", each
rule written out on its own as "the newest line of this subject says". It shares no
code with gql/domain/holds.py; only whether a stored detail can be read is asked of the
service's own reader (`gql.domain.detail_codec.read_values`), so the two agree on that.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gql.domain.detail_codec import read_values
from gql.domain.details import UnreadableDetail

__all__ = ["EVIDENCE_MOST", "TERMINAL", "Expected", "ExpectedHold", "LogLine", "expected_holds"]

TERMINAL = frozenset({"completed", "cancelled", "failed", "missed"})
EVIDENCE_MOST = 5  # the oldest line and the 4 newest

STEP_OPENERS = {"step.parked": "STEP_PARKED", "step.retry": "STEP_RETRYING", "step.refused": "STEP_REFUSED"}
STEP_KINDS = (*STEP_OPENERS, "step.status")
GATE_KINDS = ("phase.gate", "phase.advanced", "phase.entered")
CLEANUP_KINDS = ("cleanup.failed", "cleanup.reverted")


@dataclass(frozen=True)
class LogLine:
    """One stored line, as its columns hold it (`detail` is the stored text, or None)."""

    id: int
    kind: str
    at: datetime.datetime
    step_id: int | None = None
    phase: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class ExpectedHold:
    """One hold as RunHold serves it, in the GraphQL answer's terms (ids as strings)."""

    reason: str
    phase: int | None
    step_id: str | None
    group: str | None
    since: datetime.datetime
    certain: bool
    blocking_run_id: str | None
    concurrency_key: str | None
    evidence: tuple[str, ...]
    evaluations: int | None = None  # a gate's: its phase's `condition.evaluated` lines since its first


@dataclass(frozen=True)
class Expected:
    holds: list[ExpectedHold]
    latest_phase: int | None


def readable(line: LogLine) -> bool:
    """Whether the line's stored detail reads as its kind's type (no detail: nothing to read, so yes)."""
    return line.detail is None or not isinstance(read_values(line.kind, line.detail), UnreadableDetail)


def values(line: LogLine) -> dict[str, Any]:
    """The detail's JSON object by GraphQL field name; {} when there is none or it cannot be read."""
    if line.detail is None or not readable(line):
        return {}
    found = json.loads(line.detail)
    return found if isinstance(found, dict) else {}


def group_of(line: LogLine) -> str | None:
    return values(line).get("group")


def expected_holds(status: str, lines: Iterable[LogLine], runs: Mapping[int, str]) -> Expected:
    """The holds of a run whose `event_runs.status` is `status`, from all its `lines` (any order).

    `runs`: every other run in `event_runs`, by id, with its status.
    """
    ordered = sorted(lines, key=lambda line: (line.at, line.id))
    position = {line.id: i for i, line in enumerate(ordered)}

    def after(line: LogLine, mark: LogLine | None) -> bool:
        return mark is None or position[line.id] > position[mark.id]

    def newest(test: Callable[[LogLine], bool]) -> LogLine | None:
        found = [line for line in ordered if test(line)]
        return found[-1] if found else None

    def newest_of(*marks: LogLine | None) -> LogLine | None:
        present = [mark for mark in marks if mark is not None]
        return max(present, key=lambda mark: position[mark.id]) if present else None

    def unknown_ender_after(oldest: LogLine, test: Callable[[LogLine], bool]) -> bool:
        return any(test(line) and after(line, oldest) for line in ordered)

    holds: list[ExpectedHold] = []
    status_line = newest(lambda line: line.kind == "run.status")

    # BLOCKED_BY_RUN: every run.blocked after the newest run.status.
    blocks = [line for line in ordered if line.kind == "run.blocked" and after(line, status_line)]
    if blocks:
        told = values(blocks[-1])
        certain = readable(blocks[-1])
        blocking = _run_id(told.get("blockingRunId"))
        if blocking is None or blocking not in runs or runs[blocking] in TERMINAL:
            certain = False
        key = told.get("concurrencyKey")
        holds.append(_hold("BLOCKED_BY_RUN", blocks, certain, blocking_run_id=blocking, concurrency_key=key))

    # WAITING_AT_GATE, per phase (NULL is a phase of its own).
    for phase in _distinct(line.phase for line in ordered if line.kind == "phase.gate"):
        ours = newest(lambda line, p=phase: line.kind in GATE_KINDS and line.phase == p)
        assert ours is not None
        if ours.kind != "phase.gate" or not after(ours, status_line):
            continue
        cut = newest_of(
            newest(
                lambda line, p=phase: line.kind in ("phase.advanced", "phase.entered") and line.phase == p
            ),
            status_line,
        )
        gates = [
            line for line in ordered if line.kind == "phase.gate" and line.phase == phase and after(line, cut)
        ]
        certain = readable(gates[-1]) and not (
            phase is not None
            and unknown_ender_after(
                gates[0], lambda line: line.kind in ("phase.advanced", "phase.entered") and line.phase is None
            )
        )
        evaluated = [
            line
            for line in ordered
            if line.kind == "condition.evaluated" and line.phase == phase and after(line, gates[0])
        ]
        holds.append(_hold("WAITING_AT_GATE", gates, certain, evaluations=len(evaluated)))

    # Step holds, per step (NULL is a step of its own): its newest step line says.
    for step in _distinct(line.step_id for line in ordered if line.kind in STEP_KINDS):
        last = newest(lambda line, s=step: line.kind in STEP_KINDS and line.step_id == s)
        assert last is not None
        if last.kind not in STEP_OPENERS:
            continue
        completed = newest(lambda line, p=last.phase: line.kind == "phase.completed" and line.phase == p)
        if completed is not None and after(completed, last):
            continue
        others = newest(
            lambda line, s=step, k=last.kind: line.kind in STEP_KINDS and line.kind != k and line.step_id == s
        )
        cut = newest_of(others, completed)
        held = [
            line for line in ordered if line.kind == last.kind and line.step_id == step and after(line, cut)
        ]
        unsure = (
            step is not None
            and unknown_ender_after(held[0], lambda line: line.kind in STEP_KINDS and line.step_id is None)
        ) or (
            last.phase is not None
            and unknown_ender_after(
                held[0], lambda line: line.kind == "phase.completed" and line.phase is None
            )
        )
        holds.append(_hold(STEP_OPENERS[last.kind], held, readable(held[-1]) and not unsure))

    # CLEANUP_FAILED, per group (a detail that cannot be read, or has no group: no group).
    for group in _distinct(group_of(line) for line in ordered if line.kind == "cleanup.failed"):
        ours = newest(lambda line, g=group: line.kind in CLEANUP_KINDS and group_of(line) == g)
        assert ours is not None
        if ours.kind != "cleanup.failed":
            continue
        reverted = newest(lambda line, g=group: line.kind == "cleanup.reverted" and group_of(line) == g)
        failed = [
            line
            for line in ordered
            if line.kind == "cleanup.failed" and group_of(line) == group and after(line, reverted)
        ]
        unsure = group is not None and unknown_ender_after(
            failed[0], lambda line: line.kind == "cleanup.reverted" and group_of(line) is None
        )
        holds.append(_hold("CLEANUP_FAILED", failed, readable(failed[-1]) and not unsure, group=group))

    if status in TERMINAL:
        holds = [hold for hold in holds if hold.reason == "CLEANUP_FAILED"]
    entered = newest(lambda line: line.kind == "phase.entered")
    return Expected(holds=holds, latest_phase=None if entered is None else entered.phase)


def _hold(
    reason: str,
    lines: Sequence[LogLine],
    certain: bool,
    *,
    group: str | None = None,
    blocking_run_id: int | None = None,
    concurrency_key: str | None = None,
    evaluations: int | None = None,
) -> ExpectedHold:
    """A hold resting on `lines` (oldest first): since its oldest, told by its newest."""
    newest = lines[-1]
    shown = list(lines) if len(lines) <= EVIDENCE_MOST else [lines[0], *lines[-(EVIDENCE_MOST - 1) :]]
    return ExpectedHold(
        reason=reason,
        phase=newest.phase,
        step_id=None if newest.step_id is None else str(newest.step_id),
        group=group,
        since=lines[0].at,
        certain=certain,
        blocking_run_id=None if blocking_run_id is None else str(blocking_run_id),
        concurrency_key=concurrency_key,
        evidence=tuple(str(line.id) for line in shown),
        evaluations=evaluations,
    )


def _run_id(value: Any) -> int | None:
    """A detail's blockingRunId as a run's id; None when it cannot be read as one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _distinct(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))
