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

import datetime
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gql.domain.details import EXAMPLES

from . import local
from .conftest import free_port, wait_until_healthy
from .test_graphiql_browser import CHROMIUM, NODE, REQUIRE_BROWSER, ROOT, _missing

DRIVER = ROOT / "tests" / "browser" / "run-page.mjs"
ARTIFACTS = ROOT / "artifacts"
READER = "reader-token-for-the-run-page"
WRITER = "writer-token-for-the-run-page"
ADMIN = "admin-token-for-the-run-page"
LONG_RUN = 41  # 2,501 lines, none in the demo: a line's link opens it around its oldest
LONG_RUN_LINES = 2501
KINDS_RUN = 42  # one line of every kind, each with its declared example detail
LASTED = r"for \d+ (s|min|h( \d+ min)?)"  # how long a hold has lasted, in words
WRITE = (
    "mutation W($runId: ID!, $kind: String!, $detail: JSON) "
    "{ writeRunLog(runId: $runId, kind: $kind, detail: $detail) }"
)


def _missing_here() -> str | None:
    missing = _missing()
    if missing is None and not (ROOT / "tests" / "browser" / "node_modules" / "axe-core").is_dir():
        return "axe-core is not installed (npm ci --prefix tests/browser)"
    return missing


def _add_a_long_run(database: Path) -> str:
    """Add LONG_RUN's lines, a second apart, straight into the table; the id of its oldest."""
    start = datetime.datetime(2026, 12, 1, 8, 0)
    detail = '{"text": "a line of the long run", "actor": "the browser test"}'
    ats = (start + datetime.timedelta(seconds=i) for i in range(LONG_RUN_LINES))
    with sqlite3.connect(database) as db:
        db.executemany(
            "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (?, 'note', ?, ?)",
            ((LONG_RUN, detail, at.isoformat(sep=" ", timespec="microseconds")) for at in ats),
        )
        (oldest,) = db.execute(
            "SELECT id FROM event_run_log WHERE run_id = ? ORDER BY at, id LIMIT 1", (LONG_RUN,)
        ).fetchone()
    return str(oldest)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
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
            "RUNLOG_ADMIN_TOKEN": ADMIN,
            "RUNLOG_TRUSTED_DOCUMENTS": "on",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_until_healthy(url, server)
        for kind, example in EXAMPLES.items():
            variables = {"runId": KINDS_RUN, "kind": kind.value, "detail": example}
            answer = local.post(
                f"{url}/graphql",
                json={"query": WRITE, "variables": variables},
                headers={"Authorization": f"Bearer {ADMIN}"},
            ).json()
            assert answer == {"data": {"writeRunLog": True}}, (kind, answer)
        yield {"url": url, "oldest": _add_a_long_run(database)}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


