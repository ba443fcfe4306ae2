"""Input an attacker would send, found by fuzzing and by reading every `except`, cache and bound.

Each test is one case that once broke a promise of the README: a write that
answered with an error, a request that cost far more than its bound.
"""

from __future__ import annotations

import json
import logging

import pytest

from .conftest import Api, Backend


def test_a_detail_nested_as_deep_as_the_body_parser_reads_answers_false(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # Somewhere near a thousand levels the request's JSON parser, high on the
    # stack, still reads a detail that the encoder, deep in a resolver, cannot
    # write back: that once made writeRunLog answer INTERNAL_SERVER_ERROR.
    # Where exactly depends on the stack, so every depth around it is tried.
    query = 'mutation($d: JSON) { writeRunLog(runId: 1, kind: "step.status", detail: $d) }'
    for depth in range(900, 1040, 5):
        detail = '{"to": "x", "answer": ' + "[" * depth + "]" * depth + "}"
        body = '{"query": ' + json.dumps(query) + ', "variables": {"d": ' + detail + "}}"
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gql"):
            response = api.client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
        if response.status_code == 400:
            continue  # too deep for the body parser: refused before anything runs
        assert response.status_code == 200, (depth, response.text)
        assert response.json() == {"data": {"writeRunLog": False}}, (depth, response.text[:300])
        (record,) = [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]
        assert record.levelno == logging.WARNING
        assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0
