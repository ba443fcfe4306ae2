"""Every HTTP response carries its request id, errors are JSON, and only JSON is executed."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from gql.domain.auth import Policy
from gql.edge.app import create_app

from .conftest import Api, Backend

QUERY = b'{"query": "{ __typename }"}'
JSON = {"Content-Type": "application/json"}
GENERATED_ID = re.compile(r"[0-9a-f]{16}")


def assert_json_error(
    response: httpx.Response, status: int, code: str, says: str, request_id: str | None = None
) -> None:
    """A JSON error naming what was wrong, with the request id in the header and the body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    if request_id is None:
        request_id = response.headers["X-Request-Id"]
        assert GENERATED_ID.fullmatch(request_id)
    assert response.headers["X-Request-Id"] == request_id
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == code
    assert error["extensions"]["requestId"] == request_id
    assert says in error["message"], error["message"]


@pytest.mark.parametrize(
    ("send", "status", "code", "says"),
    [
        (
            {"content": b'{"query":', "headers": JSON},
            400,
            "BAD_REQUEST",
            "Unable to parse request body as JSON",
        ),
        ({"content": b'[{"query": "{ __typename }"}]', "headers": JSON}, 400, "BAD_REQUEST", "Batching"),
        ({"content": QUERY}, 415, "UNSUPPORTED_MEDIA_TYPE", "application/json"),
        ({"content": b"x" * 2000, "headers": JSON}, 413, "BODY_TOO_LARGE", "RUNLOG_MAX_BODY_BYTES"),
    ],
    ids=["bad JSON", "batch", "no content type", "body too large"],
)
def test_a_refused_post_is_a_json_error_with_the_request_id(
    make_api: Callable[..., Api], send: dict[str, Any], status: int, code: str, says: str
) -> None:
    api = make_api(max_body_bytes=1000)
    assert_json_error(api.client.post("/graphql", **send), status, code, says)


def test_a_number_past_pythons_digit_limit_is_a_json_400_not_a_bare_500(api: Api) -> None:
    # json.loads refuses integers of more than 4300 digits with a ValueError,
    # which was not a JSONDecodeError and so escaped as a plain-text 500.
    for digits in (4301, 100_000):
        for body in (
            b'{"query": "{ __typename }", "variables": {"n": ' + b"9" * digits + b"}}",
            b'{"query": "query($n: Int) { __typename }", "variables": {"n": -' + b"1" * digits + b"}}",
            b'{"query": "{ __typename }", "extensions": [' + b"7" * digits + b"]}",
        ):
            response = api.client.post("/graphql", content=body, headers=JSON)
            assert_json_error(response, 400, "BAD_REQUEST", "a number has more than 4300 digits")


def test_the_routers_404_and_405_are_json_with_the_request_id(api: Api) -> None:
    assert_json_error(api.client.get("/nowhere"), 404, "NOT_FOUND", "Not Found")
    response = api.client.put("/graphql", content=QUERY, headers=JSON)
    assert_json_error(response, 405, "METHOD_NOT_ALLOWED", "Method Not Allowed")
    assert set(response.headers["Allow"].split(", ")) == {"GET", "HEAD", "POST"}
    assert_json_error(api.client.delete("/healthz"), 405, "METHOD_NOT_ALLOWED", "Method Not Allowed")


def test_a_get_mutation_is_a_json_405_with_the_request_id(api: Api) -> None:
    response = api.client.get("/graphql?query=mutation{__typename}", headers={"Accept": "application/json"})
    assert_json_error(response, 405, "METHOD_NOT_ALLOWED", "must be sent by POST")
    assert response.headers["Allow"] == "POST"


def test_graphiql_off_is_a_json_404_with_the_request_id(make_api: Callable[..., Api]) -> None:
    response = make_api(graphiql=False).client.get("/graphql", headers={"Accept": "text/html"})
    assert_json_error(response, 404, "NOT_FOUND", "Not Found")


