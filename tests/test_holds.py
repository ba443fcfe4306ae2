"""What holds a run, from its lines (gql/domain/holds.py): the demo's stories, odd cases, both databases."""

from __future__ import annotations

import asyncio
import datetime
import json
import random
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from gql.api import runs
from gql.domain import demo_runs, holds
from gql.domain.holds import HoldReason
from gql.kinds import Kind
from gql.store import Line, Run, find_runs
from gql.store.db import create_engine

from .conftest import Backend

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime.datetime(2026, 6, 1, 18, 0, tzinfo=datetime.UTC)


def utc(value: datetime.datetime | None) -> datetime.datetime | None:
    return None if value is None else value.replace(tzinfo=datetime.UTC)


def demo() -> dict[int, tuple[Run, list[Line]]]:
    """The demo's runs and lines, as if loaded now (a blocking run's quiet is told against now)."""
    told = {}
    for run in demo_runs.build_runs(datetime.datetime.now(datetime.UTC).replace(tzinfo=None)):
        row = Run(run.id, run.status, utc(run.ended_at), utc(run.updated_at))
        lines = [
            Line(run.id * 1000 + n, run.id, d.step_id, d.kind.value, d.phase, _text(d.detail), utc(d.at))  # type: ignore[arg-type]
            for n, d in enumerate(run.lines)
        ]
        told[run.id] = (row, lines)
    return told


def _text(detail: Any) -> str | None:
    return None if detail is None else json.dumps(detail)


def line(n: int, kind: Kind | str, detail: Any = None, *, minutes: float = 0, **columns: Any) -> Line:
    text = detail if isinstance(detail, str) or detail is None else json.dumps(detail)
    name = kind.value if isinstance(kind, Kind) else kind
    at = T0 + datetime.timedelta(minutes=minutes)
    return Line(n, 1, columns.get("step"), name, columns.get("phase"), text, at)


LIVE = Run(1, "live", None, T0)
BLOCKED = {"blockingRunId": 2, "concurrencyKey": "invasion:Yew"}


def store(tables: Backend, lines: list[Line], rows: list[Run]) -> None:
    """Only `lines` and `rows` in the tables, as another writer may have left them (ids and `at` chosen)."""
    tables.execute("DELETE FROM event_run_log")
    tables.execute("DELETE FROM event_runs")
    for row in rows:
        tables.execute(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) "
            "VALUES (:id, :status, :ended, :updated)",
            id=row.id,
            status=row.status,
            ended=None if row.ended_at is None else row.ended_at.replace(tzinfo=None),
            updated=None if row.updated_at is None else row.updated_at.replace(tzinfo=None),
        )
    rows_of_lines = [
        {
            "id": x.id,
            "run": x.run_id,
            "step": x.step_id,
            "kind": x.kind,
            "phase": x.phase,
            "detail": x.detail,
            "at": x.at.replace(tzinfo=None).isoformat(sep=" ", timespec="milliseconds"),
        }
        for x in lines
    ]
    if rows_of_lines:
        with tables.sync.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO event_run_log (id, run_id, step_id, kind, phase, detail, at) "
                    "VALUES (:id, :run, :step, :kind, :phase, :detail, :at)"
                ),
                rows_of_lines,
            )


def states(tables: Backend, run_ids: list[int], *, phases: bool = True) -> dict[int, holds.State]:
    """What the service derives for `run_ids` from what the tables hold."""

    async def read() -> dict[int, holds.State]:
        engine = create_engine(tables.settings())
        try:
            found = await find_runs(engine, run_ids)
            rows = {run_id: found.get(run_id) for run_id in run_ids}
            return (await runs.read_states(engine, rows, phases=phases))[1]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def derive(
    tables: Backend, lines: list[Line], run: Run | None = LIVE, others: dict[int, Run] | None = None
) -> holds.State:
    rows = [] if run is None else [run]
    rows += list(({2: Run(2, "live", None, T0)} if others is None else others).values())
    store(tables, lines, rows)
    return states(tables, [1])[1]


