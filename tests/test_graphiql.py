"""GraphiQL at /graphql opens on the example operations, every one of them runs,
and the page loads nothing from anywhere but the service.

tests/test_graphiql_browser.py opens the page in a real browser.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import shutil
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from strawberry.http.ides import get_graphql_ide_html

from gql.domain import demo
from gql.edge.app import create_app
from gql.edge.graphiql import OPERATIONS_DIR, OWN_FILES, STATIC_DIR, VENDOR_DIR, load_assets
from gql.settings import Settings

from .conftest import Api, Backend

BROWSER = {"Accept": "text/html"}
ROOT = Path(__file__).resolve().parent.parent


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
    found = re.search(r"^(?:query|mutation|subscription) (\w+)", tab["query"], re.M)
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
        "RunHolds",
        "RunsInFlight",
        "RunLogByKinds",
        "RunLogPage",
        "RunLines",
        "WriteNote",
        "RunLogTail",
    ]
    files = {path.stem: path.read_text() for path in OPERATIONS_DIR.glob("*.graphql")}
    for tab in tabs:
        # The tab is the operation file as written, comments and all.
        assert tab["query"].startswith(files[operation_name(tab)])


def test_graphiqls_tabs_have_names_of_their_own(demo_api: Api) -> None:
    # GraphiQL names a tab after its operation: two RunLog tabs could not be told apart.
    names = [operation_name(tab) for tab in served_tabs(demo_api)]
    assert len(set(names)) == len(names), names


def test_every_example_tab_runs_as_it_opens(demo_api: Api) -> None:
    results = {}
    for tab in served_tabs(demo_api):
        if operation_name(tab) == "RunLogTail":
            continue  # over the websocket: test_the_tail_tab_sees_the_note_the_write_note_tab_writes
        body = demo_api.post(tab["query"], json.loads(tab["variables"]))
        assert "errors" not in body, (operation_name(tab), body)
        if operation_name(tab) == "RunLines":  # finding a line
            found = body["data"]["runLog"]["nodes"]
            assert found and all("yew" in json.dumps(line).lower() for line in found)
        results.setdefault(operation_name(tab), body["data"])

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
    # The holds tab opens on run 38: blocked by run 37, and what holds 37 in turn.
    held = results["RunHolds"]["runLog"]["run"]
    assert held["headline"] == "Blocked by run 37, which holds invasion:Yew and is still live."
    assert held["holds"][0]["blockingRun"]["holds"][0]["reason"] == "STEP_PARKED"
    assert [run["id"] for run in results["RunsInFlight"]["runsInFlight"]["nodes"]] == ["38", "37"]


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


def test_the_tail_tab_sees_the_note_the_write_note_tab_writes(demo_api: Api) -> None:
    # What GraphiQL does with the tail tab: a websocket at the page's own /graphql.
    tabs = {operation_name(tab): tab for tab in served_tabs(demo_api)}
    tail, note = tabs["RunLogTail"], tabs["WriteNote"]
    with demo_api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        variables = json.loads(tail["variables"])
        # From a cursor of this moment rather than "from now on", which starts
        # when the subscription has started: the note written next may commit first.
        page = demo_api.data(
            "query N($r: ID!) { runLog(runId: $r, limit: 1) { pageInfo { startCursor } } }",
            {"r": variables["runId"]},
        )
        variables["since"] = page["runLog"]["pageInfo"]["startCursor"]
        payload = {"query": tail["query"], "variables": variables}
        ws.send_json({"type": "subscribe", "id": "tail", "payload": payload})
        demo_api.data(note["query"], json.loads(note["variables"]))
        message = ws.receive_json()
    assert message["type"] == "next", message
    line = message["payload"]["data"]["runLogTail"]
    assert line["detail"]["text"] == json.loads(note["variables"])["text"]
    assert line["cursor"]


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


def page_files(page: str) -> list[str]:
    """Every URL the page's markup loads (scripts and stylesheets)."""
    return re.findall(r'<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]+)"', page)


@pytest.fixture
def static_client(tmp_path: Path) -> Iterator[TestClient]:
    """The app on a fresh embedded database: the page and its files need no data."""
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}")
    with TestClient(create_app(settings)) as client:
        yield client


def test_the_page_loads_every_file_from_the_service_itself(static_client: TestClient) -> None:
    response = static_client.get("/graphql", headers=BROWSER)
    files = page_files(response.text)
    assert len(files) == 8  # React, ReactDOM, GraphiQL and its explorer, their CSS, the page's own
    manifest = json.loads((VENDOR_DIR / "assets.json").read_text())
    for url in files:
        # Relative to /graphql, so under whatever prefix a proxy gives the API.
        assert not re.match(r"^[a-z]+:|^//|^/", url), url
        served = static_client.get(f"/{url}", headers={"Accept-Encoding": "identity"})
        assert served.status_code == 200, url
        name = url.rsplit("/", 1)[1]
        if name in manifest["files"]:
            # Byte for byte what scripts/graphiql-assets took from npm.
            assert hashlib.sha256(served.content).hexdigest() == manifest["files"][name]
        assert served.headers["content-type"].startswith(
            "text/javascript" if name.endswith(".js") else "text/css"
        )
        assert served.headers["cache-control"] == "public, max-age=31536000, immutable"
        # The page's `integrity` attribute matches what is served.
        integrity = re.search(rf'"{re.escape(url)}" integrity="sha384-([^"]+)"', response.text)
        assert integrity and base64.b64decode(integrity.group(1)) == hashlib.sha384(served.content).digest()


