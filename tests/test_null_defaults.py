"""A variable sent as null where the document needs a value, though it has a default: the caller's mistake.

`$r: ID = 5` may stand at `runId: ID!` (the spec lets its default fill the
position); sent as `{"r": null}`, graphql-core failed at the field, and the
masking took its error for a fault of ours: "Unexpected error", an ERROR with
a stack in the log for any anonymous caller, and a write that left no trace.
Each shape is tried over HTTP (twice: the second time the text is a known one)
and over both websocket protocols, on both
databases: a BAD_USER_INPUT naming the variable, nothing logged as an error,
and a write logged as not stored, counted as refused.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Api, Backend
from .test_websocket_operations import PROTOCOLS, initialised

TRANSPORTS = ["http", *PROTOCOLS]
NOTE = {"text": "x"}

# (query, variables, the variable named, the line a write holds as sent)
SHAPES: dict[str, tuple[str, dict[str, Any], str, dict[str, Any] | None]] = {
    "write_run_id": (
        'mutation M($r: ID = 5) { writeRunLog(runId: $r, kind: "note", detail: {text: "x"}) }',
        {"r": None},
        "$r",
        {"runId": None, "kind": "note", "detail": NOTE},
    ),
    "write_kind": (
        'mutation M($k: String = "note") { writeRunLog(runId: 7, kind: $k, detail: {text: "x"}) }',
        {"k": None},
        "$k",
        {"runId": 7, "kind": None, "detail": NOTE},
    ),
    "read_run_id": (
        'query Q($r: ID = "37") { runLog(runId: $r) { nodes { id } } }',
        {"r": None},
        "$r",
        None,
    ),
    "include_at_the_root": (
        "query Q($i: Boolean = true) { runLog(runId: 37) @include(if: $i) { nodes { id } } }",
        {"i": None},
        "$i",
        None,
    ),
    "include_in_a_page": (
        "query Q($i: Boolean = true) { runLog(runId: 37) { nodes @include(if: $i) { id } } }",
        {"i": None},
        "$i",
        None,
    ),
    "kind_in_a_list": (
        "query Q($k: RunLogKind = PHASE_GATE) { runLog(runId: 37, kinds: [$k, NOTE]) { nodes { id } } }",
        {"k": None},
        "$k",
        None,
    ),
}


def refusals(api: Api) -> float:
    """runlog_writes_total{outcome="refused", reason="refused_before_run"}, as /metrics has it."""
    text = api.client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "runlog_writes_total" and sample.labels == {
                "outcome": "refused",
                "reason": "refused_before_run",
            }:
                return float(sample.value)
    return 0.0


def errors_over(api: Api, transport: str, query: str, variables: dict[str, Any]) -> list[dict[str, Any]]:
    """The errors one request answers with, over HTTP or one websocket protocol."""
    if transport == "http":
        response = api.client.post("/graphql", json={"query": query, "variables": variables})
        assert response.status_code == 200, response.text
        body = response.json()
        assert "data" not in body, body  # a request error: nothing ran
        errors: list[dict[str, Any]] = body["errors"]
        return errors
    with initialised(api, transport) as ws:
        kind = "subscribe" if transport == "graphql-transport-ws" else "start"
        ws.send_json({"type": kind, "id": "1", "payload": {"query": query, "variables": variables}})
        while (message := ws.receive_json())["type"] == "ka":
            pass
        assert message["id"] == "1", message
        if message["type"] == "error":  # a subscription refused before it started
            payload = message["payload"]
            return payload if isinstance(payload, list) else [payload]
        assert message["type"] in ("next", "data"), message
        assert message["payload"]["data"] is None, message
        found: list[dict[str, Any]] = message["payload"]["errors"]
        return found


def assert_refused_as_the_callers(errors: list[dict[str, Any]], variable: str) -> None:
    (error,) = errors
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert f"Variable '{variable}' is null" in error["message"], error
    assert "non-null" in error["message"], error


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_null_for_a_defaulted_variable_where_a_value_is_needed_is_bad_user_input(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture, transport: str, shape: str
) -> None:
    query, variables, variable, line = SHAPES[shape]
    before = refusals(api)
    # Twice over HTTP: the second time from the document cache.
    tries = 2 if transport == "http" else 1
    with caplog.at_level(logging.INFO, logger="gql"):
        for _ in range(tries):
            assert_refused_as_the_callers(errors_over(api, transport, query, variables), variable)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "masked error" not in caplog.text
    not_stored = [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]
    if line is None:
        assert not_stored == []
        return
    assert [json.loads(r.line_json) for r in not_stored] == [line] * tries  # the whole line, as sent
    assert all(f"Variable '{variable}' is null" in r.getMessage() for r in not_stored)
    assert refusals(api) - before == tries
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_tail_whose_run_id_is_a_null_defaulted_variable_is_refused_as_bad_user_input(
    api: Api, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    query = "subscription S($r: ID = 5) { runLogTail(runId: $r) { id } }"
    with caplog.at_level(logging.INFO, logger="gql"):
        assert_refused_as_the_callers(errors_over(api, protocol, query, {"r": None}), "$r")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_write_refused_for_a_variable_that_does_not_coerce_is_logged_over_every_transport(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    # Over a websocket, a write refused before it ran left no trace at all.
    query = 'mutation M($r: ID!) { writeRunLog(runId: $r, kind: "note", detail: {text: "x"}) }'
    before = refusals(api)
    with caplog.at_level(logging.INFO, logger="gql"):
        (error,) = errors_over(api, transport, query, {"r": None})
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert "Variable '$r'" in error["message"]
    (record,) = [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]
    assert json.loads(record.line_json) == {"runId": None, "kind": "note", "detail": NOTE}
    assert refusals(api) - before == 1
