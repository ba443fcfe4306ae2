"""Told before they ask: runsInFlight's filters, `lastLineAt`, how long a hold has lasted, a quiet blocker."""

from __future__ import annotations

import datetime
import json
from typing import Any

from .conftest import Api, Backend

IN_FLIGHT = """query($reason: [HoldReason!], $by: ID, $key: String, $limit: Int, $after: String) {
  runsInFlight(reason: $reason, blockingRunId: $by, concurrencyKey: $key, limit: $limit, after: $after) {
    nodes { id holds { reason } }
    pageInfo { hasNextPage endCursor }
  }
}"""


def add_run(tables: Backend, run_id: int, status: str = "live") -> None:
    tables.execute(
        "INSERT INTO event_runs (id, status, updated_at) VALUES (:id, :status, '2026-06-01 18:00:00')",
        id=run_id,
        status=status,
    )


def put(tables: Backend, run_id: int, kind: str, detail: Any, at: datetime.datetime, **columns: Any) -> None:
    tables.execute(
        "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
        "VALUES (:run, :step, :kind, :phase, :detail, :at)",
        run=run_id,
        step=columns.get("step"),
        kind=kind,
        phase=columns.get("phase"),
        detail=json.dumps(detail),
        at=at.replace(tzinfo=None).isoformat(sep=" ", timespec="milliseconds"),
    )


def ids(api: Api, **variables: Any) -> list[str]:
    page = api.data(IN_FLIGHT, variables)["runsInFlight"]
    return sorted(node["id"] for node in page["nodes"])


def test_runs_in_flight_filter_by_reason_blocking_run_and_key(api: Api, tables: Backend) -> None:
    for run_id in range(1, 8):
        add_run(tables, run_id)
    assert api.write(1, "run.blocked", {"blockingRunId": 5, "concurrencyKey": "invasion:Yew"})
    assert api.write(2, "run.blocked", {"blockingRunId": 5, "concurrencyKey": "invasion:Moon"})
    assert api.write(3, "run.blocked", {"blockingRunId": 6, "concurrencyKey": "invasion:Yew"})
    assert api.write(4, "step.parked", {"waitingFor": "a GM"}, stepId=9, phase=1)
    # Run 7 was blocked by 5, then started: nothing holds it, and no filter on blocks finds it.
    assert api.write(7, "run.blocked", {"blockingRunId": 5, "concurrencyKey": "invasion:Yew"})
    assert api.write(7, "run.status", {"from": "scheduled", "to": "live"})

    assert ids(api, reason=["BLOCKED_BY_RUN"]) == ["1", "2", "3"]
    assert ids(api, reason=["STEP_PARKED", "STEP_REFUSED"]) == ["4"]
    assert ids(api, by="5") == ["1", "2"]
    assert ids(api, key="invasion:Yew") == ["1", "3"]
    assert ids(api, by="5", key="invasion:Yew") == ["1"]  # together, all must hold
    assert ids(api, reason=["STEP_PARKED"], key="invasion:Yew") == []
    assert ids(api, reason=["CLEANUP_FAILED"]) == []
    assert len(ids(api)) == 7  # no filter: every run in flight


