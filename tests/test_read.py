"""runLog: order, kinds, limits, keyset pages, typed and unreadable details."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from gql import store
from gql.kinds import Kind

from .conftest import Api, Backend, sent_statements

PAGE = """
query Page($runId: ID!, $kinds: [RunLogKind!], $limit: Int, $after: String) {
  runLog(runId: $runId, kinds: $kinds, limit: $limit, after: $after) {
    nodes {
      id runId stepId kind kindName phase at
      detail {
        __typename
        ... on RunStatusDetail { from to reason }
        ... on RunBlockedDetail { blockingRunId concurrencyKey blockingRun { id status terminal } }
        ... on ConditionEvaluatedDetail { matched condition firing facts mismatch }
        ... on RunBudgetDetail { caps { cap limit switch } }
        ... on PhaseAdvancedDetail { via firing deadline }
        ... on NoteDetail { text actor }
        ... on UnreadableDetail { text problem }
      }
    }
    pageInfo { hasNextPage endCursor }
  }
}
"""


def page(api: Api, run_id: Any = 1, **variables: Any) -> dict[str, Any]:
    result: dict[str, Any] = api.data(PAGE, {"runId": run_id, **variables})["runLog"]
    return result


def ids(result: dict[str, Any]) -> list[int]:
    return [int(node["id"]) for node in result["nodes"]]


def insert_raw(backend: Backend, rows: list[dict[str, Any]]) -> None:
    """Rows as another writer (an older system, a human) might have left them."""
    with backend.sync.begin() as conn:
        for row in rows:
            conn.execute(
                sa.text(
                    "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                    "VALUES (:run_id, :step_id, :kind, :phase, :detail, :at)"
                ),
                {"step_id": None, "phase": None, "detail": None, **row},
            )


def test_lines_come_newest_first_with_their_typed_details(api: Api) -> None:
    assert api.write(1, "run.status", {"from": None, "to": "scheduled"})
    assert api.write(1, "run.status", {"from": "scheduled", "to": "live"}, stepId="4", phase=2)
    assert api.write(2, "note", {"text": "another run"})
    result = page(api)
    nodes = result["nodes"]
    assert [n["detail"]["to"] for n in nodes] == ["live", "scheduled"]
    newest = nodes[0]
    assert newest["runId"] == "1"
    assert newest["stepId"] == "4"
    assert newest["phase"] == 2
    assert newest["kind"] == "RUN_STATUS"
    assert newest["kindName"] == "run.status"
    assert newest["detail"] == {
        "__typename": "RunStatusDetail",
        "from": "scheduled",
        "to": "live",
        "reason": None,
    }
    assert result["pageInfo"]["hasNextPage"] is False


def test_at_is_utc_to_the_millisecond_and_lines_in_one_millisecond_order_by_id(
    tables: Backend, api: Api
) -> None:
    same = datetime.datetime(2026, 5, 1, 12, 0, 0, 123000)
    insert_raw(tables, [{"run_id": 1, "kind": "note", "at": same} for _ in range(3)])
    assert api.write(1, "note", {"text": "now"})
    nodes = page(api)["nodes"]
    written = datetime.datetime.fromisoformat(nodes[0]["at"])
    assert written.utcoffset() == datetime.timedelta(0)
    assert written.microsecond % 1000 == 0
    assert abs(written - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(minutes=1)
    older = nodes[1:]
    assert {n["at"] for n in older} == {"2026-05-01T12:00:00.123000+00:00"}
    assert ids({"nodes": older}) == sorted(ids({"nodes": older}), reverse=True)


def test_kinds_null_means_all_and_empty_means_none(api: Api) -> None:
    assert api.write(1, "note", {"text": "a"})
    assert api.write(1, "run.status", {"to": "live"})
    assert api.write(1, "run.health", {"to": "degraded"})
    assert len(page(api, kinds=None)["nodes"]) == 3
    assert page(api, kinds=[]) == {
        "nodes": [],
        "pageInfo": {"hasNextPage": False, "endCursor": None},
    }
    only = page(api, kinds=["NOTE", "RUN_HEALTH"])["nodes"]
    assert sorted(n["kind"] for n in only) == ["NOTE", "RUN_HEALTH"]


@pytest.mark.parametrize(
    ("limit", "expected"), [(None, 500), (0, 500), (-5, 1), (1, 1), (2000, 2000), (5000, 2000)]
)
def test_limit_is_clamped_as_the_seed_does(
    tables: Backend, api: Api, limit: int | None, expected: int
) -> None:
    base = datetime.datetime(2026, 1, 1)
    insert_raw(
        tables,
        [{"run_id": 1, "kind": "note", "at": base + datetime.timedelta(milliseconds=i)} for i in range(2100)],
    )
    result = api.data(
        "query($limit: Int) { runLog(runId: 1, limit: $limit) { nodes { id } pageInfo { hasNextPage } } }",
        {"limit": limit},
    )["runLog"]
    assert len(result["nodes"]) == expected
    assert result["pageInfo"]["hasNextPage"] is True


def test_pages_walk_the_whole_log_with_nothing_repeated_or_skipped_while_lines_are_written(
    tables: Backend, api: Api
) -> None:
    # Many lines share a millisecond, so the cursor must break ties by id.
    base = datetime.datetime(2026, 1, 1)
    insert_raw(
        tables,
        [
            {"run_id": 9, "kind": "note", "at": base + datetime.timedelta(milliseconds=i // 4)}
            for i in range(230)
        ],
    )
    before = set(ids(page(api, 9, limit=2000)))
    seen: list[int] = []
    after = None
    pages = 0
    while True:
        result = page(api, 9, limit=7, after=after)
        pages += 1
        seen += ids(result)
        # A writer keeps writing between pages: those lines are newer, never in older pages.
        assert api.write(9, "note", {"text": f"written during page {pages}"})
        if not result["pageInfo"]["hasNextPage"]:
            break
        after = result["pageInfo"]["endCursor"]
    assert len(seen) == len(set(seen)), "a line was repeated"
    assert set(seen) == before, "a line was skipped"
    assert pages == -(-230 // 7)


def test_has_next_page_is_false_on_an_exactly_full_last_page(api: Api) -> None:
    for i in range(4):
        assert api.write(3, "note", {"text": str(i)})
    first = page(api, 3, limit=2)
    assert first["pageInfo"]["hasNextPage"] is True
    last = page(api, 3, limit=2, after=first["pageInfo"]["endCursor"])
    assert len(last["nodes"]) == 2
    assert last["pageInfo"]["hasNextPage"] is False


def test_a_bad_row_reads_as_unreadable_and_does_not_break_its_page(tables: Backend, api: Api) -> None:
    at = datetime.datetime(2026, 2, 1)
    insert_raw(
        tables,
        [
            {"run_id": 5, "kind": "run.status", "detail": "not json {", "at": at},
            {"run_id": 5, "kind": "run.status", "detail": '{"from": "a"}', "at": at},
            {"run_id": 5, "kind": "run.status", "detail": '{"to": 3}', "at": at},
            {"run_id": 5, "kind": "run.blocked", "detail": "[1, 2]", "at": at},
            {"run_id": 5, "kind": "run.teleported", "detail": '{"to": "mars"}', "at": at},
            {"run_id": 5, "kind": "run.teleported", "detail": None, "at": at},
            {"run_id": 5, "kind": "note", "detail": None, "at": at},
            # A stored key the type does not have is ignored on read.
            {"run_id": 5, "kind": "note", "detail": '{"text": "hi", "mood": "ok"}', "at": at},
        ],
    )
    nodes = list(reversed(page(api, 5)["nodes"]))
    assert len(nodes) == 8
    problems = [n["detail"].get("problem") if n["detail"] else None for n in nodes]
    assert nodes[0]["detail"]["text"] == "not json {"
    assert "not JSON" in problems[0]
    assert "to is required" in problems[1]
    assert "to: input should be a valid string" in problems[2]
    assert nodes[3]["detail"]["__typename"] == "UnreadableDetail"
    # A kind this server does not know keeps its name and its text.
    assert nodes[4]["kind"] is None
    assert nodes[4]["kindName"] == "run.teleported"
    assert nodes[4]["detail"] == {
        "__typename": "UnreadableDetail",
        "text": '{"to": "mars"}',
        "problem": "kind 'run.teleported' is not known to this server",
    }
    assert nodes[5]["kindName"] == "run.teleported"
    assert nodes[5]["detail"] is None
    assert nodes[6]["detail"] is None
    assert nodes[7]["detail"] == {"__typename": "NoteDetail", "text": "hi", "actor": None}


def test_a_blocked_line_reaches_the_run_that_blocked_it(tables: Backend, api: Api) -> None:
    tables.add_run(37, "live", None, "2026-03-01 10:00:00")
    assert api.write(38, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "invasion:Yew"})
    assert api.write(38, "run.blocked", {"blockingRunId": "999", "concurrencyKey": "x"})
    nodes = page(api, 38)["nodes"]
    gone, held = nodes
    assert held["detail"]["blockingRun"] == {"id": "37", "status": "live", "terminal": False}
    assert held["detail"]["blockingRunId"] == "37"
    assert gone["detail"]["blockingRun"] is None


def test_every_kind_round_trips_a_typed_detail(api: Api) -> None:
    from .details_examples import EXAMPLES

    for kind in Kind:
        assert api.write(6, kind.value, EXAMPLES[kind]), kind
    typenames = {
        n["kindName"]: n["detail"]["__typename"]
        for n in api.data("{ runLog(runId: 6) { nodes { kindName detail { __typename } } } }")["runLog"][
            "nodes"
        ]
    }
    assert typenames == {
        kind.value: "".join(p.title() for p in kind.value.split(".")) + "Detail" for kind in Kind
    }


@pytest.mark.parametrize("run_id", ["abc", "0", "-3", "1.5", "99999999999"])
def test_a_run_id_that_is_not_a_positive_integer_is_a_clear_error(api: Api, run_id: str) -> None:
    body = api.post("query($r: ID!) { runLog(runId: $r) { nodes { id } } }", {"r": run_id})
    (error,) = body["errors"]
    assert "runId must be a positive integer" in error["message"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"


def test_a_cursor_the_service_did_not_issue_is_a_clear_error(api: Api) -> None:
    body = api.post('{ runLog(runId: 1, after: "bogus") { nodes { id } } }')
    (error,) = body["errors"]
    assert "is not a cursor this service issued" in error["message"]


def test_one_page_is_one_query(tables: Backend, api: Api) -> None:
    for i in range(30):
        assert api.write(4, "note", {"text": str(i)})
    with sent_statements(api.client.app_state["engine"]) as statements:
        first = page(api, 4, limit=10)
        page(api, 4, limit=10, after=first["pageInfo"]["endCursor"])
    reads = [s for s in statements if "event_run_log" in s]
    assert len(reads) == 2, statements


@pytest.mark.mariadb
@pytest.mark.parametrize("kinds", [None, ["cleanup.retry"]])
# No cursor; a line's time; a line whose stored `at` is MariaDB's zero date.
@pytest.mark.parametrize("with_cursor", [None, "time", "zero date"])
def test_mariadb_reads_a_page_through_an_index_range(
    mariadb: Backend, kinds: list[str] | None, with_cursor: str | None
) -> None:
    mariadb.create_tables()
    start = datetime.datetime(2026, 1, 1)
    insert_raw(
        mariadb,
        [
            {
                "run_id": r,
                "kind": "cleanup.retry" if i % 100 == 0 else "note",
                "at": start + datetime.timedelta(seconds=i),
            }
            for r in range(1, 6)
            for i in range(1000)
        ],
    )
    mariadb.execute("ANALYZE TABLE event_run_log")
    cursor = {
        None: None,
        "time": store.Cursor(at=start + datetime.timedelta(seconds=500), id=2500),
        "zero date": store.Cursor(at="0000-00-00 00:00:00.000", id=2500),
    }[with_cursor]
    query = store.page_query(run_id=3, kinds=kinds, limit=50, after=cursor)
    sql = str(query.compile(dialect=mariadb.sync.dialect, compile_kwargs={"literal_binds": True}))
    (row,) = mariadb.rows(f"EXPLAIN {sql}")
    plan = row._mapping
    # By kind, either of the two indexes on (run_id, kind, at, id) in some order is the same range.
    expected = (
        {"ix_event_run_log_run_kind_at", "ix_event_run_log_kind_run_at"}
        if kinds
        else {"ix_event_run_log_run_at"}
    )
    if with_cursor == "zero date":  # nothing is older: either index reads next to nothing
        expected.add("ix_event_run_log_run_at")
    assert plan["key"] in expected, plan
    assert plan["type"] in ("range", "ref"), plan
    assert "filesort" not in (plan["Extra"] or ""), plan
    # The plan reads at most the page's worth of index entries for a rare kind,
    # never the run's whole log.
    assert int(plan["rows"]) <= (10 if kinds else 1000), plan
