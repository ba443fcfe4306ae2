"""Reading a run's log both ways: `before` pages, cursors on lines, and late commits.

A line is stamped with `at` before it commits. A commit that is slow (held
open here on purpose, on a second connection) lands behind lines a `before`
page has already delivered; the next `before` page still delivers it, once.
"""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from .conftest import UNHURRIED_WRITE_TIMEOUT, Api, Backend
from .test_page_bytes import recorded_statements

LATE = "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, 'note', '{\"text\": \"late\"}', :at)"
PAGE = """
query P($runId: ID!, $kinds: [RunLogKind!], $limit: Int, $after: String, $before: String, $wait: Int) {
  runLog(runId: $runId, kinds: $kinds, limit: $limit, after: $after, before: $before, wait: $wait) {
    nodes { id kindName cursor }
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
  }
}
"""


@pytest.fixture
def make_api(make_api: Any) -> Any:
    """conftest's, with writes given the most time the service allows: writes run
    here while long polls wait, and their deadline is not what is tested."""

    def make(**overrides: Any) -> Api:
        return make_api(**{"write_timeout": UNHURRIED_WRITE_TIMEOUT, **overrides})

    return make


def page(api: Api, **variables: Any) -> dict[str, Any]:
    result: dict[str, Any] = api.data(PAGE, {"runId": "7", **variables})["runLog"]
    return result


def ids(found: dict[str, Any]) -> list[int]:
    return [int(node["id"]) for node in found["nodes"]]


def test_before_reads_the_lines_just_newer_than_a_cursor_newest_first(api: Api) -> None:
    for n in range(5):
        assert api.write(7, "note", {"text": f"old {n}"})
    first = page(api, limit=2)
    assert first["pageInfo"]["hasPreviousPage"] is False
    older = page(api, limit=2, after=first["pageInfo"]["endCursor"])
    # From the older page's start, the lines just newer: the first page again.
    back = page(api, limit=2, before=older["pageInfo"]["startCursor"])
    assert ids(back) == ids(first)
    assert back["pageInfo"]["hasPreviousPage"] is False
    # A line's own cursor works both ways.
    middle = first["nodes"][1]["cursor"]
    assert ids(page(api, limit=5, before=middle)) == ids(first)[:1]
    assert ids(page(api, limit=5, after=middle)) == ids(older) + ids(
        page(api, limit=5, after=older["pageInfo"]["endCursor"])
    )


def test_before_pages_written_while_read_give_every_line_once_with_or_without_kinds(api: Api) -> None:
    assert api.write(7, "note", {"text": "start"})
    for kinds in (None, ["NOTE"]):
        known = set(ids(page(api, limit=2000, kinds=kinds)))
        cursor = page(api, limit=1, kinds=kinds)["pageInfo"]["startCursor"]
        delivered: list[int] = []
        for round_ in range(6):
            for n in range(round_ % 3 + 1):
                assert api.write(7, "note", {"text": f"{round_}.{n}"})
                assert api.write(7, "run.created")
            found = page(api, limit=2, kinds=kinds, before=cursor)
            delivered += reversed(ids(found))
            assert found["pageInfo"]["hasPreviousPage"] is (
                len(delivered) < len(page(api, limit=2000, kinds=kinds)["nodes"]) - len(known)
            )
            cursor = found["pageInfo"]["startCursor"]
        while (found := page(api, limit=2, kinds=kinds, before=cursor))["nodes"]:
            delivered += reversed(ids(found))
            cursor = found["pageInfo"]["startCursor"]
        every = set(ids(page(api, limit=2000, kinds=kinds)))
        # Oldest first, each once, none of those there when the walk began.
        assert delivered == sorted(every - known)