def demo_states(tables: Backend, lines_of: Any = None) -> dict[int, holds.State]:
    told = demo()
    lines = [x for _, (_, run_lines) in sorted(told.items()) for x in run_lines]
    store(tables, lines if lines_of is None else lines_of(lines), [row for row, _ in told.values()])
    return states(tables, sorted(told))


def test_each_demo_run_is_held_as_its_story_says(tables: Backend) -> None:
    state = demo_states(tables)

    blocked = state[demo_runs.BLOCKED]
    assert [h.reason for h in blocked.holds] == [HoldReason.BLOCKED_BY_RUN]
    assert blocked.holds[0].blocking_run_id == demo_runs.INVASION and blocked.holds[0].certain
    assert blocked.headline == "Blocked by run 37, which holds invasion:Yew and is still live."
    assert [x.kind for x in blocked.holds[0].evidence] == ["run.blocked", "run.blocked"]
    assert blocked.holds[0].since == blocked.holds[0].evidence[0].at  # since its first line

    invasion = state[demo_runs.INVASION]
    assert [(h.reason, h.step_id) for h in invasion.holds] == [
        (HoldReason.STEP_PARKED, "3705"),
        (HoldReason.STEP_REFUSED, "3704"),
    ]
    assert invasion.headline == (
        "Phase 2 has not completed, so the next phase cannot start: step 3705 waits on a human: a GM "
        "to hand the Lich Lord's crown to the winning guild. And 1 more hold. Apart from the holds, "
        "step 3706 has no line yet in phase 2."
    )
    assert invasion.holds[1].sentence == "Step 3704 was refused: over the spawns cap, 40 of 40 used."
    assert invasion.latest_phase == 2
    phase_2 = invasion.phases[1]
    assert phase_2.gated_at is not None and phase_2.advanced_at is not None and phase_2.completed_at is None
    assert {s.step_id: (s.status, s.attempts) for s in invasion.phases[0].steps.values()} == {
        "3701": ("done", 2),  # retried once, then done
        "3702": ("done", 1),
        "3703": ("done", 1),
    }

    hunt = state[demo_runs.TREASURE_HUNT]
    assert [(h.reason, h.group) for h in hunt.holds] == [(HoldReason.CLEANUP_FAILED, "moongate")]
    assert hunt.headline.startswith("Run 39 ended: cancelled at ")
    assert "still open: Cleanup group moongate did not come back (2 failures)" in hunt.headline

    for finished in (demo_runs.DRY_RUN, demo_runs.RELAY):
        assert state[finished].holds == []
        assert "nothing it left holds it" in state[finished].headline
    assert {s.step_id: (s.status, s.attempts) for s in state[demo_runs.RELAY].phases[0].steps.values()} == {
        "4001": ("failed", 3)
    }


def test_the_gate_while_it_was_closed_says_what_came_instead(tables: Backend) -> None:
    row, lines = demo()[demo_runs.INVASION]
    evaluated = [x for x in lines if x.kind == "condition.evaluated"]
    closed = [x for x in lines if x.at < evaluated[-1].at]  # before the boss spawned in Yew
    store(tables, closed, [row])
    state = states(tables, [demo_runs.INVASION])[demo_runs.INVASION]
    [gate] = state.holds
    assert gate.reason is HoldReason.WAITING_AT_GATE and gate.phase == 2
    assert (gate.condition, gate.evaluations, gate.matched) == ("boss.spawned", 2, 0)
    assert gate.mismatch == "the Ancient Wyrm spawned, gate waits for the Lich Lord"
    assert [x.kind for x in gate.evidence] == ["phase.gate", "condition.evaluated", "condition.evaluated"]
    assert gate.sentence.startswith("Phase 2 waits for boss.spawned (deadline ")


