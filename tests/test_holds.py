"""What holds a run, derived from its lines (gql/holds.py): the demo's stories and odd cases, no database."""

from __future__ import annotations

import datetime
import json
import random
from pathlib import Path
from typing import Any

from gql import demo_runs, holds
from gql.holds import HoldReason
from gql.kinds import Kind
from gql.store import Line, Run

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime.datetime(2026, 6, 1, 20, 0)
T0 = datetime.datetime(2026, 6, 1, 18, 0, tzinfo=datetime.UTC)


def utc(value: datetime.datetime | None) -> datetime.datetime | None:
    return None if value is None else value.replace(tzinfo=datetime.UTC)


def demo() -> dict[int, tuple[Run, list[Line]]]:
    told = {}
    for run in demo_runs.build_runs(NOW):
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


def derive(lines: list[Line], run: Run | None = LIVE, runs: dict[int, Run] | None = None) -> holds.State:
    return holds.derive(1, run, holds.opened(lines), {2: Run(2, "live", None, T0)} if runs is None else runs)


def test_each_demo_run_is_held_as_its_story_says() -> None:
    told = demo()
    rows = {run_id: row for run_id, (row, _) in told.items()}
    state = {
        run_id: holds.derive(run_id, row, holds.opened(lines), rows) for run_id, (row, lines) in told.items()
    }

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
        "Phase 2 has not completed. Step 3705 waits on a human: a GM to hand the Lich Lord's "
        "crown to the winning guild. And 1 more hold. Step 3706 has no line."
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


def test_the_gate_while_it_was_closed_says_what_came_instead() -> None:
    row, lines = demo()[demo_runs.INVASION]
    evaluated = [x for x in lines if x.kind == "condition.evaluated"]
    closed = [x for x in lines if x.at < evaluated[-1].at]  # before the boss spawned in Yew
    state = holds.derive(demo_runs.INVASION, row, holds.opened(closed), {})
    [gate] = state.holds
    assert gate.reason is HoldReason.WAITING_AT_GATE and gate.phase == 2
    assert (gate.condition, gate.evaluations, gate.matched) == ("boss.spawned", 2, 0)
    assert gate.mismatch == "the Ancient Wyrm spawned, gate waits for the Lich Lord"
    assert [x.kind for x in gate.evidence] == ["phase.gate", "condition.evaluated", "condition.evaluated"]
    assert gate.sentence.startswith("Phase 2 waits for boss.spawned (deadline ")


def test_lines_out_of_order_in_at_give_the_same_answer() -> None:
    row, lines = demo()[demo_runs.INVASION]
    # Ids not in time order (a slow commit, a Galera cluster), and read in any order.
    renumbered = [x._replace(id=10_000 - x.id) for x in lines]
    random.Random(7).shuffle(renumbered)
    state = holds.derive(demo_runs.INVASION, row, holds.opened(renumbered), {})
    assert [(h.reason, h.step_id) for h in state.holds] == [
        (HoldReason.STEP_PARKED, "3705"),
        (HoldReason.STEP_REFUSED, "3704"),
    ]


def test_a_run_with_no_lines_says_the_log_cannot_tell() -> None:
    state = derive([])
    assert state.holds == [] and state.phases == []
    assert state.headline == "Run 1 is live, and its log has no line: the log cannot tell what holds it."
    unknown = derive([], run=None)
    assert unknown.headline.startswith("The events system has no run 1")


def test_an_unreadable_detail_among_the_evidence_keeps_the_hold_and_says_it_cannot_tell() -> None:
    state = derive([line(1, Kind.RUN_BLOCKED, "{not json")])
    [hold] = state.holds
    assert hold.reason is HoldReason.BLOCKED_BY_RUN and not hold.certain
    assert hold.sentence == "Blocked by another run, but the line cannot be read: the log cannot tell which."
    parked = derive([line(1, Kind.STEP_PARKED, {"waitingFor": 3}, step=7)])  # not the kind's shape
    assert [h.reason for h in parked.holds] == [HoldReason.STEP_PARKED] and not parked.holds[0].certain
    # A cleanup.reverted whose group cannot be read may have ended the failure.
    failed = {"group": "g", "resourceIds": [1], "error": "e", "leftAs": "untouched", "attempt": 1}
    cleanup = derive([line(1, Kind.CLEANUP_FAILED, failed), line(2, Kind.CLEANUP_REVERTED, "[]", minutes=1)])
    assert [h.certain for h in cleanup.holds] == [False]


