"""A page query answered by its read plan (gql/engine/read_plan.py), and each way it falls back.

That the plan's answers are the executor's, byte for byte, is tests/test_prepared.py's:
each of its requests goes to an app answering prepared texts and to one that
sends everything through Strawberry. Here: a query the plan answers moves no
`read_plan` counter, and each one it leaves to the executor is counted with
its reason and still answered.
"""

from __future__ import annotations

from typing import Any

from .conftest import Api, Backend
from .test_fallbacks import fallbacks, moved

PAGE = "query P($runId: ID!, $n: Int) { runLog(runId: $runId, limit: $n) { nodes { id kindName } } }"


def twice(api: Api, query: str, variables: dict[str, Any]) -> tuple[dict[str, Any], dict[Any, float]]:
    """The second answer to `query` (the first prepares its text and compiles its page), and what it moved."""
    api.post(query, variables)
    before = fallbacks(api)
    body = api.post(query, variables)
    return body, moved(before, fallbacks(api))


def test_a_page_query_is_answered_by_its_plan_and_counts_nothing(tables: Backend, api: Api) -> None:
    for text in ("one", "two", "three"):
        assert api.write(7, "note", {"text": text})
    body, counted = twice(api, PAGE, {"runId": "7", "n": 2})
    assert [n["kindName"] for n in body["data"]["runLog"]["nodes"]] == ["note", "note"]
    assert counted == {}
    # Aliased, with its arguments inline: the same.
    body, counted = twice(api, '{ page: runLog(runId: "7", limit: 1) { nodes { id } } }', {})
    assert len(body["data"]["page"]["nodes"]) == 1
    assert counted == {}


def test_a_refusal_is_the_fields_error_with_data_null(tables: Backend, api: Api) -> None:
    assert "errors" not in api.post(PAGE, {"runId": "7"})  # its page planned
    body, counted = twice(api, PAGE, {"runId": "seven"})
    assert counted == {}
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["path"] == ["runLog"] and error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["locations"] == [{"line": 1, "column": PAGE.index("runLog") + 1}]


def test_what_the_plan_leaves_to_the_executor_is_counted_with_its_reason(tables: Backend, api: Api) -> None:
    assert api.write(7, "note", {"text": "one"})
    # Two runLog fields: not a query the plan covers.
    two = '{ a: runLog(runId: "7") { nodes { id } } b: runLog(runId: "7") { nodes { id } } }'
    body, counted = twice(api, two, {})
    assert len(body["data"]["a"]["nodes"]) == len(body["data"]["b"]["nodes"]) == 1
    assert counted == {("read_plan", "not_planned"): 1}
    # A variable that does not coerce: the executor's error for it.
    body, counted = twice(api, PAGE, {"runId": "7", "n": "many"})
    assert counted == {("read_plan", "not_coerced"): 1}
    assert "data" not in body and "$n" in body["errors"][0]["message"]  # a request error
    # An @include outcome the page has no plan for yet: the executor compiles it, then the plan answers.
    include = 'query I($d: Boolean!) { runLog(runId: "7") { nodes { id kindName @include(if: $d) } } }'
    assert "errors" not in api.post(include, {"d": True})
    assert "errors" not in api.post(include, {"d": True})  # prepared and planned for d: true
    before = fallbacks(api)
    assert api.post(include, {"d": False})["data"]["runLog"]["nodes"][0].keys() == {"id"}
    assert moved(before, fallbacks(api)) == {("read_plan", "not_compiled"): 1}
    before = fallbacks(api)
    assert api.post(include, {"d": False})["data"]["runLog"]["nodes"][0].keys() == {"id"}
    assert moved(before, fallbacks(api)) == {}


def test_a_page_the_plan_does_not_complete_is_read_again_by_the_executor(tables: Backend, api: Api) -> None:
    # The events system's table is gone: a line's blockingRun cannot be looked
    # up, the plan hands the page over, and graphql-core puts the error there.
    assert api.write(7, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
    tables.execute("DROP TABLE event_runs")
    query = "{ runLog(runId: 7) { nodes { detail { ... on RunBlockedDetail { blockingRun { id } } } } } }"
    body, counted = twice(api, query, {})
    assert body["data"]["runLog"]["nodes"] == [{"detail": {"blockingRun": None}}]
    assert body["errors"][0]["path"] == ["runLog", "nodes", 0, "detail", "blockingRun"]
    assert counted == {("read_plan", "unexpected_value"): 1, ("page_plan", "raised"): 1}
