"""What /metrics shows of the runs' holds: bounded however many runs are in flight, and only to a reader."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gql import store
from gql.edge import hold_metrics
from gql.edge.app import create_app
from gql.edge.hold_metrics import HOLDS_PER_RUN
from gql.settings import Settings, SettingsError
from gql.store.db import create_engine

from .conftest import Api, Backend, sent_statements, sqlite_alone

READER, WRITER, ADMIN = "reader-token-0123456789", "writer-token-0123456789", "admin-token-01234567890"
ROOT = Path(__file__).resolve().parent.parent
# Seconds to wait for a scrape to show what was written (a read serves the scrapes of the next second).
WITHIN = 30


def _scrape(api: Api, token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = api.client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return response.text


def _values(text: str, name: str) -> dict[str, float]:
    """Each sample of `name`: its labels' text, and its value."""
    return {labels: float(value) for labels, value in re.findall(rf"^{name}(\{{.*\}})? (\S+)$", text, re.M)}


def _park(api: Api, run_id: int, step_id: int, token: str | None = None) -> None:
    body = api.post(
        'mutation($r: ID!, $s: ID) { writeRunLog(runId: $r, kind: "step.parked", stepId: $s, phase: 1, '
        'detail: {waitingFor: "a GM to say go"}) }',
        {"r": str(run_id), "s": str(step_id)},
        token,
    )
    assert body == {"data": {"writeRunLog": True}}, body


def _until(api: Api, shown: Callable[[str], bool], token: str | None = None) -> str:
    deadline = time.monotonic() + WITHIN
    while True:
        text = _scrape(api, token)
        if shown(text):
            return text
        assert time.monotonic() < deadline, text
        time.sleep(0.1)


