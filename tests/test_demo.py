"""`python -m gql demo`: believable runs, every kind, typed details, safe to run twice."""

from __future__ import annotations

import asyncio
import datetime
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gql.domain import demo, demo_runs
from gql.edge.graphiql import example_tabs
from gql.kinds import Kind

from . import local
from .conftest import Api, Backend

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = {tab.name: tab.query for tab in example_tabs()}


def load(backend: Backend) -> demo.Loaded:
    # The test database is a scratch one, so the MariaDB half may load into it.
    return asyncio.run(demo.load_into(backend.settings(), allow_non_embedded=True))


def read_log(api: Api, run_id: int, **variables: Any) -> list[dict[str, Any]]:
    """A run's whole log, oldest first, through the RunLog operation GraphiQL opens on."""
    data = api.data(DOCUMENTS["RunLog"], {"runId": str(run_id), **variables})
    lines: list[dict[str, Any]] = data["runLog"]["nodes"]
    assert not data["runLog"]["pageInfo"]["hasNextPage"]
    return lines[::-1]


def of_kind(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["kindName"] == kind]


@pytest.fixture
def demo_api(make_api: Callable[..., Api], tables: Backend) -> Api:
    load(tables)
    return make_api()


def test_demo_runs_are_in_five_statuses_and_every_kind_reads_back_typed(demo_api: Api) -> None:
    seen_kinds = set()
    for run_id in demo_runs.RUN_IDS:
        lines = read_log(demo_api, run_id)
        assert lines, f"run {run_id} has no lines"
        for line in lines:
            seen_kinds.add(line["kindName"])
            detail = line["detail"]
            assert detail is not None, line
            assert detail["__typename"] != "UnreadableDetail", detail
            expected = "".join(p.title() for p in line["kindName"].split(".")) + "Detail"
            assert detail["__typename"] == expected
    assert seen_kinds == {kind.value for kind in Kind}


def test_the_run_statuses_are_those_the_stories_need(tables: Backend) -> None:
    load(tables)
    statuses = dict(tables.rows("SELECT id, status FROM event_runs ORDER BY id"))
    assert statuses == {
        demo_runs.DRY_RUN: "completed",
        demo_runs.INVASION: "live",
        demo_runs.BLOCKED: "scheduled",
        demo_runs.TREASURE_HUNT: "cancelled",
        demo_runs.RELAY: "failed",
    }
    ended = dict(tables.rows("SELECT id, ended_at FROM event_runs"))
    assert ended[demo_runs.INVASION] is None and ended[demo_runs.BLOCKED] is None
    assert all(
        ended[run] is not None for run in (demo_runs.DRY_RUN, demo_runs.TREASURE_HUNT, demo_runs.RELAY)
    )


def test_the_blocked_run_names_a_live_run_that_holds_its_key(demo_api: Api) -> None:
    blocked = of_kind(read_log(demo_api, demo_runs.BLOCKED), "run.blocked")
    assert blocked
    for line in blocked:
        detail = line["detail"]
        assert detail["blockingRunId"] == str(demo_runs.INVASION)
        assert detail["concurrencyKey"] == "invasion:Yew"
        assert detail["blockingRun"] == {
            "id": str(demo_runs.INVASION),
            "status": "live",
            "terminal": False,
        }
    # The run that never started has no status change in its log.
    assert not of_kind(read_log(demo_api, demo_runs.BLOCKED), "run.status")


def test_the_gate_waits_for_yew_and_says_why_each_firing_did_not_open_it(demo_api: Api) -> None:
    data = demo_api.data(
        DOCUMENTS["RunLogByKinds"],
        {
            "runId": str(demo_runs.INVASION),
            "kinds": ["PHASE_GATE", "CONDITION_EVALUATED", "PHASE_ADVANCED"],
        },
    )
    lines = data["runLog"]["nodes"][::-1]
    assert [line["kindName"] for line in lines] == [
        "phase.gate",
        "condition.evaluated",
        "condition.evaluated",
        "condition.evaluated",
        "phase.advanced",
    ]
    gate, britain, wrong_boss, match, advanced = (line["detail"] for line in lines)
    assert gate["condition"] == "boss.spawned" and gate["parameters"]["region"] == "Yew"
    # "The boss did spawn, in Britain" is a different answer from "no boss has spawned".
    assert britain["matched"] is False
    assert britain["facts"]["region"] == "Britain"
    assert "Britain" in britain["mismatch"] and "Yew" in britain["mismatch"]
    assert wrong_boss["matched"] is False and wrong_boss["mismatch"]
    assert match["matched"] is True and match["facts"]["region"] == "Yew"
    assert match["mismatch"] is None
    assert advanced["via"] == "FIRING" and advanced["firing"] == "boss.spawned"


