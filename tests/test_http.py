"""The HTTP app and the commands: healthz, GraphiQL, masking, init-db, serve and SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from . import local
from .conftest import ADMIN, Api, Backend, free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent


def test_healthz_answers_200_when_the_database_answers(api: Api) -> None:
    response = api.client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_graphiql_is_served_to_a_browser(api: Api) -> None:
    response = api.client.get("/graphql", headers={"Accept": "text/html"})
    assert response.status_code == 200
    assert "graphiql" in response.text.lower()


def test_graphiql_can_be_turned_off(make_api: Any) -> None:
    api = make_api(graphiql=False)
    response = api.client.get("/graphql", headers={"Accept": "text/html"})
    assert "graphiql" not in response.text.lower()


def test_an_unexpected_failure_is_masked_and_logged_with_its_request_id(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    tables.execute("DROP TABLE event_runs")
    with caplog.at_level(logging.ERROR, logger="gql"):
        body = api.post('mutation { pruneTerminal(before: "2026-01-01T00:00:00Z") }', token=ADMIN)
    (error,) = body["errors"]
    request_id = error["extensions"]["requestId"]
    assert error["message"] == f"Unexpected error (request id {request_id})."
    assert error["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    assert "event_runs" not in str(body) and "Traceback" not in str(body)
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and "event_runs" in caplog.text


def test_a_read_from_a_broken_database_is_a_clean_error(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # A missing table is a fault of this server's database, not one a caller
    # can wait out: masked, with the story in the log under the request id.
    tables.execute("DROP TABLE event_run_log")
    with caplog.at_level(logging.ERROR, logger="gql"):
        body = api.post("{ runLog(runId: 1) { nodes { id } } }")
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    assert "event_run_log" not in str(body)
    assert error["extensions"]["requestId"] in caplog.text
    assert "event_run_log" in caplog.text


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gql", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_init_db_is_idempotent_and_creates_what_the_service_reads(backend: Backend) -> None:
    env = {"RUNLOG_DATABASE_URL": backend.url}
    first = _cli("init-db", env=env)
    assert first.returncode == 0, first.stderr
    created = first.stdout.split("(created ", 1)[1].split(")")[0].split(", ")
    # The idempotency keys of keyed writes live in a table of ours beside the log.
    assert sorted(created) == [
        "event_run_log",
        "event_run_log_keys",
        "event_run_log_pruned",
        "event_run_log_steps",
        "event_run_log_words",
        "event_runs",
        "runlog_leases",
    ]
    second = _cli("init-db", env=env)
    assert second.returncode == 0, second.stderr
    assert "nothing to create" in second.stdout
    assert backend.scalar("SELECT COUNT(*) FROM event_run_log") == 0


def test_init_db_leaves_an_existing_event_runs_alone(backend: Backend) -> None:
    backend.execute(
        "CREATE TABLE event_runs (id INTEGER PRIMARY KEY, status VARCHAR(32) NOT NULL, "
        "ended_at DATETIME NULL, updated_at DATETIME NOT NULL, title VARCHAR(100) NULL)"
    )
    backend.execute(
        "INSERT INTO event_runs VALUES (1, 'live', NULL, '2026-01-01 00:00:00', 'Invasion of Yew')"
    )
    done = _cli("init-db", env={"RUNLOG_DATABASE_URL": backend.url})
    assert done.returncode == 0, done.stderr
    assert "created event_run_log" in done.stdout and "event_runs" not in done.stdout.split("(")[1]
    assert backend.scalar("SELECT title FROM event_runs WHERE id = 1") == "Invasion of Yew"


def test_init_db_adds_the_read_index_to_an_existing_log(backend: Backend) -> None:
    backend.execute(
        "CREATE TABLE event_run_log (id INTEGER PRIMARY KEY, run_id INT NOT NULL, step_id INT NULL, "
        "kind VARCHAR(64) NOT NULL, phase INT NULL, detail TEXT NULL, at DATETIME(3) NOT NULL)"
        if backend.name == "mariadb"
        else "CREATE TABLE event_run_log (id INTEGER PRIMARY KEY, run_id INT NOT NULL, "
        "step_id INT NULL, kind VARCHAR(64) NOT NULL, phase INT NULL, detail TEXT NULL, "
        "at DATETIME NOT NULL)"
    )
    done = _cli("init-db", env={"RUNLOG_DATABASE_URL": backend.url})
    assert done.returncode == 0, done.stderr
    # SQLite's index is on the normalised `at` its reads order by (db.SQLITE_AT_ORDER).
    index = "ix_event_run_log_run_at" if backend.name == "mariadb" else "ix_event_run_log_run_utc"
    assert f"event_run_log.{index}" in done.stdout
    assert "nothing to create" in _cli("init-db", env={"RUNLOG_DATABASE_URL": backend.url}).stdout


def test_serve_creates_the_embedded_database_answers_and_stops_cleanly_on_sigterm(
    tmp_path: Path,
) -> None:
    port = free_port()
    database = tmp_path / "fresh" / "runlog.db"
    database.parent.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--port", str(port)],
        env={**os.environ, "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, server)
        assert database.exists()
        written = local.post(
            f"{url}/graphql",
            json={"query": 'mutation { writeRunLog(runId: 1, kind: "note", detail: {text: "hi"}) }'},
        )
        assert written.json() == {"data": {"writeRunLog": True}}
        server.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal so the exit
        # status says how the process ended.
        assert server.wait(timeout=15) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.stdout is not None
    with server.stdout:
        output = server.stdout.read()
    assert "Application shutdown complete" in output
    assert "Finished server process" in output
    assert "Traceback" not in output


def test_introspection_can_be_turned_off(make_api: Any) -> None:
    query = "{ __schema { queryType { name } } }"
    assert make_api().data(query) == {"__schema": {"queryType": {"name": "Query"}}}
    body = make_api(introspection=False).post(query)
    assert body.get("data") is None
    assert "introspection" in body["errors"][0]["message"].lower()
