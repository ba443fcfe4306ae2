"""A run's holds, headline and latest phase as served equal tests/holds_reference.py's, on any log.

Hypothesis writes run logs (every kind a hold rule reads, dozens of steps, groups, keys,
phases, NULL steps and phases, unreadable details, ties in `at` and `at` going backwards
against id, blocking runs live, ended or missing) straight into the tables; the
service's answer to one `runLog(runId:) { run { ... } }` must be the reference's.
The long runs the red team found come after, as plain examples.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Api, Backend
from .holds_reference import TERMINAL, LogLine, expected_holds

RUN = 1
OTHER_RUNS = range(2, 8)  # the runs a `run.blocked` line may name: each present or not
START = datetime.datetime(2026, 6, 1, 18, 0)
STATUSES = ("live", "scheduled", "running", "completed", "cancelled", "failed", "missed", "Completed")

QUERY = """
query($runId: ID!) {
  runLog(runId: $runId, kinds: []) {
    run {
      headline latestPhase
      holds {
        reason phase stepId group since certain blockingRunId concurrencyKey evaluations
        evidence { id kindName }
      }
    }
  }
}
"""

# ── the logs ─────────────────────────────────────────────────────────────────

GROUPS = ("spawns", "decorations", "rewards")
KEYS = ("invasion:Yew", "invasion:Moonglow")


def _detail(kind: str, group: str, blocking: Any, key: str) -> dict[str, Any]:
    """A detail of `kind` that its type reads."""
    return {
        "run.blocked": {"blockingRunId": blocking, "concurrencyKey": key},
        "run.status": {"from": "scheduled", "to": "live"},
        "phase.gate": {"condition": "boss.spawned"},
        "phase.advanced": {"via": "FORCED"},
        "phase.entered": {"stepIds": []},
        "phase.completed": {"stepCount": 1, "byStatus": [{"status": "done", "count": 1}]},
        "condition.evaluated": {"matched": False, "condition": "boss.spawned"},
        "step.parked": {"waitingFor": "a GM"},
        "step.retry": {"attempt": 1, "error": "timeout"},
        "step.refused": {"refusal": "DISABLED", "switch": "events.spawns"},
        "step.status": {"from": "pending", "to": "running"},
        "cleanup.failed": {
            "group": group,
            "resourceIds": [1],
            "error": "in a backpack",
            "leftAs": "untouched",
            "attempt": 1,
        },
        "cleanup.reverted": {"group": group, "resourceIds": [1]},
        "note": {"text": "a GM looked"},
    }[kind]


# `note` first: hypothesis shrinks a line towards the first, so a line a failure does not need
# shrinks to one that opens and ends nothing.
KINDS = (
    "note",
    "run.blocked",
    "run.status",
    "phase.gate",
    "phase.advanced",
    "phase.entered",
    "phase.completed",
    "condition.evaluated",
    "step.parked",
    "step.retry",
    "step.refused",
    "step.status",
    "step.status",  # twice: a step's status is its commonest line
    "cleanup.failed",
    "cleanup.reverted",
)


@st.composite
def _line(draw: st.DrawFn, kinds: Sequence[str], steps: int, phases: int, seconds: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(kinds))
    readable = _detail(
        kind,
        draw(st.sampled_from(GROUPS)),
        draw(st.sampled_from([*OTHER_RUNS, "abc"])),
        draw(st.sampled_from(KEYS)),
    )
    detail = draw(
        st.sampled_from(
            [
                json.dumps(readable),
                json.dumps(readable),
                json.dumps(readable),
                "not json {",  # unreadable: not JSON
                json.dumps({"group": readable.get("group", "spawns")}),  # unreadable: not its kind's shape
                None,
            ]
        )
    )
    return {
        "kind": kind,
        "step_id": draw(st.one_of(st.none(), st.integers(1, steps))),
        "phase": draw(st.one_of(st.none(), st.integers(1, phases))),
        "detail": detail,
        "at": START + datetime.timedelta(seconds=draw(st.integers(0, seconds))),
    }


@dataclass
class Log:
    """One generated case: the run's status, the other runs' statuses, the run's lines."""

    status: str
    runs: dict[int, str]
    lines: list[LogLine]


