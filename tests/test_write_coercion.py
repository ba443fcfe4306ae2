"""Arguments GraphQL cannot coerce: a clear request error, nothing stored, the line logged at WARNING."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from .conftest import Api, Backend
from .leaks import assert_clean_errors

BIG = "9" * 5000
VARIABLES = (
    "mutation W($runId: ID!, $kind: String!, $phase: Int, $detail: JSON) {"
    " writeRunLog(runId: $runId, kind: $kind, phase: $phase, detail: $detail) }"
)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith("run log line not stored")
    ]


def assert_refused_cleanly(body: dict[str, Any]) -> None:
    assert body.get("data") is None, body
    assert body["errors"], body
    assert_clean_errors(body)
    for error in body["errors"]:
        assert (error.get("extensions") or {}).get("code") != "INTERNAL_SERVER_ERROR", error


@pytest.mark.parametrize(
    ("arguments", "logged"),
    [
        ('runId: 1, kind: "note", phase: 2147483648', '"phase": 2147483648'),
        ('runId: 1, kind: "note", phase: 3.5', '"phase": 3.5'),
        ("runId: 1, kind: null", '"kind": null'),
        (f'runId: 1, kind: "note", phase: {BIG}', f'"phase": "{BIG[:500]}'),
    ],
)
def test_a_literal_that_cannot_be_coerced_is_a_request_error_and_its_line_is_logged(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture, arguments: str, logged: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="gql"):
        body = api.post(f"mutation {{ writeRunLog({arguments}) }}")
    assert_refused_cleanly(body)
    (message,) = refusals(caplog)
    assert "the request was refused before it ran" in message
    assert logged in message
    assert tables.rows("SELECT id FROM event_run_log") == []


@pytest.mark.parametrize(
    ("variables", "logged"),
    [
        ({"runId": "1", "kind": "note", "phase": 2147483648}, '"phase": 2147483648'),
        ({"runId": "1", "kind": "note", "phase": 3.5}, '"phase": 3.5'),
        ({"runId": "1", "kind": None}, '"kind": null'),
        ({"runId": "1", "kind": "note", "phase": BIG}, f'"phase": "{BIG[:500]}'),
    ],
)
def test_a_variable_that_cannot_be_coerced_is_a_request_error_and_its_line_is_logged(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture, variables: dict[str, Any], logged: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="gql"):
        # Twice: the second time the text's validation is cached, and the line is logged the same.
        first = api.post(VARIABLES, variables)
        second = api.post(VARIABLES, variables)
    assert first == second
    assert_refused_cleanly(first)
    messages = refusals(caplog)
    assert len(messages) == 2
    assert all(logged in m and '"detail": null' in m for m in messages)
    assert tables.rows("SELECT id FROM event_run_log") == []


def test_a_run_id_of_five_thousand_digits_answers_false_and_is_logged(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # An ID literal or variable is a string to GraphQL: the write itself refuses it.
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(BIG, "note") is False
        body = api.post(f'mutation {{ writeRunLog(runId: {BIG}, kind: "note") }}')
        assert body["data"] == {"writeRunLog": False} and "errors" not in body
        assert [e["reason"] for e in body["extensions"]["runlog"]["notStored"]] == ["BAD_RUN_ID"]
        # Inside a JSON literal, GraphQL reads such a number as NaN, which no detail holds.
        body = api.post(
            f'mutation {{ writeRunLog(runId: 1, kind: "note", detail: {{text: "x", n: {BIG}}}) }}'
        )
        assert body["data"] == {"writeRunLog": False} and "errors" not in body
        assert [e["reason"] for e in body["extensions"]["runlog"]["notStored"]] == ["DETAIL_NOT_JSON"]
    messages = refusals(caplog)
    assert len(messages) == 3
    assert all("runId must be a positive integer up to 2147483647" in m for m in messages[:2])
    assert "detail is not storable JSON" in messages[2]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert tables.rows("SELECT id FROM event_run_log") == []
