"""The run page in a real browser, on the demo, as an operator uses it on the night.

Starts `python -m gql serve --demo` with a reader's and a writer's token and
RUNLOG_TRUSTED_DOCUMENTS=on (so the page must send its operations by
`documentId` and the token), and drives Debian's Chromium with
tests/browser/run-page.mjs, as tests/test_graphiql_browser.py drives GraphiQL:
the script prints what it saw as JSON, and leaves screenshots under
artifacts/ (run-page.png is the README's). A missing browser or
node_modules skips, unless RUNLOG_TEST_REQUIRE_BROWSER=1 (CI).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import free_port, wait_until_healthy
from .test_graphiql_browser import CHROMIUM, NODE, REQUIRE_BROWSER, ROOT, _missing

DRIVER = ROOT / "tests" / "browser" / "run-page.mjs"
ARTIFACTS = ROOT / "artifacts"
READER = "reader-token-for-the-run-page"
WRITER = "writer-token-for-the-run-page"


def _missing_here() -> str | None:
    missing = _missing()
    if missing is None and not (ROOT / "tests" / "browser" / "node_modules" / "axe-core").is_dir():
        return "axe-core is not installed (npm ci --prefix tests/browser)"
    return missing


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    missing = _missing_here()
    if missing is not None:
        if REQUIRE_BROWSER:
            pytest.fail(f"RUNLOG_TEST_REQUIRE_BROWSER=1, but {missing}")
        pytest.skip(missing)
    database = tmp_path_factory.mktemp("run-page") / "runlog.db"
    url = f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--demo", "--port", url.rsplit(":", 1)[1]],
        env={
            **os.environ,
            "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "RUNLOG_LOG_LEVEL": "WARNING",
            "RUNLOG_READER_TOKEN": READER,
            "RUNLOG_WRITER_TOKEN": WRITER,
            "RUNLOG_TRUSTED_DOCUMENTS": "on",
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


@pytest.fixture(scope="module")
def seen(served: str) -> dict[str, Any]:
    """One browser session for the module's tests: Chromium takes seconds to start."""
    done = subprocess.run(
        [NODE, str(DRIVER), served, str(ARTIFACTS)],
        env={
            **os.environ,
            "CHROMIUM": CHROMIUM,
            "RUNLOG_TEST_READER_TOKEN": READER,
            "RUNLOG_TEST_WRITER_TOKEN": WRITER,
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["offHost"] == [], report["offHost"]
    assert report["error"] is None and done.returncode == 0, (report["error"], done.stderr)
    return report


def test_the_page_loads_nothing_from_another_host_and_breaks_no_rule_of_its_policy(
    seen: dict[str, Any],
) -> None:
    assert seen["cspViolations"] == []
    assert seen["pageErrors"] == [] and seen["consoleErrors"] == [], (
        seen["pageErrors"],
        seen["consoleErrors"],
    )
    for name in (
        "run-page-runs.png",
        "run-page-38.png",
        "run-page.png",
        "run-page-resumed.png",
        "run-page-line.png",
    ):
        assert (ARTIFACTS / name).stat().st_size > 10_000, name


def test_the_page_sends_the_shipped_operations_by_id_with_the_token(seen: dict[str, Any]) -> None:
    sent = seen["sent"]
    assert sent and all(call["documentId"] and call["query"] is None for call in sent)
    # Without a token the page said, in words, that the calls were refused and why.
    assert "RunsInFlight was refused" in seen["refused"] and "not a reader" in seen["refused"]
    assert f"Bearer {READER}" in {call["authorization"] for call in sent}


def test_the_runs_in_flight_are_listed_with_what_holds_each(seen: dict[str, Any]) -> None:
    rows = {row.split("\t")[0]: row for row in seen["runs"]["rows"]}
    assert set(rows) == {"run 37", "run 38"}  # the demo's runs not terminal
    assert "Blocked by run 37" in rows["run 38"]


def test_run_38_is_blocked_by_run_37_with_a_link_to_it(seen: dict[str, Any]) -> None:
    assert "BLOCKED_BY_RUN" in seen["blocked"]["hold"] and "Blocked by run 37" in seen["blocked"]["hold"]
    assert seen["blocked"]["href"] == "../runs/37"
    assert "blocked by run 37" in seen["blocked"]["row"]  # the line's own detail links it too


def test_run_37_shows_what_holds_it_its_step_parked_on_a_gm(seen: dict[str, Any]) -> None:
    run = seen["run37"]
    assert run["title"] == "Run 37 · Run log" and run["rows"] > 5
    assert "GM" in run["parked"] and "GM" in run["headline"]
    assert "Phase 2" in run["timeline"] and "step 3705: parked" in run["timeline"]


def test_a_holds_evidence_opens_the_table_on_its_line(seen: dict[str, Any]) -> None:
    evidence = seen["evidence"]
    assert evidence["search"] == evidence["href"].split("37", 1)[1]
    assert "step.parked" in evidence["highlighted"]


def test_a_step_in_the_timeline_filters_the_table_by_it(seen: dict[str, Any]) -> None:
    step = seen["stepFilter"]
    assert step["search"] == "?step=3704" and step["pressed"] == "true"
    assert step["rows"] and all("3704" in row for row in step["rows"])


def test_a_kind_filter_shows_only_that_kind_and_lives_in_the_url(seen: dict[str, Any]) -> None:
    kind = seen["kindFilter"]
    assert kind["search"] == "?kind=STEP_REFUSED" and kind["rows"] >= 1
    assert kind["checkedAfterReload"] and kind["rowsAfterReload"] == kind["rows"]


def test_a_line_written_arrives_and_a_cut_socket_resumes_without_a_gap_or_a_double(
    seen: dict[str, Any],
) -> None:
    assert "written live" in seen["live"]["arrived"]
    assert "dropped" in seen["dropped"] and "cut by the test" in seen["dropped"]
    assert seen["resumed"].startswith("Live again")
    after = seen["afterDrop"]
    assert after["heldOff"] >= 1  # it tried to reconnect while the line was written
    assert after["counts"] == [1, 1, 1] and after["added"] == 3
    assert [row.split("\n")[-1].split(" (")[0] for row in after["order"]] == [
        "written after",
        "written while the socket was down",
        "written live",
    ]


def test_a_lines_link_opens_the_page_on_that_line_highlighted(seen: dict[str, Any]) -> None:
    link = seen["lineLink"]
    assert link["href"].endswith(f"?line={link['lineId']}")
    assert link["highlighted"] == link["lineId"] and link["current"] == "true" and link["inView"]


def test_the_keyboard_moves_between_lines_and_opens_one(seen: dict[str, Any]) -> None:
    keyboard = seen["keyboard"]
    assert keyboard["focused"] == keyboard["rows"][1]
    assert keyboard["detail"].startswith(f"Line {keyboard['rows'][1]}:")


def test_times_in_local_time_are_remembered(seen: dict[str, Any]) -> None:
    assert seen["times"]["chosen"] == "local"
    assert "UTC" not in seen["times"]["first"] and re.search(r"[+-]\d\d:\d\d$", seen["times"]["first"])


def test_no_serious_or_critical_accessibility_violation(seen: dict[str, Any]) -> None:
    assert seen["runs"]["accessibility"] == []
    assert seen["blocked"]["accessibility"] == []
    assert seen["run37"]["accessibility"] == []
