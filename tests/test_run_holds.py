"""`Run.holds`, `headline`, `phases` and `runsInFlight` over HTTP, on the demo's runs, on both databases."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gql.domain import demo, demo_runs
from gql.edge.graphiql import OPERATIONS_DIR, _fragments, example_tabs, with_fragments

from .conftest import Api, Backend
from .test_page_bytes import recorded_statements
from .test_page_plan import ANYONE, OPEN, Stored, _both, completions

DOCUMENTS = {tab.name: tab.query for tab in example_tabs()}
# The run page's: RunHolds' facts, and the phases and steps.
DOCUMENTS["RunHead"] = with_fragments((OPERATIONS_DIR / "RunHead.graphql").read_text(), _fragments())


@pytest.fixture
def demo_api(make_api: Callable[..., Api], tables: Backend) -> Api:
    asyncio.run(demo.load_into(tables.settings(), allow_non_embedded=True))
    return make_api()


def add_run(tables: Backend, run_id: int, status: str = "scheduled") -> None:
    tables.execute(
        "INSERT INTO event_runs (id, status, updated_at) "
        f"VALUES ({run_id}, '{status}', '2026-06-01 18:00:00')"
    )


def run_of(api: Api, run_id: int, operation: str = "RunHolds") -> dict[str, Any]:
    """The run as `operation` answers it: RunHolds, or RunHead for its phases and steps too."""
    run: dict[str, Any] = api.data(DOCUMENTS[operation], {"runId": str(run_id)})["runLog"]["run"]
    return run


def test_each_demo_run_is_held_as_its_story_says_in_one_query(demo_api: Api) -> None:
    blocked = run_of(demo_api, demo_runs.BLOCKED)
    assert blocked["headline"] == "Blocked by run 37, which holds invasion:Yew and is still live."
    [hold] = blocked["holds"]
    assert (hold["reason"], hold["blockingRunId"], hold["concurrencyKey"]) == (
        "BLOCKED_BY_RUN",
        "37",
        "invasion:Yew",
    )
    assert [line["kindName"] for line in hold["evidence"]] == ["run.blocked", "run.blocked"]
    # Each evidence line's blockingRun is the run it names, as on a page.
    assert [line["detail"]["blockingRun"]["id"] for line in hold["evidence"]] == ["37", "37"]
    assert hold["since"] == hold["evidence"][0]["at"]
    # The chain: what holds the run that blocks it.
    chained = hold["blockingRun"]
    assert (chained["id"], chained["status"]) == ("37", "live")
    assert [(h["reason"], h["stepId"]) for h in chained["holds"]] == [
        ("STEP_PARKED", "3705"),
        ("STEP_REFUSED", "3704"),
    ]
    # Each evidence line's cursor opens runLog there: the line just older than it comes next.
    evidence = hold["evidence"][-1]
    page = demo_api.data(
        "query($r: ID!, $a: String) { runLog(runId: $r, after: $a, limit: 1) { nodes { kindName } } }",
        {"r": "38", "a": evidence["cursor"]},
    )
    assert [n["kindName"] for n in page["runLog"]["nodes"]] == ["run.blocked"]

    invasion = run_of(demo_api, demo_runs.INVASION, "RunHead")
    assert invasion["headline"] == (
        "Phase 2 has not completed, so the next phase cannot start: step 3705 waits on a human: a GM "
        "to hand the Lich Lord's crown to the winning guild. And 1 more hold. Apart from the holds, "
        "step 3706 has no line yet in phase 2."
    )
    assert invasion["latestPhase"] == 2
    refused = invasion["holds"][1]
    assert (refused["refusal"], refused["condition"]) == ("OVER_CAP", "the spawns cap, 40 of 40 used")
    assert refused["evidence"][0]["detail"]["__typename"] == "StepRefusedDetail"
    phase_2 = invasion["phases"][1]
    assert phase_2["gatedAt"] and phase_2["advancedAt"] and phase_2["completedAt"] is None
    assert [(s["stepId"], s["status"], s["attempts"]) for s in phase_2["steps"]] == [
        ("3704", "refused", 0),
        ("3705", "parked", 0),
        ("3706", None, 0),
    ]

    hunt = run_of(demo_api, demo_runs.TREASURE_HUNT)
    assert hunt["terminal"]
    assert [(h["reason"], h["group"], h["attempt"]) for h in hunt["holds"]] == [
        ("CLEANUP_FAILED", "moongate", 1)
    ]
    assert hunt["headline"].startswith("Run 39 ended: cancelled at ")

    for finished in (demo_runs.DRY_RUN, demo_runs.RELAY):
        run = run_of(demo_api, finished)
        assert run["holds"] == [] and "nothing it left holds it" in run["headline"]
    relay = run_of(demo_api, demo_runs.RELAY, "RunHead")
    assert relay["phases"][0]["steps"] == [
        {"stepId": "4001", "status": "failed", "attempts": 3, "at": relay["phases"][0]["steps"][0]["at"]}
    ]


def test_a_blocking_run_that_no_longer_exists_and_one_that_ended(demo_api: Api, tables: Backend) -> None:
    tables.execute(f"DELETE FROM event_runs WHERE id = {demo_runs.INVASION}")
    [hold] = run_of(demo_api, demo_runs.BLOCKED)["holds"]
    assert hold["blockingRun"] is None and not hold["certain"]
    assert "no longer has run 37, so the log cannot tell whether it still holds" in hold["sentence"]


def test_a_blocked_run_whose_blocker_ended_says_so_not_that_nothing_holds_it(
    demo_api: Api, tables: Backend
) -> None:
    tables.execute(f"UPDATE event_runs SET status = 'Completed' WHERE id = {demo_runs.INVASION}")
    [hold] = run_of(demo_api, demo_runs.BLOCKED)["holds"]
    assert hold["certain"] and hold["sentence"].endswith("is still Completed.")  # matched exactly
    tables.execute(f"UPDATE event_runs SET status = 'completed' WHERE id = {demo_runs.INVASION}")
    run = run_of(demo_api, demo_runs.BLOCKED)
    [hold] = run["holds"]
    assert hold["reason"] == "BLOCKED_BY_RUN" and not hold["certain"]
    assert "run 37 has since ended (completed" in hold["sentence"]
    assert "no later line says this run started" in run["headline"]
    assert "Nothing" not in run["headline"]


def test_an_unreadable_detail_among_the_evidence_is_served_and_the_hold_says_it_cannot_tell(
    demo_api: Api, tables: Backend
) -> None:
    tables.execute("UPDATE event_run_log SET detail = '{not json' WHERE run_id = 38 AND kind = 'run.blocked'")
    run = run_of(demo_api, demo_runs.BLOCKED)
    [hold] = run["holds"]
    assert hold["certain"] is False and "cannot tell which" in hold["sentence"]
    assert {line["detail"]["__typename"] for line in hold["evidence"]} == {"UnreadableDetail"}


def test_a_run_with_no_lines_and_a_run_unknown(api: Api, tables: Backend) -> None:
    tables.execute(
        "INSERT INTO event_runs (id, status, updated_at) VALUES (5, 'scheduled', '2026-06-01 18:00:00')"
    )
    assert (
        run_of(api, 5)["headline"]
        == "Run 5 is scheduled, and its log has no line: the log cannot tell what holds it."
    )
    assert run_of(api, 6) is None  # no such run: RunLogPage.run is null, as before


def put_line(tables: Backend, line_id: int, kind: str, detail: Any, at: str, **columns: Any) -> None:
    """A line of run 1 as another writer may leave it: its id and `at` chosen, in any order."""
    tables.execute(
        "INSERT INTO event_run_log (id, run_id, step_id, kind, phase, detail, at) "
        "VALUES (:id, 1, :step, :kind, :phase, :detail, :at)",
        id=line_id,
        step=columns.get("step"),
        kind=kind,
        phase=columns.get("phase"),
        detail=json.dumps(detail),
        at=f"2026-06-01 {at}",
    )


def test_lines_out_of_order_in_at_are_read_newest_by_at(api: Api, tables: Backend) -> None:
    """Ids that do not follow `at` (a slow commit, a Galera cluster): what is newest is told by `at`."""
    add_run(tables, 1, "live")
    # Step 7 parked after its status (the status has the higher id): the park holds.
    put_line(tables, 10, "step.parked", {"waitingFor": "a GM"}, "18:05:00", step=7, phase=1)
    put_line(tables, 20, "step.status", {"from": "pending", "to": "running"}, "18:00:00", step=7, phase=1)
    # Step 8 refused before its status (the refusal has the higher id): the status ends it.
    put_line(tables, 11, "step.status", {"from": "pending", "to": "running"}, "18:10:00", step=8, phase=1)
    put_line(tables, 21, "step.refused", {"refusal": "DISABLED", "switch": "s"}, "18:01:00", step=8, phase=1)
    # The newest run.status by `at` (the one read) came after the block, though its id is lower.
    put_line(tables, 12, "run.blocked", {"blockingRunId": 2, "concurrencyKey": "k"}, "18:15:00")
    put_line(tables, 13, "run.status", {"from": "scheduled", "to": "live"}, "18:20:00")
    put_line(tables, 30, "run.status", {"from": "created", "to": "scheduled"}, "17:00:00")
    run = run_of(api, 1, "RunHead")
    assert [(h["reason"], h["stepId"]) for h in run["holds"]] == [("STEP_PARKED", "7")]
    assert [line["id"] for line in run["holds"][0]["evidence"]] == ["10"]
    steps = {s["stepId"]: s["status"] for s in run["phases"][0]["steps"]}
    assert steps == {"7": "parked", "8": "running"}


def test_a_gate_opened_twice_is_one_hold_until_it_advances(api: Api, tables: Backend) -> None:
    add_run(tables, 1, "live")
    gate = {"condition": "boss.spawned", "parameters": None, "deadline": None}
    evaluated = {"matched": False, "condition": "boss.spawned", "mismatch": "spawned in Britain"}
    put_line(tables, 1, "phase.gate", gate, "18:00:00", phase=2)
    put_line(tables, 2, "condition.evaluated", evaluated, "18:01:00", phase=2)
    put_line(tables, 3, "phase.gate", gate, "18:02:00", phase=2)
    [hold] = run_of(api, 1)["holds"]
    assert (hold["reason"], hold["phase"]) == ("WAITING_AT_GATE", 2)
    assert hold["since"] == "2026-06-01T18:00:00+00:00"  # its first gate's
    assert [line["id"] for line in hold["evidence"]] == ["1", "3", "2"]  # its gates, then the evaluation
    assert (hold["evaluations"], hold["matched"], hold["latestMismatch"]) == (1, 0, "spawned in Britain")
    put_line(tables, 4, "phase.advanced", {"via": "FORCED"}, "18:03:00", phase=2)
    assert run_of(api, 1)["holds"] == []
    put_line(tables, 5, "phase.gate", gate, "18:04:00", phase=2)
    [again] = run_of(api, 1)["holds"]
    assert again["since"] == "2026-06-01T18:04:00+00:00"
    assert [line["id"] for line in again["evidence"]] == ["5"]
    assert again["evaluations"] == 0


def test_a_chain_of_blocks_is_followed_and_read_in_one_batch(api: Api, tables: Backend) -> None:
    for run_id in (1, 2, 3):
        add_run(tables, run_id)
    assert api.write(1, "run.blocked", {"blockingRunId": 2, "concurrencyKey": "k"})
    assert api.write(2, "run.blocked", {"blockingRunId": 3, "concurrencyKey": "k"})
    data = api.data(
        "{ runLog(runId: 1, kinds: []) { run { headline holds { blockingRun { id headline holds {"
        " blockingRun { id headline } } } } } } }"
    )
    one = data["runLog"]["run"]
    assert one["headline"] == "Blocked by run 2, which holds k and is still scheduled."
    two = one["holds"][0]["blockingRun"]
    assert two["headline"] == "Blocked by run 3, which holds k and is still scheduled."
    assert two["holds"][0]["blockingRun"]["id"] == "3"


def test_runs_in_flight_are_the_runs_not_terminal_newest_activity_first_paged(
    demo_api: Api, tables: Backend
) -> None:
    query = DOCUMENTS["RunsInFlight"]
    page = demo_api.data(query, {"limit": 1})["runsInFlight"]
    # 38's newest line (6 minutes ago) is newer than 37's (its note, 8 minutes ago).
    assert [(n["id"], n["status"]) for n in page["nodes"]] == [("38", "scheduled")]
    assert page["pageInfo"]["hasNextPage"]
    rest = demo_api.data(query, {"limit": 5, "after": page["pageInfo"]["endCursor"]})["runsInFlight"]
    assert [n["id"] for n in rest["nodes"]] == ["37"] and not rest["pageInfo"]["hasNextPage"]
    assert rest["nodes"][0]["headline"].startswith(
        "Phase 2 has not completed, so the next phase cannot start"
    )
    assert page["nodes"][0]["headline"] == "Blocked by run 37, which holds invasion:Yew and is still live."
    # Terminal is matched exactly: a status spelt otherwise is in flight.
    tables.execute(f"UPDATE event_runs SET status = 'Completed' WHERE id = {demo_runs.DRY_RUN}")
    ids = [n["id"] for n in demo_api.data(query, {"limit": 100})["runsInFlight"]["nodes"]]
    assert ids == ["38", "37", "35"]
    # Newer activity on a run's row moves it up.
    tables.execute(f"UPDATE event_runs SET updated_at = '2099-01-01 00:00:00' WHERE id = {demo_runs.DRY_RUN}")
    ids = [n["id"] for n in demo_api.data(query, {"limit": 100})["runsInFlight"]["nodes"]]
    assert ids == ["35", "38", "37"]


def test_runs_in_flight_refuses_a_cursor_that_is_not_its_own(api: Api) -> None:
    body = api.post('{ runsInFlight(after: "nope") { nodes { id } } }')
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "after is not a runsInFlight cursor" in body["errors"][0]["message"]


def test_a_hundred_runs_in_flight_cost_a_few_statements_not_a_hundred(tables: Backend) -> None:
    for run_id in range(1, 101):
        add_run(tables, run_id)
    with recorded_statements(tables) as (api, taken):
        for run_id in range(1, 101, 10):
            assert api.write(run_id, "run.blocked", {"blockingRunId": run_id + 1, "concurrencyKey": "k"})
        taken()
        page = api.data(
            "{ runsInFlight(limit: 100) { nodes { id headline holds { blockingRun { headline } } } } }"
        )
        statements = taken()
    assert len(page["runsInFlight"]["nodes"]) == 100
    blocked = [n for n in page["runsInFlight"]["nodes"] if n["holds"]]
    assert len(blocked) == 10
    told = {n["holds"][0]["blockingRun"]["headline"] for n in blocked}
    assert all(headline.endswith("the log cannot tell what holds it.") for headline in told)
    # The page (1); the holds of 100 runs (2 statements of 68), the runs they name with their holds (1).
    assert len(statements) <= 4, len(statements)


def test_run_holds_reads_a_chain_of_blocks_a_link_at_a_time(tables: Backend) -> None:
    """RunHolds of a chain: one read per link (the runs' rows with their lines), never a statement per run.

    Run 1 was blocked by 3 (ended since), then by 2 (live); 2 by 4 (live, no line); 3 by 5.
    The block is told by its newest line (run 2), so neither 3 nor 5 is looked up.
    """
    for run_id, status in ((1, "live"), (2, "live"), (3, "completed"), (4, "live"), (5, "live")):
        add_run(tables, run_id, status)
    with recorded_statements(tables) as (api, taken):
        for run_id, blocker in ((1, 3), (1, 2), (2, 4), (3, 5)):
            assert api.write(run_id, "run.blocked", {"blockingRunId": blocker, "concurrencyKey": "k"})
        assert api.write(5, "note", {"text": "five has a log"})
        taken()
        run = run_of(api, 1)
        statements = taken()
    [hold] = run["holds"]
    assert hold["sentence"] == "Blocked by run 2, which holds k and is still live."
    [chained] = hold["blockingRun"]["holds"]
    assert chained["sentence"] == "Blocked by run 4, which holds k and is still live."
    read = [
        "+".join(
            name
            for name, part in (("runs", "FROM event_runs"), ("lines", "FROM event_run_log"))
            if part in text
        )
        for text in statements
        if "event_run" in text
    ]
    # Run 1's row with its lines; per link, the run named with its lines.
    assert read == ["runs+lines", "runs+lines", "runs+lines"], statements


def test_a_block_a_later_line_ended_looks_up_no_run(tables: Backend) -> None:
    """Run 1 was blocked by 2, then started: its holds are one statement, the run named is not looked up."""
    for run_id in (1, 2):
        add_run(tables, run_id, "live")
    with recorded_statements(tables) as (api, taken):
        assert api.write(1, "run.blocked", {"blockingRunId": 2, "concurrencyKey": "k"})
        assert api.write(1, "run.status", {"from": "scheduled", "to": "live"})
        taken()
        run = run_of(api, 1)
        statements = taken()
    assert run["holds"] == [] and run["headline"].startswith("Nothing in the log holds run 1")
    # The run's row with its lines: the run its ended block named is not looked up.
    read = [text for text in statements if "event_run" in text]
    assert len(read) == 1 and "FROM event_runs" in read[0], statements


def test_a_runs_holds_are_answered_alike_by_the_plan_and_by_graphql_core(tables: Backend) -> None:
    asyncio.run(demo.load_into(tables.settings(), allow_non_embedded=True))
    for run_id in demo_runs.RUN_IDS:
        with completions() as seen:
            fast, slow = _both(Stored(tables), DOCUMENTS["RunHolds"], {"runId": str(run_id)}, ANYONE, OPEN)
        assert fast == slow
        assert seen == {"planned": 1}
        assert '"headline"' in fast and "errors" not in json.loads(fast)


def test_the_readme_answers_run_38_in_one_query_as_it_says(demo_api: Api) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"<!-- demo: tests/test_run_holds.py [^\n]*\n```sh\n(.*?)\n```", readme, re.S)
    assert block is not None, "the README's run 38 block is not marked"
    sent = re.search(r"-d '(.*?)'\n", block[1], re.S)
    said = re.search(r"^# (\{.*\})$", block[1], re.M)
    assert sent is not None and said is not None
    request = json.loads(sent[1])
    assert demo_api.post(request["query"], request["variables"]) == json.loads(said[1])


def test_a_step_parked_again_and_again_is_one_hold_since_its_first_park(api: Api, tables: Backend) -> None:
    """A step's hold of many lines: since the first line after what last ended it, with that line and
    its four newest as evidence; ids not in the order of `at`, and its phase's completion, as written."""
    add_run(tables, 1, "live")
    parked = {"waitingFor": "a GM"}
    put_line(tables, 1, "step.parked", parked, "18:00:00", step=7, phase=1)
    put_line(tables, 2, "step.status", {"from": "pending", "to": "running"}, "18:01:00", step=7, phase=1)
    # Seven parks after the status, their ids running against their `at` for the first three.
    for line_id, at in ((13, "18:02:00"), (12, "18:03:00"), (11, "18:04:00")):
        put_line(tables, line_id, "step.parked", parked, at, step=7, phase=1)
    for line_id, at in ((14, "18:05:00"), (15, "18:06:00"), (16, "18:07:00"), (17, "18:08:00")):
        put_line(tables, line_id, "step.parked", parked, at, step=7, phase=1)
    [hold] = run_of(api, 1)["holds"]
    assert (hold["reason"], hold["stepId"]) == ("STEP_PARKED", "7")
    assert hold["since"] == "2026-06-01T18:02:00+00:00"
    assert [line["id"] for line in hold["evidence"]] == ["13", "14", "15", "16", "17"]
    # Its phase completed between two parks: the hold is the parks after it.
    put_line(tables, 18, "phase.completed", {}, "18:05:30", phase=1)
    [hold] = run_of(api, 1)["holds"]
    assert [line["id"] for line in hold["evidence"]] == ["15", "16", "17"]
    put_line(tables, 19, "phase.completed", {}, "18:09:00", phase=1)
    assert run_of(api, 1)["holds"] == []