def test_a_filtered_page_is_full_and_pages_on_without_repeating(api: Api, tables: Backend) -> None:
    for run_id in range(1, 13):
        add_run(tables, run_id)
        if run_id % 3 == 0:
            assert api.write(run_id, "run.blocked", {"blockingRunId": 99, "concurrencyKey": "k"})
        else:
            assert api.write(run_id, "note", {"text": "nothing holds me"})
    seen: list[str] = []
    after = None
    while True:
        page = api.data(IN_FLIGHT, {"reason": ["BLOCKED_BY_RUN"], "limit": 2, "after": after})["runsInFlight"]
        seen += [node["id"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        assert len(page["nodes"]) == 2  # full, though most runs between them are not held
        after = page["pageInfo"]["endCursor"]
    assert sorted(seen, key=int) == ["3", "6", "9", "12"]


def test_a_bad_blocking_run_id_is_refused_by_name(api: Api) -> None:
    body = api.post('{ runsInFlight(blockingRunId: "x7") { nodes { id } } }')
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "blockingRunId 'x7' is not a run id" in body["errors"][0]["message"]


def test_last_line_at_and_how_long_a_hold_has_lasted(api: Api, tables: Backend) -> None:
    add_run(tables, 1)
    add_run(tables, 2)
    now = datetime.datetime.now(datetime.UTC)
    put(
        tables,
        1,
        "step.parked",
        {"waitingFor": "a GM"},
        now - datetime.timedelta(minutes=30),
        step=4,
        phase=1,
    )
    put(tables, 1, "note", {"text": "later"}, now - datetime.timedelta(minutes=5))
    query = "{ runsInFlight { nodes { id lastLineAt holds { since heldForSeconds } } } }"
    nodes = {node["id"]: node for node in api.data(query)["runsInFlight"]["nodes"]}
    last = datetime.datetime.fromisoformat(nodes["1"]["lastLineAt"])
    assert abs(last - (now - datetime.timedelta(minutes=5))) < datetime.timedelta(seconds=1)
    [hold] = nodes["1"]["holds"]
    assert 30 * 60 - 5 <= hold["heldForSeconds"] <= 30 * 60 + 120
    assert nodes["2"]["lastLineAt"] is None and nodes["2"]["holds"] == []


def test_a_blocking_run_that_has_gone_quiet_is_said_to(api: Api, tables: Backend) -> None:
    for run_id in (1, 2, 3, 4):
        add_run(tables, run_id)
    now = datetime.datetime.now(datetime.UTC)
    put(tables, 2, "note", {"text": "long ago"}, now - datetime.timedelta(hours=2, minutes=5))
    put(tables, 3, "note", {"text": "just now"}, now - datetime.timedelta(seconds=20))
    for blocked, blocker in ((1, 2), (4, 3)):
        put(tables, blocked, "run.blocked", {"blockingRunId": blocker, "concurrencyKey": "k"}, now)
    query = "{ runsInFlight { nodes { id holds { sentence } } } }"
    said = {node["id"]: node["holds"] for node in api.data(query)["runsInFlight"]["nodes"]}
    quiet = (
        "Blocked by run 2, which holds k and is still live; run 2 has written nothing for 2 hours 5 minutes."
    )
    assert said["1"] == [{"sentence": quiet}]
    assert said["4"] == [{"sentence": "Blocked by run 3, which holds k and is still live."}]
    # A blocker with no line at all: the log cannot say for how long, so nothing is said.


TIMELINE = """query($r: ID!) { runLog(runId: $r, kinds: []) { run { timeline {
  phase stepId state from until } } } }"""


def test_the_timeline_has_a_span_per_phase_and_per_state_of_each_step(api: Api, tables: Backend) -> None:
    add_run(tables, 1)
    t0 = datetime.datetime(2026, 6, 1, 18, 0, tzinfo=datetime.UTC)

    def at(minutes: int) -> datetime.datetime:
        return t0 + datetime.timedelta(minutes=minutes)

    put(tables, 1, "phase.entered", {"stepIds": [7, 8]}, at(0), phase=1)
    put(tables, 1, "step.status", {"from": "pending", "to": "running"}, at(1), step=7, phase=1)
    put(tables, 1, "step.retry", {"attempt": 1, "maxAttempts": 3}, at(2), step=7, phase=1)
    put(tables, 1, "step.retry", {"attempt": 2, "maxAttempts": 3}, at(3), step=7, phase=1)  # still retrying
    put(tables, 1, "step.status", {"from": "running", "to": "done"}, at(5), step=7, phase=1)
    # Written late, but at 4: the order is `at`'s.
    put(tables, 1, "step.parked", {"waitingFor": "a GM"}, at(4), step=8, phase=1)
    put(tables, 1, "note", {"text": "not a step's state"}, at(6), step=8, phase=1)
    put(tables, 1, "phase.completed", {"stepCount": 2, "byStatus": []}, at(7), phase=1)
    put(tables, 1, "phase.entered", {"stepIds": [9]}, at(8), phase=2)
    spans = api.data(TIMELINE, {"r": "1"})["runLog"]["run"]["timeline"]

    def iso(value: datetime.datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    assert [(s["phase"], s["stepId"], s["state"], s["from"], s["until"]) for s in spans] == [
        (1, None, "completed", iso(at(0)), iso(at(7))),
        (2, None, "entered", iso(at(8)), None),
        (1, "7", "running", iso(at(1)), iso(at(2))),
        (1, "7", "retrying", iso(at(2)), iso(at(5))),
        (1, "8", "parked", iso(at(4)), None),
        (1, "7", "done", iso(at(5)), None),
    ]