def test_a_step_refused_over_a_cap_names_the_cap_the_budget_seeded(demo_api: Api) -> None:
    lines = read_log(demo_api, demo_runs.INVASION)
    [refused] = of_kind(lines, "step.refused")
    [budget] = of_kind(lines, "run.budget")
    assert refused["detail"]["refusal"] == "OVER_CAP"
    caps = {cap["cap"]: cap for cap in budget["detail"]["caps"]}
    cap = caps[refused["detail"]["cap"]]
    assert refused["detail"]["limit"] == cap["limit"] == refused["detail"]["used"]
    assert refused["detail"]["switch"] == cap["switch"] is not None
    # A cap no switch set is shown with the default's null switch.
    assert any(cap["switch"] is None for cap in caps.values())
    assert refused["stepId"] is not None and refused["phase"] == 2


def test_the_cancelled_run_shows_what_its_cleanup_brought_back_and_what_it_did_not(
    demo_api: Api,
) -> None:
    lines = read_log(demo_api, demo_runs.TREASURE_HUNT)
    recorded = {line["detail"]["resourceId"] for line in of_kind(lines, "resource.recorded")}
    [reverted] = of_kind(lines, "cleanup.reverted")
    failed = of_kind(lines, "cleanup.failed")
    swept = of_kind(lines, "cleanup.swept")
    assert set(reverted["detail"]["resourceIds"]) < recorded
    assert failed and failed[0]["detail"]["error"] and failed[0]["detail"]["leftAs"]
    assert set(failed[0]["detail"]["resourceIds"]) <= recorded - set(reverted["detail"]["resourceIds"])
    first_pass = swept[0]["detail"]
    assert first_pass["reverted"] == len(reverted["detail"]["resourceIds"])
    assert first_pass["failed"] >= 1 and first_pass["remaining"] >= 1
    [retry] = of_kind(lines, "cleanup.retry")
    assert retry["detail"]["group"] == failed[0]["detail"]["group"]
    assert retry["detail"]["actor"]


def test_the_completed_dry_run_verified_the_version_the_invasion_runs(demo_api: Api) -> None:
    [verified] = of_kind(read_log(demo_api, demo_runs.DRY_RUN), "version.verified")
    [created] = of_kind(read_log(demo_api, demo_runs.INVASION), "run.created")
    assert verified["detail"]["dryRunId"] == str(demo_runs.DRY_RUN)
    assert verified["detail"]["version"] == created["detail"]["eventVersion"]


