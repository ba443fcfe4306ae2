"""GraphiQL in a real browser, with no network but the service's own.

Starts `python -m gql serve --demo` on a random port and drives Debian's
Chromium (/usr/bin/chromium, or CHROMIUM) with `playwright-core` from
tests/browser/ (`npm ci --prefix tests/browser`), never a browser Playwright
downloaded. Every request to another host is refused and noted. The browser
opens GraphiQL, runs the RunLog example tab it opens on, and saves a
screenshot to artifacts/graphiql.png (the artifact CI keeps). Then it starts
the runLogTail subscription in one GraphiQL page, writes a note with the
WriteNote example in another, once /metrics counts the subscription, and sees
it arrive in the first (artifacts/graphiql-tail.png). The page's fetcher is
also handed what GraphiQL hands it when a text is run before its own parse
caught up (the document and operation name of the text before), whatever the
machine's speed.

`.ci/run` installs Chromium when it is missing, runs `npm ci`, and sets
RUNLOG_TEST_REQUIRE_BROWSER=1, so that in CI a missing browser fails this test.
Elsewhere a missing browser or node_modules skips it with the command that
installs them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gql.domain import demo_runs
from gql.edge.graphiql import example_tabs

from .conftest import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "tests" / "browser" / "graphiql.mjs"
SCREENSHOT = ROOT / "artifacts" / "graphiql.png"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("RUNLOG_TEST_REQUIRE_BROWSER") == "1"


NODE = shutil.which("node") or "node"


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (apt-get install -y nodejs npm)"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    if not (ROOT / "tests" / "browser" / "node_modules" / "playwright-core").is_dir():
        return "playwright-core is not installed (npm ci --prefix tests/browser)"
    return None


@pytest.fixture(scope="module")
def served_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service on the demo runs, as `scripts/serve --demo` starts it."""
    missing = _missing()
    if missing is not None:
        if REQUIRE_BROWSER:
            pytest.fail(f"RUNLOG_TEST_REQUIRE_BROWSER=1, but {missing}")
        pytest.skip(missing)
    database = tmp_path_factory.mktemp("browser") / "runlog.db"
    url = f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--demo", "--port", url.rsplit(":", 1)[1]],
        env={
            **os.environ,
            "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "RUNLOG_LOG_LEVEL": "WARNING",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_until_healthy(url, server)
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def open_graphiql(url: str, *options: str) -> dict[str, Any]:
    """What the browser saw; the screenshot is left at SCREENSHOT."""
    SCREENSHOT.unlink(missing_ok=True)
    done = subprocess.run(
        [NODE, str(DRIVER), url, str(SCREENSHOT), *options],
        env={**os.environ, "CHROMIUM": CHROMIUM},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    # Which hosts it tried first: the usual reason for a page that never loads.
    assert report["offHost"] == [], report["offHost"]
    assert report["error"] is None and done.returncode == 0, (report["error"], done.stderr)
    return report


def readme_subscription() -> str:
    """The subscription the README says to start in GraphiQL."""
    found = re.search(
        r"```graphql\n(subscription \{ runLogTail.*?)\n```", (ROOT / "README.md").read_text(), re.S
    )
    assert found, "the README shows no runLogTail subscription to start in GraphiQL"
    return found.group(1)


@pytest.fixture(scope="module")
def seen(served_demo: str) -> dict[str, Any]:
    """One browser session for the module's tests: Chromium takes seconds to start."""
    return open_graphiql(served_demo, f"--tail={readme_subscription()}")


def test_graphiql_loads_nothing_from_another_host_and_breaks_no_rule_of_its_policy(
    seen: dict[str, Any],
) -> None:
    # Nothing was even attempted towards another host, and nothing was refused.
    assert seen["offHost"] == []
    assert seen["cspViolations"] == []
    assert seen["pageErrors"] == [] and seen["consoleErrors"] == []
    assert seen["status"] == 200 and seen["title"] == "Run log API · GraphiQL"
    assert "default-src 'none'" in seen["contentSecurityPolicy"]
    assert all(path == "/graphql" or path.startswith("/graphiql/") for path in seen["requests"])
    assert SCREENSHOT.stat().st_size > 10_000


def test_graphiql_opens_in_a_browser_on_the_example_tabs(seen: dict[str, Any]) -> None:
    assert seen["tabs"] == [tab.name for tab in example_tabs()]
    assert len(set(seen["tabs"])) == len(seen["tabs"])  # each tab told apart by its name
    assert seen["activeTab"] == "RunLog"
    assert json.loads(seen["variables"]) == {"runId": str(demo_runs.INVASION), "limit": 50}


def test_graphiql_opened_again_shows_the_same_tabs(seen: dict[str, Any]) -> None:
    # GraphiQL 3 added a tab each time the page was opened again.
    assert seen["tabsWhenReopened"] == seen["tabs"]


def test_a_shared_link_opens_its_query(seen: dict[str, Any]) -> None:
    assert seen["sharedLink"] == {"activeTab": "Shared", "query": "query Shared { __typename }"}


def test_a_text_run_before_graphiql_parsed_it_is_sent_as_it_reads(seen: dict[str, Any]) -> None:
    # GraphiQL hands the fetcher the document and operation name of the text
    # before (a shared link's "Shared"), as when a text is pasted and run at once.
    stale = seen["staleParse"]
    assert "errors" not in stale["query"], stale["query"]
    assert len(stale["query"]["data"]["runLog"]["nodes"]) == 2
    # The subscription went over the websocket and caught up with the newest line.
    assert stale["subscription"] == {"data": {"runLogTail": {"id": stale["newest"]}}}


def test_the_runlog_example_runs_in_a_browser_and_shows_typed_details(seen: dict[str, Any]) -> None:
    result = seen["result"]
    assert "errors" not in result, result
    lines = result["data"]["runLog"]["nodes"]
    assert lines and {line["runId"] for line in lines} == {str(demo_runs.INVASION)}
    typenames = {line["detail"]["__typename"] for line in lines if line["detail"] is not None}
    assert {"RunBudgetDetail", "StepRefusedDetail", "ConditionEvaluatedDetail"} <= typenames
    refused = next(line["detail"] for line in lines if line["detail"]["__typename"] == "StepRefusedDetail")
    assert refused["refusal"] == "OVER_CAP"


def test_the_explorer_and_the_docs_show_the_schema(seen: dict[str, Any]) -> None:
    # It opens on the tab's query, with every field of Query to add.
    assert {"runLog", "retention", "RunLogLineFields"} <= set(seen["explorer"].splitlines())
    assert "RunLogPage" in seen["docs"]


def test_graphiql_sends_subscriptions_to_the_same_url_over_a_websocket(
    served_demo: str, seen: dict[str, Any]
) -> None:
    assert seen["subscriptionUrl"] == served_demo.replace("http://", "ws://") + "/graphql"


def test_a_note_written_in_one_graphiql_tab_arrives_on_the_tail_running_in_another(
    served_demo: str, seen: dict[str, Any]
) -> None:
    tail = seen["tail"]
    assert tail["arrived"] is not None, f"no note written arrived on the tail: {tail['written']}"
    line = tail["arrived"]["data"]["runLogTail"]
    assert line["kind"] == "NOTE" and line["detail"]["__typename"] == "NoteDetail"
    written = {note["text"]: note["answer"] for note in tail["written"]}
    assert written[line["detail"]["text"]] == {"data": {"writeRunLog": True}}
    assert line["detail"]["actor"] == "the browser test"
    # It keeps running after the line arrived: a tail, not a single answer.
    assert tail["running"]
    # Websockets only to the page's own /graphql; none refused.
    assert set(seen["websockets"]) == {served_demo.replace("http://", "ws://") + "/graphql"}
    assert tail["cspViolations"] == []