def test_the_graphiql_page_and_healthz_carry_a_request_id(api: Api) -> None:
    page = api.client.get("/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()
    assert GENERATED_ID.fullmatch(page.headers["X-Request-Id"])
    assert GENERATED_ID.fullmatch(api.client.get("/healthz").headers["X-Request-Id"])


def test_metrics_liveness_readiness_and_graphiqls_files_carry_a_request_id(api: Api) -> None:
    page = api.client.get("/graphql", headers={"Accept": "text/html"}).text
    script = re.search(r'src="[^"]*(graphiql/[^"]+[.]js)"', page)
    assert script is not None, page[:2000]
    for path in ("/metrics", "/livez", "/readyz", f"/{script.group(1)}"):
        response = api.client.get(path, headers={"X-Request-Id": "probe-7"})
        assert response.status_code == 200, path
        assert response.headers["X-Request-Id"] == "probe-7", path


def test_an_unhandled_exception_is_a_json_500_with_the_request_id_logged(
    tables: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Policy, header: str | None) -> Any:
        raise RuntimeError("a bug outside any resolver")

    # Who the caller is is found while the context is built: outside GraphQL's
    # own error handling, so a bug there reached Starlette's plain-text 500.
    monkeypatch.setattr(Policy, "identify", broken)
    client = TestClient(create_app(tables.settings()), raise_server_exceptions=False)
    with client, caplog.at_level(logging.ERROR, logger="gql"):
        response = client.post("/graphql", content=QUERY, headers=JSON)
    assert_json_error(response, 500, "INTERNAL_SERVER_ERROR", "Unexpected error (request id ")
    assert "a bug outside any resolver" not in response.text
    request_id = response.headers["X-Request-Id"]
    assert any(request_id in r.getMessage() and r.exc_info for r in caplog.records)


def test_every_answer_carries_a_new_id_unless_the_caller_sent_a_valid_one(api: Api) -> None:
    first = api.client.post("/graphql", content=QUERY, headers=JSON)
    second = api.client.post("/graphql", content=QUERY, headers=JSON)
    assert first.json() == {"data": {"__typename": "Query"}}
    ids = {first.headers["X-Request-Id"], second.headers["X-Request-Id"]}
    assert len(ids) == 2 and all(GENERATED_ID.fullmatch(i) for i in ids)

    for given in ("trace-42", "a" * 128, "Root=1-5f84c7a9-abc; Parent=53995c3f; Sampled=1"):
        response = api.client.post("/graphql", content=QUERY, headers={**JSON, "X-Request-Id": given})
        assert response.headers["X-Request-Id"] == given
        assert response.json() == {"data": {"__typename": "Query"}}
    for refused in ("a" * 129, "tab\there", "bell\x07"):
        response = api.client.post("/graphql", content=QUERY, headers={**JSON, "X-Request-Id": refused})
        assert GENERATED_ID.fullmatch(response.headers["X-Request-Id"])


def test_a_callers_id_names_a_masked_error_and_its_log_line(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    tables.execute("DROP TABLE event_run_log")
    with caplog.at_level(logging.ERROR, logger="gql"):
        response = api.client.post(
            "/graphql",
            json={"query": "{ runLog(runId: 1) { nodes { id } } }"},
            headers={"X-Request-Id": "caller-chosen-7"},
        )
    (error,) = response.json()["errors"]
    assert error["extensions"]["requestId"] == "caller-chosen-7"
    assert response.headers["X-Request-Id"] == "caller-chosen-7"
    assert "caller-chosen-7" in caplog.text


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain, application/json",
        "application/jsonp",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json-patch+json",
        "application/json; charset=latin-1",
    ],
)
def test_only_json_is_executed(api: Api, content_type: str) -> None:
    response = api.client.post("/graphql", content=QUERY, headers={"Content-Type": content_type})
    assert_json_error(response, 415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type: application/json")
    assert "data" not in response.json()


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON; charset=UTF-8",
        "application/json;charset=utf-8",
        'application/json; charset="utf-8"',
    ],
)
def test_json_with_optional_parameters_is_executed(tables: Backend, content_type: str) -> None:
    with TestClient(create_app(tables.settings())) as client:
        for _ in range(2):  # the second time, from the document cache
            response = client.post("/graphql", content=QUERY, headers={"Content-Type": content_type})
            assert response.status_code == 200, response.text
            assert response.json() == {"data": {"__typename": "Query"}}
        refused = client.post("/graphql", content=QUERY, headers={"Content-Type": "application/jsonp"})
        assert refused.status_code == 415


def test_a_huge_operation_name_is_not_echoed_back_whole(api: Api) -> None:
    body = {"query": "query A { __typename } query B { __typename }", "operationName": "x" * 1_000_000}
    response = api.client.post("/graphql", json=body)
    assert_json_error(response, 400, "BAD_REQUEST", "Unknown operation named")
    assert len(response.content) < 2000
    assert "characters, shortened" in response.json()["errors"][0]["message"]


def test_a_websockets_handshake_carries_the_request_id_accepted_or_refused(api: Api) -> None:
    headers = {"X-Request-Id": "tail-req-9"}
    with api.client.websocket_connect(
        "/graphql", subprotocols=["graphql-transport-ws"], headers=headers
    ) as ws:
        assert ws.extra_headers is not None
        assert (b"x-request-id", b"tail-req-9") in ws.extra_headers  # on the 101
    # No websocket there: refused before it is accepted.
    with (
        pytest.raises(WebSocketDenialResponse) as refused,
        api.client.websocket_connect("/elsewhere", headers=headers),
    ):
        pass
    assert_json_error(refused.value, 403, "FORBIDDEN", "refused", request_id="tail-req-9")
