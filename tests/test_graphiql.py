"""GraphiQL at /graphql opens on the example operations, and every one of them runs."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from strawberry.http.ides import get_graphql_ide_html

from gql import demo
from gql.graphiql import OPERATIONS_DIR

from .conftest import Api, Backend

BROWSER = {"Accept": "text/html"}


def served_tabs(api: Api) -> list[dict[str, Any]]:
    """The example tabs the page hands GraphiQL, as a browser would receive them."""
    response = api.client.get("/graphql", headers=BROWSER)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    found = re.search(
        r'<script type="application/json" id="runlog-example-tabs">(.*?)</script>',
        response.text,
        re.S,
    )
    assert found, "the page carries no example tabs"
    tabs: list[dict[str, Any]] = json.loads(found.group(1))
    return tabs


def operation_name(tab: dict[str, Any]) -> str:
    found = re.search(r"^(?:query|mutation) (\w+)", tab["query"], re.M)
    assert found
    return found.group(1)


@pytest.fixture
def demo_api(make_api: Callable[..., Api], tables: Backend) -> Api:
    asyncio.run(demo.load_into(tables.settings(), allow_non_embedded=True))
    return make_api()


def test_graphiql_opens_on_one_tab_per_example_operation_in_the_repo(demo_api: Api) -> None:
    tabs = served_tabs(demo_api)
    assert [operation_name(tab) for tab in tabs] == [
        "RunLog",
        "RunLogByKinds",
        "RunLogPage",
        "WriteNote",
    ]
    files = {path.stem: path.read_text() for path in OPERATIONS_DIR.glob("*.graphql")}
    for tab in tabs:
        # The tab is the operation file as written, comments and all.
        assert tab["query"].startswith(files[operation_name(tab)])


def test_every_example_tab_runs_as_it_opens(demo_api: Api) -> None:
    results = {}
    for tab in served_tabs(demo_api):
        body = demo_api.post(tab["query"], json.loads(tab["variables"]))
        assert "errors" not in body, (operation_name(tab), body)
        results[operation_name(tab)] = body["data"]

    lines = results["RunLog"]["runLog"]["nodes"]
    typenames = {line["detail"]["__typename"] for line in lines}
    assert {"PhaseGateDetail", "ConditionEvaluatedDetail", "StepRefusedDetail"} <= typenames
    assert "UnreadableDetail" not in typenames
    by_kinds = results["RunLogByKinds"]["runLog"]["nodes"]
    assert {line["kind"] for line in by_kinds} == {
        "PHASE_GATE",
        "CONDITION_EVALUATED",
        "PHASE_ADVANCED",
    }
    page = results["RunLogPage"]["runLog"]
    assert len(page["nodes"]) == 5 and page["pageInfo"]["hasNextPage"]
    assert results["WriteNote"] == {"writeRunLog": True}


def test_the_paging_tab_reads_the_whole_log_by_passing_end_cursor_as_after(
    demo_api: Api,
) -> None:
    tab = next(t for t in served_tabs(demo_api) if operation_name(t) == "RunLogPage")
    variables = json.loads(tab["variables"])
    seen: list[str] = []
    while True:
        page = demo_api.data(tab["query"], variables)["runLog"]
        seen += [line["id"] for line in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        variables["after"] = page["pageInfo"]["endCursor"]
    whole = demo_api.data(tab["query"], {**variables, "after": None, "limit": None})["runLog"]
    assert seen == [line["id"] for line in whole["nodes"]]
    assert len(seen) > variables["limit"]


def test_the_note_written_from_graphiql_is_in_the_log(demo_api: Api) -> None:
    tabs = {operation_name(tab): tab for tab in served_tabs(demo_api)}
    note = json.loads(tabs["WriteNote"]["variables"])
    assert demo_api.data(tabs["WriteNote"]["query"], note) == {"writeRunLog": True}
    # Leaving the optional actor out still stores the note.
    without_actor = {"runId": note["runId"], "text": "no actor given"}
    assert demo_api.data(tabs["WriteNote"]["query"], without_actor) == {"writeRunLog": True}

    lines = demo_api.data(tabs["RunLog"]["query"], {"runId": note["runId"]})["runLog"]["nodes"]
    notes = [line["detail"] for line in lines if line["kind"] == "NOTE"]
    assert notes[:2] == [
        {"__typename": "NoteDetail", "text": "no actor given", "actor": None},
        {"__typename": "NoteDetail", "text": note["text"], "actor": note["actor"]},
    ]


def test_graphiql_loads_the_same_way_strawberrys_page_does(api: Api) -> None:
    page = api.client.get("/graphql", headers=BROWSER).text
    strawberry_page = get_graphql_ide_html("graphiql")
    scripts = re.findall(r"<script\s+crossorigin\s+src=.*?></script>", strawberry_page, re.S)
    assert scripts, "Strawberry's page has no script tags to compare with"
    for script in scripts:
        assert script in page  # same release, same CDN, same integrity hashes
    assert "<title>Run log API · GraphiQL</title>" in page
    # Strawberry's welcome text would otherwise replace the first example tab.
    assert "parameters.q || EXAMPLE_QUERY" not in page


def test_the_examples_cannot_close_the_script_element_they_sit_in(api: Api) -> None:
    page = api.client.get("/graphql", headers=BROWSER).text
    found = re.search(r'id="runlog-example-tabs">(.*?)</script>', page, re.S)
    assert found and "<" not in found.group(1)


def test_no_graphiql_page_when_it_is_turned_off(make_api: Callable[..., Api]) -> None:
    api = make_api(graphiql=False)
    response = api.client.get("/graphql", headers=BROWSER)
    assert "runlog-example-tabs" not in response.text
