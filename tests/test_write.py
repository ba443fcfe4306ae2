"""writeRunLog: true when stored; false, never an error, and logged once with the whole line otherwise."""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

import pytest

from gql.store import ANSWER_GRACE_SECONDS

from .conftest import SLACK, Api, Backend, free_port


def stored(backend: Backend) -> list[Any]:
    return backend.rows("SELECT run_id, step_id, kind, phase, detail FROM event_run_log ORDER BY id")


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]


def test_a_line_that_fits_is_stored_with_its_detail_as_json(tables: Backend, api: Api) -> None:
    detail = {"blockingRunId": 37, "concurrencyKey": "invasion:Yew"}
    assert api.write("12", "run.blocked", detail, stepId=4, phase=1)
    assert api.write(12, "note")
    (blocked, note) = stored(tables)
    assert tuple(blocked[:4]) == (12, 4, "run.blocked", 1)
    assert json.loads(blocked.detail) == detail
    assert note.detail is None


@pytest.mark.parametrize(
    ("run_id", "kind", "detail", "extra", "reason"),
    [
        (1, "run.teleported", None, {}, "kind 'run.teleported' is not one of the 22 kinds"),
        (1, "RUN_STATUS", {"to": "x"}, {}, "kind 'RUN_STATUS' is not one of the 22 kinds"),
        ("abc", "note", None, {}, "runId must be a positive integer"),
        ("0", "note", None, {}, "runId must be a positive integer"),
        (-4, "note", None, {}, "runId must be a positive integer"),
        ("3000000000", "note", None, {}, "runId must be a positive integer"),
        (1, "note", None, {"stepId": "x"}, "stepId must be a positive integer"),
        (1, "run.status", {"from": "a"}, {}, "to is required"),
        (1, "run.status", {"to": 5}, {}, "to: input should be a valid string"),
        (1, "run.status", "live", {}, "input should be an object"),
        (1, "run.status", {"to": "b", "form": "a"}, {}, "form is not a field of this kind's detail"),
        (1, "phase.advanced", {"via": "firing"}, {}, "via: input should be 'FIRING'"),
        (1, "step.retry", {"attempt": 1.5, "error": "x"}, {}, "attempt: input should be a valid integer"),
        (1, "run.budget", {"caps": [{"cap": "spawns"}]}, {}, "caps.0.limit is required"),
    ],
)
def test_a_line_that_cannot_be_stored_answers_false_and_is_logged_once_whole(
    tables: Backend,
    api: Api,
    caplog: pytest.LogCaptureFixture,
    run_id: Any,
    kind: str,
    detail: Any,
    extra: dict[str, Any],
    reason: str,
) -> None:
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(run_id, kind, detail, **extra) is False
    assert stored(tables) == []
    (record,) = refusals(caplog)
    message = record.getMessage()
    assert reason in message
    line = json.loads(message.split("; line ", 1)[1])
    assert line["runId"] == str(run_id) and line["kind"] == kind and line["detail"] == detail


def test_a_detail_over_the_size_limit_answers_false(
    tables: Backend, make_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    api = make_api(max_detail_bytes=1000)
    assert api.write(1, "note", {"text": "x" * 900})
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(1, "note", {"text": "x" * 1000}) is False
    (record,) = refusals(caplog)
    assert "over the limit of 1000" in record.getMessage()
    assert "x" * 1000 in record.getMessage()
    assert len(stored(tables)) == 1


def test_default_size_limit_is_64_kib(tables: Backend, api: Api) -> None:
    assert api.write(1, "note", {"text": "y" * (64 * 1024 - 20)})
    assert not api.write(1, "note", {"text": "y" * (64 * 1024)})
    assert len(stored(tables)) == 1


def test_unicode_details_are_stored_as_sent(tables: Backend, api: Api) -> None:
    assert api.write(1, "note", {"text": "Yew 🌲 — boss «Lich»"})
    read = api.data("{ runLog(runId: 1) { nodes { detail { ... on NoteDetail { text } } } } }")
    assert read["runLog"]["nodes"][0]["detail"]["text"] == "Yew 🌲 — boss «Lich»"


def test_a_request_that_fails_graphql_validation_is_an_error_not_a_write(tables: Backend, api: Api) -> None:
    body = api.post('mutation { writeRunLog(kind: "note") }')
    assert "runId" in body["errors"][0]["message"]
    assert stored(tables) == []


def test_a_write_to_a_database_that_refuses_connections_answers_false_within_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from starlette.testclient import TestClient

    from gql.edge.app import create_app
    from gql.settings import Settings

    port = free_port()  # nothing listens here
    settings = Settings(database_url=f"mysql+aiomysql://root@127.0.0.1:{port}/test")
    with TestClient(create_app(settings)) as client, caplog.at_level(logging.WARNING, "gql"):
        api = Api(client)
        started = time.monotonic()
        assert api.write(7, "note", {"text": "the database is down"}) is False
        elapsed = time.monotonic() - started
        health = client.get("/healthz")
    assert elapsed < 5, f"answered after {elapsed:.1f}s"
    (record,) = refusals(caplog)
    assert "the database is down" in record.getMessage()
    assert "Can't connect" in record.getMessage() or "refused" in record.getMessage()
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"


def test_a_write_to_a_database_that_never_answers_answers_false_within_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from starlette.testclient import TestClient

    from gql.edge.app import create_app
    from gql.settings import Settings

    # The kernel completes the TCP handshake for the listen backlog, so the
    # driver connects and then waits for a server greeting that never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        port = silent.getsockname()[1]
        settings = Settings(database_url=f"mysql+aiomysql://root@127.0.0.1:{port}/test")
        with TestClient(create_app(settings)) as client, caplog.at_level(logging.WARNING, "gql"):
            started = time.monotonic()
            assert Api(client).write(7, "note", {"text": "nobody is listening"}) is False
            elapsed = time.monotonic() - started
            health = client.get("/healthz")
    # By the line's deadline and the grace its answer may take (with slack for a loaded machine).
    bound = settings.write_timeout + ANSWER_GRACE_SECONDS + SLACK
    assert elapsed < bound, f"answered after {elapsed:.1f}s"
    (record,) = refusals(caplog)
    assert "nobody is listening" in record.getMessage()
    assert health.status_code == 503


def test_a_detail_literal_with_a_variable_left_out_stores_null_for_it(tables: Backend, api: Api) -> None:
    body = api.post(
        "mutation($actor: String) {"
        ' writeRunLog(runId: 1, kind: "note", detail: {text: "hi", actor: $actor}) }'
    )
    assert body == {"data": {"writeRunLog": True}}
    (line,) = stored(tables)
    assert json.loads(line.detail) == {"text": "hi", "actor": None}