def test_loading_twice_puts_the_same_runs_back_without_duplicating_a_line(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    first = load(tables)
    api = make_api()
    assert api.write(demo_runs.BLOCKED, "note", {"text": "written while exploring"})
    before = {run: len(read_log(api, run)) for run in demo_runs.RUN_IDS}

    second = load(tables)

    after = {run: len(read_log(api, run)) for run in demo_runs.RUN_IDS}
    assert after == {run.id: len(run.lines) for run in second.runs}
    assert after[demo_runs.BLOCKED] == before[demo_runs.BLOCKED] - 1  # the explorer's note is gone
    assert tables.scalar("SELECT COUNT(*) FROM event_runs") == len(demo_runs.RUN_IDS)
    assert first.replaced == [] and second.replaced == sorted(demo_runs.RUN_IDS)


def test_every_demo_detail_passes_the_check_writes_get() -> None:
    # The same check writeRunLog applies; load() runs it before writing anything.
    demo.check_lines(demo_runs.build_runs(datetime.datetime(2030, 1, 1, 20, 0)))


def test_a_run_id_the_demo_uses_that_holds_someone_elses_run_is_left_alone(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api()
    assert api.write(demo_runs.INVASION, "note", {"text": "a real line", "actor": "someone"})

    with pytest.raises(demo.DemoRefused, match=rf"run {demo_runs.INVASION} already exists"):
        load(tables)

    assert [line["detail"]["text"] for line in read_log(api, demo_runs.INVASION)] == ["a real line"]
    assert tables.scalar("SELECT COUNT(*) FROM event_runs") == 0


def test_a_refused_demo_names_the_flag_that_replaces_only_the_demos_runs(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    """A write to a run the demo uses, made before loading it, does not make the demo a dead end."""
    api = make_api()
    assert api.write(
        demo_runs.BLOCKED, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "invasion:Yew"}
    )
    assert api.write(7, "note", {"text": "not the demo's"})

    with pytest.raises(demo.DemoRefused, match="--replace-demo-runs") as refused:
        load(tables)
    assert f"run {demo_runs.BLOCKED} already exists" in str(refused.value)

    asyncio.run(demo.load_into(tables.settings(), allow_non_embedded=True, replace_any=True))
    blocked = read_log(api, demo_runs.BLOCKED)
    assert blocked[0]["detail"]["actor"] == demo_runs.DEMO_ACTOR  # the demo's own lines, from the first
    assert len(blocked) == len(
        next(r for r in demo_runs.build_runs(datetime.datetime(2030, 1, 1)) if r.id == 38).lines
    )
    assert [line["detail"]["text"] for line in read_log(api, 7)] == ["not the demo's"]


def test_the_replace_flag_works_from_the_command_line(tmp_path: Path) -> None:
    # The embedded database is runlog.db in the working directory; this checkout's gql is imported.
    env = {k: v for k, v in os.environ.items() if k != "RUNLOG_DATABASE_URL"} | {"PYTHONPATH": str(ROOT)}

    def gql(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gql", *args], capture_output=True, text=True, env=env, cwd=tmp_path
        )

    assert gql("init-db").returncode == 0
    with sqlite3.connect(tmp_path / "runlog.db") as conn:
        conn.execute(
            "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (38, 'note', '{\"text\":\"x\"}', "
            "'2026-06-01 18:00:00.000')"
        )
    refused = gql("demo")
    assert refused.returncode == 2
    assert "scripts/serve --demo --replace-demo-runs" in refused.stderr
    replaced = gql("demo", "--replace-demo-runs")
    assert replaced.returncode == 0, replaced.stderr
    assert "5 runs" in replaced.stdout


@pytest.mark.mariadb
def test_demo_refuses_a_database_that_is_not_embedded_unless_allowed(
    mariadb_database: str,
) -> None:
    from .conftest import MARIADB_URL, _mariadb_connect

    url = MARIADB_URL.set(database=mariadb_database).render_as_string(hide_password=False)
    env = {**os.environ, "RUNLOG_DATABASE_URL": url}
    refused = subprocess.run(
        [sys.executable, "-m", "gql", "demo"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert refused.returncode == 2
    assert "not the embedded database" in refused.stderr
    assert "--allow-non-embedded" in refused.stderr
    conn = _mariadb_connect(mariadb_database)
    with conn.cursor() as cur:
        cur.execute("SHOW TABLES LIKE 'event_run%%'")
        assert cur.fetchall() == ()  # nothing was created, let alone written

    allowed = subprocess.run(
        [sys.executable, "-m", "gql", "demo", "--allow-non-embedded"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert allowed.returncode == 0, allowed.stderr
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM event_runs")
        assert cur.fetchone() == (len(demo_runs.RUN_IDS),)
        cur.execute("DROP TABLE event_run_log, event_runs")
    conn.close()


@pytest.mark.mariadb
def test_serve_demo_loads_a_database_that_is_not_embedded_when_allowed(tmp_path: Path) -> None:
    from . import serving
    from .conftest import MARIADB_URL, _mariadb_connect

    name = f"runlog_test_demo_{os.getpid()}"
    conn = _mariadb_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    url = MARIADB_URL.set(database=name).render_as_string(hide_password=False)
    server = serving.start(tmp_path, url, "serve", "--demo", "--allow-non-embedded")
    try:
        serving.wait_until_healthy(server)
        answer = local.post(
            f"{server.base}/graphql",
            json={"query": "{ runLog(runId: 38, limit: 1) { run { status } } }"},
        ).json()
    finally:
        serving.stop(server)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{name}`")
        conn.close()
    assert answer == {"data": {"runLog": {"run": {"status": "scheduled"}}}}, server.output()


def test_serve_demo_refuses_a_database_that_is_not_embedded() -> None:
    # No server answers on port 1: a refusal that tried to connect would say so.
    env = {**os.environ, "RUNLOG_DATABASE_URL": "mysql+aiomysql://root@127.0.0.1:1/events"}
    result = subprocess.run(
        [sys.executable, "-m", "gql", "serve", "--demo", "--port", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=30,
    )
    assert result.returncode == 2
    assert "not loading the demo into mysql+aiomysql://root@127.0.0.1:1/events" in result.stderr


def test_demo_command_on_the_embedded_database_says_what_it_loaded(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RUNLOG_DATABASE_URL"}
    runs = [
        subprocess.run(
            [sys.executable, "-m", "gql", "demo"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=True,
        )
        for _ in range(2)
    ]
    assert (tmp_path / "runlog.db").exists()
    assert "5 runs" in runs[0].stdout and "replaced" not in runs[0].stdout
    assert "run 38  scheduled" in runs[0].stdout
    assert "the earlier demo runs were replaced" in runs[1].stdout
    assert "http://127.0.0.1:8000/graphql" in runs[1].stdout