def test_lines_out_of_order_in_at_give_the_same_answer(tables: Backend) -> None:
    row, lines = demo()[demo_runs.INVASION]
    # Ids not in time order (a slow commit, a Galera cluster), and written in any order.
    renumbered = [x._replace(id=100_000 - x.id) for x in lines]
    random.Random(7).shuffle(renumbered)
    store(tables, renumbered, [row])
    state = states(tables, [demo_runs.INVASION])[demo_runs.INVASION]
    assert [(h.reason, h.step_id) for h in state.holds] == [
        (HoldReason.STEP_PARKED, "3705"),
        (HoldReason.STEP_REFUSED, "3704"),
    ]


def test_a_run_with_no_lines_says_the_log_cannot_tell(tables: Backend) -> None:
    state = derive(tables, [])
    assert state.holds == [] and state.phases == []
    assert state.headline == "Run 1 is live, and its log has no line: the log cannot tell what holds it."
    unknown = derive(tables, [], run=None)
    assert unknown.headline.startswith("The events system has no run 1")


def test_an_unreadable_detail_among_the_evidence_keeps_the_hold_and_says_it_cannot_tell(
    tables: Backend,
) -> None:
    state = derive(tables, [line(1, Kind.RUN_BLOCKED, "{not json")])
    [hold] = state.holds
    assert hold.reason is HoldReason.BLOCKED_BY_RUN and not hold.certain
    assert hold.sentence == "Blocked by another run, but the line cannot be read: the log cannot tell which."
    parked = derive(tables, [line(1, Kind.STEP_PARKED, {"waitingFor": 3}, step=7)])  # not the kind's shape
    assert [h.reason for h in parked.holds] == [HoldReason.STEP_PARKED] and not parked.holds[0].certain
    # A cleanup.reverted whose group cannot be read may have ended the failure.
    failed = {"group": "g", "resourceIds": [1], "error": "e", "leftAs": "untouched", "attempt": 1}
    cleanup = derive(
        tables, [line(1, Kind.CLEANUP_FAILED, failed), line(2, Kind.CLEANUP_REVERTED, "[]", minutes=1)]
    )
    assert [h.certain for h in cleanup.holds] == [False]


def test_a_blocking_run_that_no_longer_exists_still_holds_but_cannot_tell(tables: Backend) -> None:
    state = derive(tables, [line(1, Kind.RUN_BLOCKED, BLOCKED)], others={})
    [hold] = state.holds
    assert hold.blocking_run_id == 2 and not hold.certain
    assert hold.sentence == (
        "Blocked by run 2, which holds invasion:Yew; the events system no longer has run 2, "
        "so the log cannot tell whether it still holds."
    )


def test_a_block_whose_blocker_ended_says_so_and_a_status_ends_it(tables: Backend) -> None:
    blocked = [line(1, Kind.RUN_BLOCKED, BLOCKED)]
    [hold] = derive(tables, blocked, others={2: Run(2, "completed", T0, T0)}).holds
    assert not hold.certain
    assert hold.sentence == (
        "Blocked by run 2, which holds invasion:Yew; run 2 has since ended (completed at "
        "2026-06-01T18:00:00Z), and no later line says this run started: the log cannot tell whether "
        "it still waits."
    )
    # Matched exactly: a status the events system spells otherwise is not terminal.
    [live] = derive(tables, blocked, others={2: Run(2, "Completed", T0, T0)}).holds
    assert live.certain and live.sentence.endswith("and is still Completed.")
    started = [*blocked, line(2, Kind.RUN_STATUS, {"from": "scheduled", "to": "live"}, minutes=1)]
    state = derive(tables, started)
    assert state.holds == [] and state.headline == "Nothing in the log holds run 1 (status live)."


def test_a_hold_opened_long_before_many_other_lines_stands(tables: Backend) -> None:
    """Step 1 parked, then steps 2 to 11 each parked and released: step 1 still waits."""
    lines = [line(1, Kind.STEP_PARKED, {"waitingFor": "a GM"}, step=1, phase=1)]
    for step in range(2, 12):
        lines.append(
            line(step * 10, Kind.STEP_PARKED, {"waitingFor": "a GM"}, step=step, phase=1, minutes=step)
        )
        lines.append(
            line(step * 10 + 1, Kind.STEP_STATUS, {"to": "running"}, step=step, phase=1, minutes=step)
        )
    lines += [
        line(500 + n, Kind.STEP_STATUS, {"to": "done"}, step=100 + n, phase=1, minutes=20) for n in range(60)
    ]
    [hold] = derive(tables, lines).holds
    assert (hold.reason, hold.step_id, hold.certain) == (HoldReason.STEP_PARKED, "1", True)
    assert hold.since == T0