@st.composite
def logs(draw: st.DrawFn) -> Log:
    # A few kinds at a time, so that one subject gets more lines than any "newest N" would read.
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=len(KINDS), unique=True))
    steps = draw(st.integers(1, 40))
    phases = draw(st.integers(1, 4))
    seconds = draw(st.integers(0, 120))  # few seconds: many lines share an `at`
    count = draw(st.integers(0, 150))
    drawn = draw(st.lists(_line(kinds, steps, phases, seconds), min_size=count, max_size=count))
    # Ids in writing order; `at` drawn apart from them, so it goes backwards against id.
    lines = [LogLine(id=i, **columns) for i, columns in enumerate(drawn, start=1)]
    runs = {run: status for run in OTHER_RUNS if (status := draw(st.sampled_from((None, *STATUSES))))}
    return Log(status=draw(st.sampled_from(STATUSES)), runs=runs, lines=lines)


# ── storing and asking ───────────────────────────────────────────────────────


def store(tables: Backend, log: Log) -> None:
    """The log as the only rows of both tables, in one bulk insert each."""
    with tables.sync.begin() as conn:
        conn.execute(sa.text("DELETE FROM event_run_log"))
        conn.execute(sa.text("DELETE FROM event_runs"))
        conn.execute(
            sa.text(
                "INSERT INTO event_runs (id, status, updated_at) VALUES (:id, :status, '2026-06-01 18:00:00')"
            ),
            [{"id": run, "status": status} for run, status in {RUN: log.status, **log.runs}.items()],
        )
        if log.lines:
            conn.execute(
                sa.text(
                    "INSERT INTO event_run_log (id, run_id, step_id, kind, phase, detail, at) "
                    "VALUES (:id, :run, :step, :kind, :phase, :detail, :at)"
                ),
                [
                    {
                        "id": line.id,
                        "run": RUN,
                        "step": line.step_id,
                        "kind": line.kind,
                        "phase": line.phase,
                        "detail": line.detail,
                        "at": line.at.strftime("%Y-%m-%d %H:%M:%S"),
                    }
                    for line in log.lines
                ],
            )


def served(api: Api) -> dict[str, Any]:
    run: dict[str, Any] = api.data(QUERY, {"runId": str(RUN)})["runLog"]["run"]
    return run