def test_after_and_before_together_are_refused_with_a_clear_error(api: Api) -> None:
    assert api.write(7, "note", {"text": "a"})
    cursor = page(api)["pageInfo"]["startCursor"]
    body = api.post(PAGE, {"runId": "7", "after": cursor, "before": cursor})
    [error] = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "after and before cannot be given together" in error["message"]
    body = api.post(PAGE, {"runId": "7", "wait": 5})
    assert "wait needs before" in body["errors"][0]["message"]
    body = api.post(PAGE, {"runId": "7", "before": cursor, "wait": 31})
    assert "wait must be 0 to 30 seconds" in body["errors"][0]["message"]


def test_a_cursor_of_an_earlier_version_is_refused_with_what_to_do(api: Api, tables: Backend) -> None:
    """Earlier versions' cursors named no run, so they cannot be tied to one: refused, saying how to go on."""
    for n in range(3):
        assert api.write(7, "note", {"text": f"{n}"})
    rows = tables.rows("SELECT id, at FROM event_run_log ORDER BY id")
    import base64

    at = rows[0][1]
    if isinstance(at, str):
        at = datetime.datetime.fromisoformat(at)
    old = (
        base64.urlsafe_b64encode(f"{at.isoformat(timespec='milliseconds')}|{rows[0][0]}".encode())
        .decode()
        .rstrip("=")
    )
    for argument in ("before", "after"):
        [error] = api.post(PAGE, {"runId": "7", argument: old})["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert f"{argument}={old!r} is not a cursor this service issued" in error["message"]
        assert "read again without a cursor" in error["message"]


def test_a_line_whose_commit_was_held_open_is_delivered_once_by_the_next_before_page(
    api: Api, tables: Backend
) -> None:
    assert api.write(7, "note", {"text": "first"})
    cursor = page(api, limit=1)["pageInfo"]["startCursor"]
    # A second connection stamps a line now and holds its commit open.
    stamped = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(milliseconds=500)
    stamped = stamped.replace(microsecond=stamped.microsecond // 1000 * 1000)
    held = tables.sync.connect()
    transaction = held.begin()
    if tables.name == "sqlite":
        # SQLite has one writer at a time: the line already delivered is
        # written first, then the held one (stamped earlier, committed later).
        assert api.write(7, "note", {"text": "newer, committed"})
        held.execute(
            sa.text(LATE),
            {"at": stamped.isoformat(sep=" ", timespec="milliseconds")},
        )
    else:
        held.execute(
            sa.text(LATE),
            {"at": stamped},
        )
        assert api.write(7, "note", {"text": "newer, committed"})
    try:
        read = page(api, before=cursor)
        assert [n["kindName"] for n in read["nodes"]] == ["note"]
        newer = ids(read)
    finally:
        transaction.commit()
        held.close()
    late = tables.scalar("SELECT id FROM event_run_log WHERE detail LIKE '%late%'")
    # Its `at` is older than the line already delivered: a position alone would pass it by.
    assert tables.scalar(f"SELECT at FROM event_run_log WHERE id = {late}") < tables.scalar(
        f"SELECT at FROM event_run_log WHERE id = {newer[0]}"
    )
    after_commit = page(api, before=read["pageInfo"]["startCursor"])
    assert ids(after_commit) == [late]
    # Once: from its cursor, nothing more.
    assert ids(page(api, before=after_commit["pageInfo"]["startCursor"])) == []
    # And the same from the newer line's own cursor.
    assert ids(page(api, before=read["nodes"][0]["cursor"])) == [late]


def test_a_long_poll_answers_with_a_line_written_by_another_writer(api: Api, tables: Backend) -> None:
    assert api.write(7, "note", {"text": "first"})
    cursor = page(api, limit=1)["pageInfo"]["startCursor"]
    answer: dict[str, Any] = {}

    def poll() -> None:
        answer.update(page(api, before=cursor, wait=30))

    waiting = threading.Thread(target=poll)
    waiting.start()
    # Not through this app: as another process of the service would write it.
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    at: Any = now.isoformat(sep=" ", timespec="milliseconds") if tables.name == "sqlite" else now
    tables.execute(
        "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, 'note', '{\"text\": \"new\"}', :at)",
        at=at,
    )
    waiting.join(60)
    assert not waiting.is_alive()
    assert [n["kindName"] for n in answer["nodes"]] == ["note"]
    assert ids(answer) == [tables.scalar("SELECT MAX(id) FROM event_run_log")]


def test_a_long_poll_with_nothing_written_answers_an_empty_page_with_the_same_cursor(api: Api) -> None:
    assert api.write(7, "note", {"text": "first"})
    cursor = page(api, limit=1)["pageInfo"]["startCursor"]
    found = page(api, before=cursor, wait=1)
    assert found["nodes"] == []
    assert found["pageInfo"]["startCursor"] == cursor


def test_waits_past_the_process_cap_are_refused_with_a_clear_error(make_api: Any) -> None:
    api = make_api(max_waits=1)
    assert api.write(7, "note", {"text": "first"})
    cursor = page(api, limit=1)["pageInfo"]["startCursor"]
    answer: dict[str, Any] = {}
    waiting = threading.Thread(target=lambda: answer.update(page(api, before=cursor, wait=30)))
    waiting.start()
    watcher = api.client.app_state["watcher"]
    try:
        while watcher.waits < 1 and waiting.is_alive():
            time.sleep(0.01)
        body = api.post(PAGE, {"runId": "7", "before": cursor, "wait": 30})
        [error] = body["errors"]
        assert error["extensions"]["code"] == "TOO_MANY_WAITS"
        assert "RUNLOG_MAX_WAITS" in error["message"]
    finally:
        assert api.write(7, "note", {"text": "wake"})
        waiting.join(60)
    assert [n["kindName"] for n in answer["nodes"]] == ["note"]


def test_the_page_says_what_the_run_is_now_and_null_for_an_unknown_run(tables: Backend) -> None:
    tables.add_run(7, "completed", "2026-03-01 12:00:00", "2026-03-01 12:00:01")
    tables.add_run(37, "live", None, "2026-03-01 11:00:00")
    query = """query Q($runId: ID!) { runLog(runId: $runId) {
      nodes { detail { ... on RunBlockedDetail { blockingRun { id status } } } }
      run { id status terminal endedAt updatedAt } } }"""
    with recorded_statements(tables) as (api, taken):
        assert api.write(7, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
        taken()
        found = api.data(query, {"runId": "7"})["runLog"]
        # The page's run and the line's blocking run, in one query.
        assert len([s for s in taken() if "event_runs" in s]) == 1
        assert found["run"] == {
            "id": "7",
            "status": "completed",
            "terminal": True,
            "endedAt": "2026-03-01T12:00:00+00:00",
            "updatedAt": "2026-03-01T12:00:01+00:00",
        }
        assert found["nodes"][0]["detail"]["blockingRun"] == {"id": "37", "status": "live"}
        # A run the events system does not have: null, with its (empty) page.
        unknown = api.data(query, {"runId": "8"})["runLog"]
        assert unknown == {"nodes": [], "run": None}
        quiet = api.data(query, {"runId": "37"})["runLog"]
        assert quiet["nodes"] == [] and quiet["run"]["status"] == "live"


def test_the_readmes_both_ways_example_reads_older_and_newer_lines(api: Api) -> None:
    """README, Reading a run's log: the two operations, as written, page both ways."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Reading a run's log", 1)[1]
    document = section.split("```graphql\n", 1)[1].split("```", 1)[0]

    def run(name: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = api.client.post(
            "/graphql", json={"query": document, "operationName": name, "variables": variables}
        )
        body = response.json()
        assert "errors" not in body, body
        result: dict[str, Any] = body["data"]["runLog"]
        return result

    for n in range(3):
        assert api.write(7, "note", {"text": f"{n}"})
    older = run("Older", {"after": None})
    assert len(older["nodes"]) == 3
    newer = run("Newer", {"before": older["nodes"][-1]["cursor"]})
    assert ids(newer) == ids(older)[:2]
    assert newer["run"] is None  # no event_runs row for run 7 here