@pytest.fixture(scope="module")
def seen(served: dict[str, str]) -> dict[str, Any]:
    """One browser session for the module's tests: Chromium takes seconds to start."""
    done = subprocess.run(
        [NODE, str(DRIVER), served["url"], str(ARTIFACTS)],
        env={
            **os.environ,
            "CHROMIUM": CHROMIUM,
            "RUNLOG_TEST_READER_TOKEN": READER,
            "RUNLOG_TEST_WRITER_TOKEN": WRITER,
            "RUNLOG_TEST_ADMIN_TOKEN": ADMIN,
            "RUNLOG_TEST_LONG_RUN": f"{LONG_RUN}:{served['oldest']}",
            "RUNLOG_TEST_KINDS_RUN": str(KINDS_RUN),
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


def test_a_line_that_releases_a_step_updates_the_head_without_a_reload(seen: dict[str, Any]) -> None:
    assert "release" not in seen["failed"], (seen["failed"]["release"], seen.get("release"))
    before, after = seen["release"]["before"], seen["release"]["after"]
    assert "parked" in before["step"] and before["parked"].lower() in before["headline"].lower()
    # The parked hold left, the headline no longer says it, and the step box and count moved.
    assert "STEP_PARKED" not in after["holds"] and "STEP_REFUSED" in after["holds"]
    assert before["parked"].lower() not in after["headline"].lower()
    assert "step 3705: running" in after["step"]
    assert after["statusCount"] == before["statusCount"] + 1
    assert "parked → running" in after["row"]
    # By the small head query alone: the lines were not read again.
    assert "RunHead" in after["sent"] and "RunLines" not in after["sent"], after["sent"]
    # Five lines written together: the last head call counts them all, and never
    # was more than one head call in flight.
    together = seen["release"]["together"]
    assert together["notesAfter"] == together["notesBefore"] + 5
    assert together["headsAtOnce"] == 1
    # A line that came while a head call was in flight brought one more call after it.
    assert seen["release"]["duringCall"]["shown"] == seen["release"]["duringCall"]["expected"]


def test_a_link_to_the_oldest_line_of_a_long_run_shows_it_marked_every_time(seen: dict[str, Any]) -> None:
    assert "oldestLink" not in seen["failed"], seen["failed"]["oldestLink"]
    tries = seen["oldest"]["tries"]
    assert len(tries) == 5
    marked_in_view = {"drawn": True, "marked": True, "inWindow": True, "inTable": True}
    assert all(shown == marked_in_view for shown in tries), tries


def _values(detail: Any) -> Iterator[str]:
    """A detail's values a reader should find on the page as written.

    Not its keys, times (shown in the reader's zone), booleans or enum values (said in words:
    `OVER_CAP` is "over the ... cap").
    """
    if isinstance(detail, dict):
        for value in detail.values():
            yield from _values(value)
    elif isinstance(detail, list):
        for value in detail:
            yield from _values(value)
    elif isinstance(detail, bool) or detail is None:
        return
    elif not re.match(r"\d{4}-\d\d-\d\dT|[A-Z_]+$", str(detail)):
        yield str(detail)


def test_every_kinds_detail_shows_as_words_not_json(seen: dict[str, Any]) -> None:
    assert "kinds" not in seen["failed"], seen["failed"]["kinds"]
    shown = {row["kind"].split("(")[0].strip().split()[-1]: row["summary"] for row in seen["kinds"]}
    assert set(shown) == {kind.value for kind in EXAMPLES}
    for kind, example in EXAMPLES.items():
        summary = shown[kind.value]
        assert not re.search(r'[{}\[\]"]', summary), (kind.value, summary)
        missing = [value for value in _values(example) if value not in summary]
        assert not missing, (kind.value, summary, missing)


def test_a_phases_moments_are_listed_in_time_order(seen: dict[str, Any]) -> None:
    moments = seen["run37"]["moments"]
    # The demo's phase 2: gated at 4.2 minutes, advanced at 52.01, entered at 52.1.
    assert [moment.split()[0] for moment in moments] == ["gated", "advanced", "entered"]
    times = [moment.split(" ", 1)[1] for moment in moments]
    assert times == sorted(times)


def test_a_refused_steps_box_names_its_switch_and_a_step_with_no_line_says_so(seen: dict[str, Any]) -> None:
    run = seen["run37"]
    assert "events.caps.spawns.yew" in run["refusedStep"] and "spawns" in run["refusedStep"]
    assert "step 3706: no line yet" in run["noLineStep"]
    assert "3706" not in run["holds"]  # a step with no line is not one of the holds


def test_the_runs_list_keeps_only_the_runs_held_as_its_url_says(seen: dict[str, Any]) -> None:
    assert "runFilters" not in seen["failed"], seen["failed"]["runFilters"]
    listed = seen["runFilters"]
    # Run 37 waits on a parked step; run 38 is blocked by run 37 on invasion:Yew.
    assert listed["parked"] == ["37"] and listed["parkedChecked"]
    assert listed["byRun37"] == ["38"]
    assert listed["byKey"] == ["38"] and listed["keyShown"] == "invasion:Yew"
    # A reason ticked on the page joins the URL's, and the list follows it.
    assert listed["ticked"]["search"] == "?reason=BLOCKED_BY_RUN&reason=STEP_PARKED"
    assert sorted(listed["ticked"]["runs"]) == ["37", "38"]
    # Each run says how long its first hold has lasted and when its newest line came.
    assert all(re.fullmatch(LASTED, held) for held in listed["held"]), listed["held"]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", at) for at in listed["lastLine"])


def test_run_37s_timeline_is_drawn_with_a_bar_per_state_and_each_hold_says_how_long(
    seen: dict[str, Any],
) -> None:
    spans = {(span["phase"], span["step"], span["state"], span["open"]) for span in seen["run37"]["spans"]}
    # The demo's run 37: phase 1 completed, phase 2 open; step 3701 retried, then done;
    # 3704 refused and 3705 parked, both still.
    assert ("1", "", "completed", "false") in spans and ("2", "", "entered", "true") in spans
    assert ("1", "3701", "retrying", "false") in spans and ("1", "3701", "done", "true") in spans
    assert ("2", "3704", "refused", "true") in spans and ("2", "3705", "parked", "true") in spans
    held = seen["run37"]["heldFor"]
    assert len(held) == 2 and all(re.fullmatch(LASTED, words) for words in held), held


def test_the_open_spans_grow_with_the_clock_and_a_new_line_adds_a_span_live(seen: dict[str, Any]) -> None:
    assert "grows" not in seen["failed"], seen["failed"]["grows"]
    assert seen["grows"]["after"] > seen["grows"]["before"]
    assert "ganttLive" not in seen["failed"], seen["failed"]["ganttLive"]
    live = seen["ganttLive"]
    assert live["after"] == live["before"] + 1 and live["open"] == "true"
    assert live["sameDocument"]  # no reload: the head's refresh brought the timeline