def test_the_page_allows_no_other_origin(static_client: TestClient) -> None:
    response = static_client.get("/graphql", headers=BROWSER)
    policy = dict(
        directive.strip().split(" ", 1)
        for directive in response.headers["content-security-policy"].split(";")
    )
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no inline script, no eval, no CDN
    assert policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'"  # HTTP and the subscriptions' websocket
    for sources in policy.values():
        assert set(sources.split()) <= {"'self'", "'none'", "data:"}, sources
    # And nothing in the page names another host.
    assert not re.search(r"(?:src|href)=\"(?:[a-z]+:)?//", response.text)
    assert "unpkg.com" not in response.text
    assert "<script>" not in response.text  # no inline script for the policy to refuse


def test_graphiql_is_the_release_strawberrys_page_loads_from_its_cdn(static_client: TestClient) -> None:
    # Same bytes as the CDN's files: the same integrity hashes Strawberry's page pins.
    page = static_client.get("/graphql", headers=BROWSER).text
    ours = set(re.findall(r'integrity="(sha384-[^"]+)"', page))
    strawberry_page = get_graphql_ide_html("graphiql")
    theirs = dict(
        re.findall(r'(?:src|href)="(https://unpkg.com/[^"]+)"\s+integrity="(sha384-[^"]+)"', strawberry_page)
    )
    # js-cookie only reads Django's CSRF cookie, which this service has no use for.
    theirs = {url: digest for url, digest in theirs.items() if "js-cookie" not in url}
    assert len(theirs) == 6 and set(theirs.values()) <= ours, theirs


def test_a_file_is_served_compressed_to_a_browser_that_accepts_it(static_client: TestClient) -> None:
    page = static_client.get("/graphql", headers=BROWSER).text
    url = next(url for url in page_files(page) if url.endswith("/graphiql.min.js"))
    plain = static_client.get(f"/{url}", headers={"Accept-Encoding": "identity"})
    compressed = static_client.get(f"/{url}", headers={"Accept-Encoding": "gzip, deflate, br"})
    assert compressed.headers["content-encoding"] == "gzip"
    assert int(compressed.headers["content-length"]) < len(plain.content) / 3
    assert compressed.content == plain.content  # as the client decoded it


def test_only_the_current_files_are_served(static_client: TestClient) -> None:
    page = static_client.get("/graphql", headers=BROWSER).text
    url = page_files(page)[0]
    digest, name = url.split("/")[1:]
    # An old digest (a file since updated) or another name is not served, so
    # a URL always names the same bytes and may be cached for good.
    assert static_client.get(f"/graphiql/{'0' * 16}/{name}").status_code == 404
    assert static_client.get(f"/graphiql/{digest}/other.js").status_code == 404
    assert static_client.get(f"/graphiql/{digest}/assets.json").status_code == 404
    assert static_client.get(f"/graphiql/{digest}/../settings.py").status_code == 404


def test_the_files_in_the_package_are_the_ones_taken_from_npm() -> None:
    manifest = json.loads((VENDOR_DIR / "assets.json").read_text())
    on_disk = {path.name for path in VENDOR_DIR.iterdir()} - {"assets.json"}
    assert on_disk == set(manifest["files"])
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((VENDOR_DIR / name).read_bytes()).hexdigest() == digest, name
    # Pinned versions, each with npm's integrity for its tarball.
    for spec, package in manifest["packages"].items():
        assert re.fullmatch(r"@?[a-z/-]+@\d+\.\d+\.\d+", spec)
        assert package["integrity"].startswith("sha512-")
    # GraphiQL's build holds the graphql-ws client its subscriptions use.
    assert b"graphql-transport-ws" in (VENDOR_DIR / "graphiql.min.js").read_bytes()


def test_a_file_that_is_not_the_one_taken_from_npm_is_refused(tmp_path: Path) -> None:
    vendor, static = tmp_path / "graphiql", tmp_path
    shutil.copytree(VENDOR_DIR, vendor)
    for name in OWN_FILES:
        shutil.copy(STATIC_DIR / name, static / name)
    assert set(load_assets(vendor, static)) >= {"graphiql.min.js", "runlog-graphiql.js"}
    with (vendor / "graphiql.min.js").open("ab") as file:
        file.write(b"\n// edited by hand\n")
    with pytest.raises(
        RuntimeError, match=r"graphiql\.min\.js is not the file .* run scripts/graphiql-assets"
    ):
        load_assets(vendor, static)


def test_the_wheel_ships_every_file_the_page_needs() -> None:
    # pyproject.toml's package data covers every file under gql/static/.
    with open(ROOT / "pyproject.toml", "rb") as file:
        patterns = tomllib.load(file)["tool"]["setuptools"]["package-data"]["gql"]
    package = ROOT / "gql"
    shipped = {path for pattern in patterns for path in package.glob(pattern)}
    needed = {path for path in (package / "static").rglob("*") if path.is_file()}
    assert needed and needed <= shipped, sorted(str(p) for p in needed - shipped)


def test_the_examples_cannot_close_the_script_element_they_sit_in(api: Api) -> None:
    page = api.client.get("/graphql", headers=BROWSER).text
    found = re.search(r'id="runlog-example-tabs">(.*?)</script>', page, re.S)
    assert found and "<" not in found.group(1)


def test_no_graphiql_page_when_it_is_turned_off(make_api: Callable[..., Api]) -> None:
    page = make_api().client.get("/graphql", headers=BROWSER).text
    api = make_api(graphiql=False)
    response = api.client.get("/graphql", headers=BROWSER)
    assert "runlog-example-tabs" not in response.text
    for url in page_files(page):
        assert api.client.get(f"/{url}").status_code == 404