def test_the_series_stay_bounded_however_many_runs_are_in_flight(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api(hold_alert_runs=3, public_url="https://runlog.example.test")
    for run_id in range(1, 9):
        tables.add_run(run_id, "live", None, "2026-06-01 18:00:00")
        _park(api, run_id, 100 + run_id)
    for step_id in range(1, HOLDS_PER_RUN + 3):  # run 8, the newest, held twelve times over
        _park(api, 8, 800 + step_id)
    text = _until(api, lambda text: len(_values(text, "runlog_hold_since_seconds")) > 2)

    since = _values(text, "runlog_hold_since_seconds")
    runs = sorted({int(m) for m in re.findall(r'run_id="(\d+)"', "".join(since))})
    assert runs == [6, 7, 8]  # the three with the newest activity
    assert len(since) == 2 + HOLDS_PER_RUN
    assert _values(text, "runlog_hold_runs_left_out") == {"": 5.0}
    assert _values(text, "runlog_holds_left_out") == {"": 3.0}  # run 8's thirteen holds, ten shown
    info = _values(text, "runlog_hold_info")
    assert len(info) == len(since)
    [seven] = [labels for labels in info if 'run_id="7"' in labels]
    assert 'url="https://runlog.example.test/runs/7"' in seven
    assert 'sentence="Step 107 waits on a human: a GM to say go."' in seven


def test_metrics_shows_no_hold_to_a_caller_who_may_not_read(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api(reader_tokens=(READER,), writer_tokens=(WRITER,), admin_tokens=(ADMIN,))
    tables.add_run(5, "live", None, "2026-06-01 18:00:00")
    _park(api, 5, 55, WRITER)
    for token in (READER, ADMIN):
        shown = _until(api, lambda text: "runlog_hold_since_seconds{" in text, token)
        assert "a GM to say go" in shown
        assert _values(shown, "runlog_holds_visible") == {"": 1.0}
    for stranger in (None, WRITER, "not-a-token-of-this-service"):
        hidden = _scrape(api, stranger)
        assert "runlog_hold_since_seconds" not in hidden
        assert "runlog_hold_info" not in hidden
        assert "a GM to say go" not in hidden
        assert 'run_id="5"' not in hidden
        assert _values(hidden, "runlog_holds_visible") == {"": 0.0}
        # The rest of /metrics is served as before.
        assert "runlog_requests_total" in hidden


def test_each_reason_s_threshold_is_served_and_a_hold_ended_by_a_line_goes(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api(hold_alert_after=600.0, hold_alert_after_by_reason=(("STEP_PARKED", 30.0),))
    after = _values(_scrape(api), "runlog_hold_alert_after_seconds")
    assert after['{reason="STEP_PARKED"}'] == 30.0
    assert after['{reason="WAITING_AT_GATE"}'] == 600.0
    assert len(after) == 6

    tables.add_run(4, "live", None, "2026-06-01 18:00:00")
    _park(api, 4, 44)
    _until(api, lambda text: 'subject="step:44"' in text)
    api.write("4", "step.status", {"from": "parked", "to": "running"}, stepId="44", phase=1)
    _until(api, lambda text: "runlog_hold_since_seconds{" not in text)


def test_a_bad_alert_setting_stops_start_up_naming_it() -> None:
    with pytest.raises(SettingsError, match=r"RUNLOG_HOLD_ALERT_AFTER_BY_REASON=.*STEP_PARKED=300"):
        Settings.from_env({"RUNLOG_HOLD_ALERT_AFTER_BY_REASON": "300"})
    named = Settings.from_env({"RUNLOG_HOLD_ALERT_AFTER_BY_REASON": "PARKED=300"})
    with pytest.raises(
        SettingsError, match=r"RUNLOG_HOLD_ALERT_AFTER_BY_REASON names PARKED, not a hold reason"
    ):
        create_app(named)
    with pytest.raises(SettingsError, match=r"RUNLOG_HOLD_ALERT_AFTER_BY_REASON=.*STEP_PARKED: expected"):
        Settings.from_env({"RUNLOG_HOLD_ALERT_AFTER_BY_REASON": "STEP_PARKED=0"})
    with pytest.raises(SettingsError, match=r"RUNLOG_PUBLIC_URL=.*https://runlog.example.com"):
        Settings.from_env({"RUNLOG_PUBLIC_URL": "runlog.example.com"})
    with pytest.raises(SettingsError, match=r"RUNLOG_HOLD_ALERT_RUNS="):
        Settings.from_env({"RUNLOG_HOLD_ALERT_RUNS": "0"})
    given = Settings.from_env(
        {
            "RUNLOG_HOLD_ALERT_AFTER_BY_REASON": "step_parked=300, STEP_RETRYING=1800",
            "RUNLOG_PUBLIC_URL": "https://r.example/",
        }
    )
    assert given.hold_alert_after_by_reason == (("STEP_PARKED", 300.0), ("STEP_RETRYING", 1800.0))
    assert given.public_url == "https://r.example"


def test_compose_mounts_deploy_s_files_where_the_images_read_them() -> None:
    compose = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    mounted = dict(re.findall(r"- \./(deploy/\S+):(/etc/\S+):ro$", compose, re.M))
    assert mounted == {
        "deploy/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
        "deploy/prometheus/alerts.yml": "/etc/prometheus/alerts.yml",
        "deploy/alertmanager/alertmanager.yml": "/etc/alertmanager/alertmanager.yml",
        "deploy/nginx/runlog.conf": "/etc/nginx/conf.d/default.conf",  # the nginx image's server
    }
    for path in mounted:
        assert (ROOT / path).is_file()
    # Where prometheus.yml loads the rules from is where compose puts them.
    assert "- /etc/prometheus/alerts.yml" in (ROOT / "deploy/prometheus/prometheus.yml").read_text()


def test_holds_that_cannot_be_read_again_stay_shown_with_when_they_were_read(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api()
    tables.add_run(3, "live", None, "2026-06-01 18:00:00")
    _park(api, 3, 33)
    before = _until(api, lambda text: 'subject="step:33"' in text)
    read_at = _values(before, "runlog_holds_read_at_seconds")
    tables.execute("DROP TABLE event_runs")  # every read of the holds fails from now on
    failed = '{where="metrics.holds"}'
    after = _until(api, lambda text: _values(text, "runlog_errors_swallowed_total").get(failed, 0) >= 1)
    # An alert on it does not resolve because the database did not answer; its age is told.
    assert _values(after, "runlog_hold_since_seconds") == _values(before, "runlog_hold_since_seconds")
    assert _values(after, "runlog_holds_read_at_seconds") == read_at


def _cleanup(api: Api, run_id: int, group: str, *, failed: bool) -> None:
    if failed:
        detail = {"group": group, "resourceIds": ["7"], "error": "it is in a backpack", "leftAs": "untouched"}
        assert api.write(str(run_id), "cleanup.failed", {**detail, "attempt": 1})
    else:
        assert api.write(str(run_id), "cleanup.reverted", {"group": group, "resourceIds": ["7"]})


def _held(text: str) -> set[tuple[int, str]]:
    """Each (run, subject) shown held."""
    since = "".join(_values(text, "runlog_hold_since_seconds"))
    return {(int(run), subject) for run, subject in re.findall(r'run_id="(\d+)",.*?subject="([^"]*)"', since)}


def test_a_finished_run_is_shown_while_a_failed_cleanup_holds_it(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api(public_url="https://runlog.example.test")
    for run_id in (1, 2):
        tables.add_run(run_id, "cancelled", "2026-06-01 18:00:00", "2026-06-01 18:00:00")
    _cleanup(api, 1, "moongate", failed=True)
    _cleanup(api, 1, "chests", failed=True)
    _cleanup(api, 2, "spawns", failed=True)
    _cleanup(api, 2, "spawns", failed=False)
    text = _until(api, lambda text: len(_held(text)) == 2)
    assert _held(text) == {(1, "group:moongate"), (1, "group:chests")}
    [moongate] = [labels for labels in _values(text, "runlog_hold_info") if "moongate" in labels]
    assert 'reason="CLEANUP_FAILED"' in moongate
    assert 'sentence="Cleanup group moongate did not come back: it is in a backpack."' in moongate
    assert 'url="https://runlog.example.test/runs/1"' in moongate

    _cleanup(api, 1, "chests", failed=False)
    _until(api, lambda text: _held(text) == {(1, "group:moongate")})
    # Run 2 was read and found held by nothing; a cleanup of it failing again is read again.
    _cleanup(api, 2, "spawns", failed=True)
    _until(api, lambda text: _held(text) == {(1, "group:moongate"), (2, "group:spawns")})
    _cleanup(api, 1, "moongate", failed=False)
    _cleanup(api, 2, "spawns", failed=False)
    text = _until(api, lambda text: not _held(text))
    assert _values(text, "runlog_hold_runs_left_out") == {"": 0.0}


def test_finished_runs_whose_cleanups_came_back_leave_room_for_the_held_ones(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api(hold_alert_runs=2)
    for run_id in range(1, 7):
        tables.add_run(run_id, "failed", "2026-06-01 18:00:00", "2026-06-01 18:00:00")
        _cleanup(api, run_id, "spawns", failed=True)
    for run_id in range(4, 7):  # the newest three came back; two finished runs are read at a time
        _cleanup(api, run_id, "spawns", failed=False)
    text = _until(api, lambda text: _held(text) == {(3, "group:spawns"), (2, "group:spawns")})
    assert _values(text, "runlog_hold_runs_left_out") == {"": 1.0}  # run 1, held, not read


def test_finished_runs_past_those_looked_at_are_counted_as_left_out(
    make_api: Callable[..., Api], tables: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hold_metrics, "FINISHED_MAX", 2)
    api = make_api()
    for run_id in range(1, 4):
        tables.add_run(run_id, "completed", "2026-06-01 18:00:00", "2026-06-01 18:00:00")
        _cleanup(api, run_id, "spawns", failed=True)
    text = _until(api, lambda text: _held(text) == {(3, "group:spawns"), (2, "group:spawns")})
    assert _values(text, "runlog_hold_runs_left_out") == {"": 1.0}


@sqlite_alone
def test_finished_runs_held_by_a_failed_cleanup_are_found_without_a_walk_through_the_log(
    tables: Backend,
) -> None:
    # The other runs that ever ended, and the lines of long runs, are never read to find them.
    engine = create_engine(tables.settings())
    with sent_statements(engine) as sent:
        asyncio.run(store.finished_with_failed_cleanups(engine, limit=10))
    asyncio.run(engine.dispose())
    [sql] = sent
    plan = " / ".join(row[3] for row in tables.rows(f"EXPLAIN QUERY PLAN {sql.replace('?', '10')}"))
    assert plan.count("SEARCH event_run_log USING COVERING INDEX ix_event_run_log_kind_run_utc (kind=?)") == 2
    assert "SCAN event_run_log" not in plan, plan
