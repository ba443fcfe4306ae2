"""Errors that leak nothing: what the caller sent is explained, surprises are masked and logged."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import strawberry

from gql.edge.answers import MaskUnexpected

from .conftest import ADMIN, Api, Backend
from .leaks import assert_clean_errors, leaks


@pytest.mark.parametrize(
    ("query", "variables", "says"),
    [
        (
            "mutation($b: DateTime!) { pruneTerminal(before: $b) }",
            {"b": "last tuesday"},
            "Variable '$b' has invalid value: Value cannot represent a DateTime",
        ),
        (
            "query($l: Int) { runLog(runId: 1, limit: $l) { nodes { id } } }",
            {"l": 2**40},
            "Variable '$l' has invalid value: Int cannot represent non 32-bit signed integer",
        ),
        (
            "query($k: [RunLogKind!]) { runLog(runId: 1, kinds: $k) { nodes { id } } }",
            {"k": ["run.status"]},
            "Value 'run.status' does not exist in 'RunLogKind' enum",
        ),
        (
            "query($r: ID!) { runLog(runId: $r) { nodes { id } } }",
            {"r": {"id": 1}},
            "Variable '$r' has invalid value: ID cannot represent value",
        ),
        ("{ runLog(runId: 1) { nodes { colour } } }", {}, "Cannot query field 'colour'"),
        ("{ runLog(runId: 1) { nodes { id } }", {}, "Syntax Error"),
    ],
)
def test_a_request_the_caller_got_wrong_says_what_is_wrong(
    api: Api, query: str, variables: dict[str, Any], says: str
) -> None:
    body = api.post(query, variables, token=ADMIN)
    (error,) = body["errors"]
    assert says in error["message"]
    # Not masked; a variable that does not coerce is BAD_USER_INPUT, as a resolver's refusal.
    assert error.get("extensions", {}).get("code", "BAD_USER_INPUT") == "BAD_USER_INPUT"
    assert_clean_errors(body)


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b"\xff\xfe not json", "application/json", 400),  # json.loads guesses UTF-16 and fails
        (b'"a string"', "application/json", 400),
        (b"null", "application/json", 400),
        (b"[]", "application/json", 400),  # a batch: batching is off
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),  # past the recursion limit
        (b'{"query": 5}', "application/json", 400),
        (b'{"query": "{ __typename }", "variables": [1]}', "application/json", 400),
        (b"query={__typename}", "application/x-www-form-urlencoded", 415),
        (b"--x\r\n", "multipart/form-data; boundary=x", 415),  # uploads are off
    ],
)
def test_a_body_that_is_not_a_graphql_request_is_a_400_never_a_500(
    api: Api, content: bytes, content_type: str, status: int
) -> None:
    response = api.client.post("/graphql", content=content, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert not leaks(response.text)


def test_a_lone_surrogate_in_a_detail_answers_false_and_is_logged_readably(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # Valid JSON, but no UTF-8 text can hold it.
    body = b'{"query": "mutation($d: JSON) { writeRunLog(runId: 1, kind: \\"note\\", detail: $d) }",'
    body += b' "variables": {"d": {"text": "half \\ud800 a pair"}}}'
    with caplog.at_level(logging.WARNING, logger="gql"):
        response = api.client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
    answer = response.json()
    assert answer["data"] == {"writeRunLog": False} and "errors" not in answer
    assert [e["reason"] for e in answer["extensions"]["runlog"]["notStored"]] == ["DETAIL_NOT_JSON"]
    (record,) = [r for r in caplog.records if r.name.startswith("gql")]
    message = record.getMessage()
    assert message.startswith("run log line not stored: detail is not storable JSON")
    assert "half \\ud800 a pair" in message  # escaped, so the log stays UTF-8
    message.encode()
    assert record.exc_info is None, "an expected refusal is not logged as a failure"
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0


def test_a_masked_error_carries_the_request_id_of_its_log_line_and_response_header(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    assert api.write(5, "run.blocked", {"blockingRunId": 4, "concurrencyKey": "invasion:Yew"})
    tables.execute("DROP TABLE event_runs")  # the blocking run cannot be looked up any more
    with caplog.at_level(logging.ERROR, logger="gql"):
        response = api.client.post(
            "/graphql",
            json={
                "query": "{ runLog(runId: 5) { nodes { kind detail { ... on RunBlockedDetail {"
                " concurrencyKey blockingRun { status } } } } } }"
            },
        )
    body = response.json()
    # One bad field does not break the page: the line is there, its run is null.
    line = body["data"]["runLog"]["nodes"][0]
    assert line["detail"] == {"concurrencyKey": "invasion:Yew", "blockingRun": None}
    (error,) = body["errors"]
    request_id = error["extensions"]["requestId"]
    assert response.headers["X-Request-Id"] == request_id
    assert error == {
        "message": f"Unexpected error (request id {request_id}).",
        "locations": error["locations"],
        "path": ["runLog", "nodes", 0, "detail", "blockingRun"],
        "extensions": {"code": "INTERNAL_SERVER_ERROR", "requestId": request_id},
    }
    assert_clean_errors(body)
    (record,) = [r for r in caplog.records if request_id in r.getMessage()]
    assert record.exc_info is not None  # the full story: the stack and the driver's error
    assert "event_runs" in caplog.text


def test_the_settings_repr_shows_no_secret(backend: Backend) -> None:
    settings = backend.settings(
        database_url="mysql+aiomysql://runlog:db-password-xyz@db:3306/events",
        reader_tokens=("reader-token-0123456789",),
        writer_tokens=("writer-token-0123456789",),
    )
    shown = repr(settings)
    for secret in ("db-password-xyz", "reader-token", "writer-token", ADMIN):
        assert secret not in shown


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("x\n2026-01-01 00:00:00 INFO gql.edge.app: all is well", None),
        ("note", {"text": "a\u2028b\x85c\rd", "actor\nINFO forged": 1}),
        ("run.status", {"to": "live", "x\ny": 1}),  # the key is named in the reason, too
    ],
)
def test_a_refused_line_is_logged_on_one_line_and_reads_back_whole(
    api: Api, caplog: pytest.LogCaptureFixture, kind: str, detail: Any
) -> None:
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(1, kind, detail) is False
    (record,) = caplog.records
    message = record.getMessage()
    assert len(message.splitlines()) == 1, message
    line = json.loads(message.split("; line ", 1)[1])
    assert (line["kind"], line["detail"]) == (kind, detail)


@strawberry.type
class _Quiet:
    ok: bool = True


@strawberry.type
class _Failing:
    @strawberry.subscription
    async def counts(self) -> AsyncGenerator[int, None]:
        yield 1
        raise RuntimeError("the database password is hunter2")


def test_a_subscription_event_that_fails_unexpectedly_is_masked_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each event of a stream is masked as it is sent, not only the operation's last result."""
    schema = strawberry.Schema(query=_Quiet, subscription=_Failing, extensions=[MaskUnexpected])

    async def events() -> list[Any]:
        stream = await schema.subscribe("subscription { counts }")
        assert not isinstance(stream, strawberry.types.ExecutionResult)
        return [result async for result in stream]

    with caplog.at_level(logging.ERROR, logger="gql.edge.app"):
        first, failed = asyncio.run(events())
    assert first.data == {"counts": 1} and not first.errors
    assert [e.message for e in failed.errors] == ["Unexpected error (request id -)."]
    assert failed.errors[0].extensions["code"] == "INTERNAL_SERVER_ERROR"
    assert "hunter2" in caplog.text  # logged in full, for whoever runs the server
