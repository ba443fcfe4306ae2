"""What a write accepts is readable, fits the column found, and a refusal leaves a bounded log."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.edge.graphiql import with_fragments

from .conftest import Api, Backend

OPERATIONS = Path(__file__).parent.parent / "gql" / "operations"
# The query the clients ship, fragments included (it selects `blockingRun`).
RUN_LOG = with_fragments((OPERATIONS / "RunLog.graphql").read_text())

FIVE_THOUSAND_DIGITS = "9" * 5000


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]


@pytest.mark.parametrize(
    ("kind", "detail", "reason"),
    [
        (
            "run.blocked",
            {"blockingRunId": FIVE_THOUSAND_DIGITS, "concurrencyKey": "k"},
            "blockingRunId must be a positive integer up to 2147483647",
        ),
        (
            "run.blocked",
            {"blockingRunId": "2147483648", "concurrencyKey": "k"},
            "blockingRunId must be a positive integer up to 2147483647",
        ),
        (
            "run.blocked",
            {"blockingRunId": 2**31, "concurrencyKey": "k"},
            "blockingRunId must be a positive integer up to 2147483647",
        ),
        (
            "run.blocked",
            {"blockingRunId": "abc", "concurrencyKey": "k"},
            "blockingRunId must be a positive integer up to 2147483647",
        ),
        (
            "run.blocked",
            {"blockingRunId": 0, "concurrencyKey": "k"},
            "blockingRunId must be a positive integer up to 2147483647",
        ),
        (
            "version.verified",
            {"version": "3", "dryRunId": "-1"},
            "dryRunId must be a positive integer up to 2147483647",
        ),
        (
            "run.created",
            {"eventId": 1, "scheduledFor": "9999-12-31T23:59:59-01:00"},
            "could not be read back",
        ),
        (
            "run.created",
            {"eventId": 1, "scheduledFor": "0001-01-01T00:00:00+01:00"},
            "could not be read back",
        ),
        ("phase.gate", {"condition": "c", "deadline": "9999-12-31T23:30:00-00:45"}, "could not be read back"),
    ],
)
def test_a_detail_the_read_path_could_not_serve_answers_false(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture, kind: str, detail: Any, reason: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(1, kind, detail) is False
    (record,) = refusals(caplog)
    assert reason in record.getMessage()
    assert tables.rows("SELECT id FROM event_run_log") == []


def test_what_is_accepted_reads_back_typed_through_the_shipped_query(tables: Backend, api: Api) -> None:
    tables.add_run(2147483647, "live", None, "2026-01-01 00:00:00")
    accepted = [
        ("run.blocked", {"blockingRunId": "2147483647", "concurrencyKey": "k"}),
        ("run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"}),
        ("version.verified", {"version": "3", "dryRunId": "35"}),
        ("run.created", {"eventId": 1, "scheduledFor": "9999-12-31T23:59:59+01:00"}),
        ("run.created", {"eventId": 1, "scheduledFor": "0001-01-01T00:00:00-01:00"}),
    ]
    refused = [
        ("run.blocked", {"blockingRunId": FIVE_THOUSAND_DIGITS, "concurrencyKey": "k"}),
        ("run.created", {"eventId": 1, "scheduledFor": "9999-12-31T23:59:59-01:00"}),
    ]
    assert [api.write(1, kind, detail) for kind, detail in accepted] == [True] * len(accepted)
    assert [api.write(1, kind, detail) for kind, detail in refused] == [False] * len(refused)
    body = api.post(RUN_LOG, {"runId": "1"})
    assert "errors" not in body, body["errors"]
    nodes = body["data"]["runLog"]["nodes"]
    assert len(nodes) == len(accepted)
    assert all(node["detail"]["__typename"] != "UnreadableDetail" for node in nodes)
    blocked = [n["detail"] for n in nodes if n["detail"]["__typename"] == "RunBlockedDetail"]
    assert {d["blockingRunId"]: d["blockingRun"] and d["blockingRun"]["id"] for d in blocked} == {
        "2147483647": "2147483647",
        "37": None,
    }


@pytest.mark.mariadb
def test_a_detail_is_held_to_what_an_existing_text_column_holds(
    mariadb: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    # The events system's existing table: `detail` is TEXT, 65,535 bytes at most.
    mariadb.create_tables()
    mariadb.execute("ALTER TABLE event_run_log MODIFY detail TEXT NULL")
    overhead = len(json.dumps({"text": ""}, separators=(",", ":")))
    with caplog.at_level(logging.INFO, "gql"), TestClient(create_app(mariadb.settings())) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "x" * (65_535 - overhead)})
        assert api.write(1, "note", {"text": "y" * (65_536 - overhead)}) is False
    assert "a detail may be at most 65535 bytes as JSON (what the detail column holds)" in caplog.text
    (record,) = refusals(caplog)
    message = record.getMessage()
    assert "detail is 65536 bytes as JSON, over the limit of 65535 (what the detail column holds)" in message
    assert "y" * 1000 in message  # the line is in the log
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert [len(row.detail) for row in mariadb.rows("SELECT detail FROM event_run_log")] == [65_535]


def test_a_refused_line_past_the_detail_limit_is_logged_as_a_prefix_size_and_digest(
    tables: Backend, make_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    api = make_api(writer_tokens=("writer-token-0123456789",))
    # A caller that may not write sends a body of escaped control characters,
    # just under the 4 MiB body limit: each is 6 bytes sent and as many logged.
    text = "\u0001" * ((4 * 1024 * 1024 - 1000) // 6)
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(1, "note", {"text": text}) is False
    (record,) = refusals(caplog)
    message = record.getMessage()
    assert "the caller is not a writer" in message
    assert len(message.encode()) < 16 * 1024
    line = {"runId": "1", "kind": "note", "stepId": None, "phase": None, "detail": {"text": text}}
    whole = json.dumps(line, ensure_ascii=False).encode()
    assert f"{len(whole)} bytes as JSON" in message
    assert hashlib.sha256(whole).hexdigest() in message
    assert message.split("; line ", 1)[1].startswith('{"runId": "1", "kind": "note"')


def test_a_refused_line_within_the_detail_limit_is_logged_whole(
    tables: Backend, make_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    api = make_api(writer_tokens=("writer-token-0123456789",))
    text = "\u0001" * 10_000 + "end"  # 60,003 bytes as JSON: within 64 KiB
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(1, "note", {"text": text}) is False
    (record,) = refusals(caplog)
    logged = json.loads(record.getMessage().split("; line ", 1)[1])
    assert logged["detail"]["text"] == text