def _served_holds(run: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The served holds by what they are about: (reason, phase, stepId, group)."""
    return {
        (hold["reason"], hold["phase"], hold["stepId"], hold["group"]): {
            "since": datetime.datetime.fromisoformat(hold["since"]),
            "certain": hold["certain"],
            "blocking": (hold["blockingRunId"], hold["concurrencyKey"]),
            "evaluations": hold["evaluations"],
            # A gate's hold also shows its latest evaluations: facts, not the lines it rests on.
            "evidence": tuple(
                line["id"] for line in hold["evidence"] if line["kindName"] != "condition.evaluated"
            ),
        }
        for hold in run["holds"]
    }


def _part(holds: dict[tuple[Any, ...], dict[str, Any]], name: str) -> dict[tuple[Any, ...], Any]:
    return {key: hold[name] for key, hold in holds.items()}


def assert_as_the_reference_says(tables: Backend, api: Api, log: Log) -> dict[str, Any]:
    """Store `log`, ask the service, and hold its answer to the reference's; the answer.

    Each part is checked at a line of its own, so hypothesis tells each kind of difference apart.
    """
    store(tables, log)
    run = served(api)
    expected = expected_holds(log.status, log.lines, log.runs)
    wanted = {
        (hold.reason, hold.phase, hold.step_id, hold.group): {
            "since": hold.since.replace(tzinfo=datetime.UTC),
            "certain": hold.certain,
            "blocking": (hold.blocking_run_id, hold.concurrency_key),
            "evaluations": hold.evaluations,
            "evidence": hold.evidence,
        }
        for hold in expected.holds
    }
    got = _served_holds(run)
    assert sorted(got, key=repr) == sorted(wanted, key=repr), "which holds"
    assert run["latestPhase"] == expected.latest_phase, "latestPhase"
    headline = run["headline"]
    if run["holds"]:
        assert "Nothing in the log holds" not in headline, headline
    elif log.status not in TERMINAL and log.lines:
        assert headline.startswith(f"Nothing in the log holds run {RUN} "), headline
    if log.lines:
        assert "has no line" not in headline, headline
    assert _part(got, "since") == _part(wanted, "since")
    assert _part(got, "certain") == _part(wanted, "certain")
    assert _part(got, "blocking") == _part(wanted, "blocking")
    assert _part(got, "evidence") == _part(wanted, "evidence")
    assert _part(got, "evaluations") == _part(wanted, "evaluations")
    return run


@settings(
    max_examples=int(os.environ.get("RUNLOG_HOLDS_EXAMPLES", "80")),
    deadline=None,
    derandomize=True,  # the same logs on every run, so CI and a laptop agree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(log=logs())
def test_holds_are_what_the_rules_say_of_every_line(tables: Backend, api: Api, log: Log) -> None:
    assert_as_the_reference_says(tables, api, log)


# ── the red team's long runs ─────────────────────────────────────────────────


def _lines(*rows: tuple[str, dict[str, Any] | None, dict[str, Any]]) -> list[LogLine]:
    """Lines one second apart, ids in order: (kind, detail, columns) each."""
    return [
        LogLine(
            id=i,
            kind=kind,
            at=START + datetime.timedelta(seconds=i),
            detail=None if detail is None else json.dumps(detail),
            **columns,
        )
        for i, (kind, detail, columns) in enumerate(rows, start=1)
    ]


PARKED = ("step.parked", {"waitingFor": "a GM"})
RUNNING = ("step.status", {"from": "pending", "to": "running"})


def _hold_keys(run: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(hold["reason"], hold["stepId"], hold["group"], hold["certain"]) for hold in run["holds"]]


def test_a_step_parked_first_still_holds_after_ten_others_parked_and_released(
    tables: Backend, api: Api
) -> None:
    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [(*PARKED, {"step_id": 1, "phase": 1})]
    for step in range(2, 12):
        rows += [(*PARKED, {"step_id": step, "phase": 1}), (*RUNNING, {"step_id": step, "phase": 1})] * 2
    run = assert_as_the_reference_says(tables, api, Log("live", {}, _lines(*rows)))
    assert _hold_keys(run) == [("STEP_PARKED", "1", None, True)]


def test_a_group_that_failed_before_ten_others_came_back_still_holds_the_finished_run(
    tables: Backend, api: Api
) -> None:
    def failed(group: str) -> dict[str, Any]:
        return _detail("cleanup.failed", group, 2, KEYS[0])

    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [
        ("cleanup.failed", failed("moongate"), {})
    ]
    for n in range(10):
        group = f"group{n}"
        rows += [("cleanup.failed", failed(group), {})] * 2
        rows += [("cleanup.reverted", _detail("cleanup.reverted", group, 2, KEYS[0]), {})]
    run = assert_as_the_reference_says(tables, api, Log("completed", {}, _lines(*rows)))
    assert _hold_keys(run) == [("CLEANUP_FAILED", None, "moongate", True)]


def test_a_step_parked_and_released_is_not_held_after_fifty_lines_about_others(
    tables: Backend, api: Api
) -> None:
    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [
        (*PARKED, {"step_id": 5, "phase": 1}),
        (*RUNNING, {"step_id": 5, "phase": 1}),
    ]
    rows += [(*RUNNING, {"step_id": 100 + n, "phase": 1}) for n in range(50)]
    run = assert_as_the_reference_says(tables, api, Log("live", {}, _lines(*rows)))
    assert run["holds"] == []


def test_a_running_run_of_2501_notes_is_held_by_nothing_and_has_lines(tables: Backend, api: Api) -> None:
    notes = [("note", {"text": f"looked {n}"}, {}) for n in range(2501)]
    run = assert_as_the_reference_says(tables, api, Log("running", {}, _lines(*notes)))
    assert run["headline"].startswith("Nothing in the log holds run 1 (status running")


@pytest.mark.parametrize(("order", "latest"), [((1, 3, 2), 2), ((2, 1), 1), ((1, 2, 3), 3)])
def test_the_latest_phase_is_the_one_entered_last(
    tables: Backend, api: Api, order: Sequence[int], latest: int
) -> None:
    rows = [("phase.entered", {"stepIds": []}, {"phase": phase}) for phase in order]
    run = assert_as_the_reference_says(tables, api, Log("live", {}, _lines(*rows)))
    assert run["latestPhase"] == latest


def test_a_gate_evaluated_more_often_than_its_evidence_shows_counts_every_evaluation_since_it_opened(
    tables: Backend, api: Api
) -> None:
    evaluated = ("condition.evaluated", _detail("condition.evaluated", GROUPS[0], 2, KEYS[0]))
    gate = ("phase.gate", _detail("phase.gate", GROUPS[0], 2, KEYS[0]))
    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = [(*evaluated, {"phase": 3})] * 4
    rows += [(*gate, {"phase": 3})]
    rows += [(*evaluated, {"phase": 3}), (*evaluated, {"phase": 4})] * 25
    run = assert_as_the_reference_says(tables, api, Log("live", {}, _lines(*rows)))
    assert [(hold["reason"], hold["evaluations"]) for hold in run["holds"]] == [("WAITING_AT_GATE", 25)]
