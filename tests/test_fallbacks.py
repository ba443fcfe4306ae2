"""No silent fall-backs: what leaves a faster path is counted on /metrics with its reason, logged once.

The counters are the process's (Prometheus' registry is one per process), so
each test compares what /metrics shows before and after what it does.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gql.domain.details import EXAMPLES
from gql.kinds import Kind

from .conftest import Api, Backend
from .test_page_plan import _shipped, _variables


def fallbacks(api: Api) -> dict[tuple[str, str], float]:
    """`runlog_fallbacks_total` as /metrics shows it now, by (path, reason)."""
    response = api.client.get("/metrics")
    assert response.status_code == 200
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "runlog_fallbacks_total":
                found[sample.labels["path"], sample.labels["reason"]] = sample.value
    return found


def moved(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[Any, float]:
    return {key: value - before.get(key, 0) for key, value in after.items() if value != before.get(key, 0)}


@pytest.mark.parametrize(("name", "document"), _shipped(), ids=[name for name, _ in _shipped()])
def test_no_shipped_operation_falls_back(tables: Backend, api: Api, name: str, document: str) -> None:
    tables.add_run(37, "live", None, "2026-01-01 00:00:00")
    for kind in Kind:
        assert api.write(7, kind.value, EXAMPLES[kind])
    # The long poll's page (RunLogWait) reads from the oldest line, so there
    # are newer lines and it answers at once.
    nodes = api.data("{ runLog(runId: 7, limit: 2000) { nodes { cursor } } }")["runLog"]["nodes"]
    variables = _variables(document)
    if "before" in variables:
        variables["before"] = nodes[-1]["cursor"]

    before = fallbacks(api)
    for _ in range(3):
        body = api.post(document, variables)
        assert "errors" not in body, body
    assert moved(before, fallbacks(api)) == {}


def test_a_page_off_its_plan_is_counted_with_its_reason_and_logged_once_per_document(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # The events system's table is gone: a line's blockingRun cannot be
    # looked up, and graphql-core puts that error at each of them.
    assert api.write(7, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
    tables.execute("DROP TABLE event_runs")
    marker = uuid.uuid4().hex  # a text this process has not logged yet
    selection = "nodes { detail { ... on RunBlockedDetail { blockingRun { id } } } }"
    query = f"# {marker}\n{{ runLog(runId: 7) {{ {selection} }} }}"
    before = fallbacks(api)
    with caplog.at_level(logging.INFO, logger="gql.fallback"):
        for _ in range(3):
            body = api.post(query)
            assert body["data"]["runLog"]["nodes"] == [{"detail": {"blockingRun": None}}]
            assert body["errors"][0]["path"] == ["runLog", "nodes", 0, "detail", "blockingRun"]
    assert moved(before, fallbacks(api))[("page_plan", "raised")] == 3
    # Named by its hash, as `documentId` names it: its text is not logged.
    document_id = "sha256:" + hashlib.sha256(query.encode()).hexdigest()
    logged = [r for r in caplog.records if r.name == "gql.fallback" and document_id in r.getMessage()]
    assert not any(marker in r.getMessage() for r in caplog.records)
    off_plan = [r for r in logged if r.getMessage().startswith("page_plan fell back (raised)")]
    assert len(off_plan) == 1, [r.getMessage() for r in logged]  # once, for three requests
    assert off_plan[0].levelno == logging.WARNING
    assert "OperationalError" in off_plan[0].getMessage() or "ProgrammingError" in off_plan[0].getMessage()