def test_a_released_step_is_not_held_however_many_lines_follow(tables: Backend) -> None:
    lines = [
        line(1, Kind.STEP_PARKED, {"waitingFor": "a GM"}, step=5, phase=1),
        line(2, Kind.STEP_STATUS, {"to": "running"}, step=5, phase=1, minutes=1),
    ]
    lines += [
        line(10 + n, Kind.STEP_STATUS, {"to": "done"}, step=100 + n, phase=1, minutes=2) for n in range(50)
    ]
    state = derive(tables, lines)
    assert state.holds == [] and state.headline.startswith("Nothing in the log holds run 1")


def test_a_run_of_notes_has_lines_and_nothing_holds_it(tables: Backend) -> None:
    lines = [line(n, Kind.NOTE, {"text": f"note {n}"}, minutes=n / 100) for n in range(1, 2502)]
    assert derive(tables, lines).headline == "Nothing in the log holds run 1 (status live)."


def test_the_latest_phase_is_the_one_entered_last_and_a_step_is_under_its_own(tables: Backend) -> None:
    lines = [
        line(1, Kind.PHASE_ENTERED, {"stepIds": [11]}, phase=1),
        line(2, Kind.STEP_STATUS, {"to": "running"}, step=11, phase=1, minutes=1),
        line(3, Kind.PHASE_ENTERED, {"stepIds": [31]}, phase=3, minutes=2),
        line(4, Kind.PHASE_ENTERED, {"stepIds": [21, 11]}, phase=2, minutes=3),
    ]
    state = derive(tables, lines)
    assert state.latest_phase == 2
    assert {p.phase: sorted(p.steps) for p in state.phases} == {1: ["11"], 2: ["21"], 3: ["31"]}


def test_a_kind_that_opens_or_ends_nothing_changes_nothing(tables: Backend) -> None:
    before = demo_states(tables)[demo_runs.INVASION]
    noise = [
        line(90_001, Kind.RUN_HEALTH, {"from": "ok", "to": "ok"}, minutes=500)._replace(
            run_id=demo_runs.INVASION
        ),
        line(90_002, Kind.NOTE, {"text": "x"}, minutes=501)._replace(run_id=demo_runs.INVASION),
        line(90_003, "a.kind.from.tomorrow", "{}", minutes=502)._replace(run_id=demo_runs.INVASION),
    ]
    after = demo_states(tables, lambda lines: [*lines, *noise])[demo_runs.INVASION]
    assert [(h.reason, h.sentence) for h in after.holds] == [(h.reason, h.sentence) for h in before.holds]
    assert after.headline == before.headline


def test_a_line_that_cannot_say_its_step_makes_older_step_holds_unsure(tables: Backend) -> None:
    parked = line(1, Kind.STEP_PARKED, {"waitingFor": "a GM"}, step=7)
    no_step = line(2, Kind.STEP_STATUS, {"to": "done"}, minutes=1)
    [hold] = derive(tables, [parked, no_step]).holds
    assert not hold.certain
    assert hold.sentence == (
        "Step 7 waits on a human: a GM; but a later line that cannot say what it concerns may have "
        "ended it, so the log cannot tell whether it still holds."
    )
    [sure] = derive(tables, [no_step._replace(at=T0 - datetime.timedelta(minutes=1)), parked]).holds
    assert sure.certain


def test_the_rules_are_written_once_and_the_docs_show_them() -> None:
    assert holds.rules_table() in (ROOT / "docs" / "operating.md").read_text()
    opening = {rule.opens for rule in holds.RULES.values() if rule.opens is not None}
    assert opening == set(HoldReason)  # every reason is opened by some kind