def test_a_blocking_run_that_no_longer_exists_still_holds_but_cannot_tell() -> None:
    state = derive([line(1, Kind.RUN_BLOCKED, BLOCKED)], runs={})
    [hold] = state.holds
    assert hold.blocking_run_id == 2 and not hold.certain
    assert hold.sentence == (
        "Blocked by run 2, which holds invasion:Yew; the events system no longer has run 2, "
        "so the log cannot tell whether it still holds."
    )


def test_a_block_ends_when_the_blocking_run_ends_or_the_run_moves() -> None:
    blocked = [line(1, Kind.RUN_BLOCKED, BLOCKED)]
    assert derive(blocked, runs={2: Run(2, "completed", T0, T0)}).holds == []
    # Matched exactly: a status the events system spells otherwise is not terminal.
    assert len(derive(blocked, runs={2: Run(2, "Completed", T0, T0)}).holds) == 1
    started = [*blocked, line(2, Kind.RUN_STATUS, {"from": "scheduled", "to": "live"}, minutes=1)]
    assert derive(started).holds == []


def test_only_the_runs_a_block_still_open_names_are_to_be_looked_up() -> None:
    by_3 = line(1, Kind.RUN_BLOCKED, {"blockingRunId": 3, "concurrencyKey": "k"})
    by_2 = line(2, Kind.RUN_BLOCKED, BLOCKED, minutes=1)
    # One hold, told by its newest line; its evidence names both runs, and both are served.
    assert holds.opened([by_3, by_2]).blocking_ids(LIVE) == {2, 3}
    started = line(3, Kind.RUN_STATUS, {"from": "scheduled", "to": "live"}, minutes=2)
    assert holds.opened([by_3, by_2, started]).blocking_ids(LIVE) == set()
    assert holds.opened([by_2]).blocking_ids(Run(1, "completed", T0, T0)) == set()
    assert holds.opened([line(1, Kind.RUN_BLOCKED, "{not json")]).blocking_ids(LIVE) == set()


def test_a_gate_opened_twice_is_one_hold_until_it_advances_and_then_a_new_one() -> None:
    gate = {"condition": "boss.spawned", "parameters": None, "deadline": None}
    twice = [line(1, Kind.PHASE_GATE, gate, phase=3), line(2, Kind.PHASE_GATE, gate, phase=3, minutes=5)]
    [hold] = derive(twice).holds
    assert hold.since == T0 and len(hold.evidence) == 2 and hold.evaluations == 0
    advanced = [*twice, line(3, Kind.PHASE_ADVANCED, {"via": "FORCED"}, phase=3, minutes=6)]
    assert derive(advanced).holds == []
    again = [*advanced, line(4, Kind.PHASE_GATE, gate, phase=3, minutes=9)]
    [reopened] = derive(again).holds
    assert reopened.since == T0 + datetime.timedelta(minutes=9)


def test_a_kind_that_opens_or_ends_nothing_changes_nothing() -> None:
    row, lines = demo()[demo_runs.INVASION]
    before = holds.derive(demo_runs.INVASION, row, holds.opened(lines), {})
    noise = [
        line(90_001, Kind.RUN_HEALTH, {"from": "ok", "to": "ok"}, minutes=500),
        line(90_002, Kind.NOTE, {"text": "x"}, minutes=501),
        line(90_003, "a.kind.from.tomorrow", "{}", minutes=502),
    ]
    after = holds.derive(demo_runs.INVASION, row, holds.opened([*lines, *noise]), {})
    assert [(h.reason, h.sentence) for h in after.holds] == [(h.reason, h.sentence) for h in before.holds]
    assert after.headline == before.headline


def test_a_hold_an_unread_older_line_might_have_ended_says_it_cannot_tell() -> None:
    parked = line(1, Kind.STEP_PARKED, {"waitingFor": "a GM"}, step=7)
    reach = holds.REACH[Kind.STEP_STATUS.value]
    others = [
        line(10 + n, Kind.STEP_STATUS, {"to": "done"}, step=100 + n, minutes=1 + n) for n in range(reach)
    ]
    [hold] = derive([parked, *others]).holds
    assert not hold.certain
    [sure] = derive([parked, *others[1:]]).holds  # fewer than the reach: every one was read
    assert sure.certain


def test_the_rules_are_written_once_and_the_docs_show_them() -> None:
    assert holds.rules_table() in (ROOT / "docs" / "operating.md").read_text()
    opening = {rule.opens for rule in holds.RULES.values() if rule.opens is not None}
    assert opening == set(HoldReason)  # every reason is opened by some kind
