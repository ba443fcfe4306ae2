"""/graphql as the GraphQL over HTTP specification has it.

A client that accepts `application/graphql-response+json` (Apollo Client 4,
urql) gets that media type, and 400 with no `data` for a request that does
not parse, validate or coerce; one that accepts only `application/json`, or
sends no `Accept`, gets what it always got, 200, but no `data` either on a
request error. Queries may come by GET, mutations only by POST. The spec's
own audit (the `graphql-http` package) runs against a real server in
tests/test_js_clients.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from .conftest import Api

GRAPHQL_RESPONSE = "application/graphql-response+json"
# What the clients send by default.
APOLLO_ACCEPT = "application/graphql-response+json,application/json;q=0.9"
URQL_ACCEPT = (
    "application/graphql-response+json, application/graphql+json, application/json, "
    "text/event-stream, multipart/mixed"
)
OPERATIONS = Path(__file__).resolve().parent.parent / "gql" / "operations"
PAGE = (OPERATIONS / "RunLogPage.graphql").read_text()
WRITE_NOTE = (OPERATIONS / "WriteNote.graphql").read_text()
# A parse failure, a validation failure, a variable that does not coerce.
REQUEST_ERRORS: list[dict[str, Any]] = [
    {"query": "{"},
    {"query": "{ noSuchField }"},
    {"query": PAGE, "variables": {"runId": None}},
]


def post(api: Api, body: dict[str, Any], accept: str | None) -> httpx.Response:
    headers = {} if accept is None else {"Accept": accept}
    return api.client.post("/graphql", json=body, headers=headers)


def test_a_client_that_accepts_graphql_response_json_gets_it_with_the_specs_status_codes(api: Api) -> None:
    for accept in (GRAPHQL_RESPONSE, APOLLO_ACCEPT, URQL_ACCEPT):
        answered = post(api, {"query": PAGE, "variables": {"runId": "7"}}, accept)
        assert answered.status_code == 200, answered.text
        assert answered.headers["content-type"] == GRAPHQL_RESPONSE
        assert answered.json() == {
            "data": {"runLog": {"nodes": [], "pageInfo": {"hasNextPage": False, "endCursor": None}}}
        }
        for body in REQUEST_ERRORS:
            # Twice: the second time from the document cache.
            for _ in range(2):
                refused = post(api, body, accept)
                assert refused.status_code == 400, (body, refused.text)
                assert refused.headers["content-type"] == GRAPHQL_RESPONSE
                assert "data" not in refused.json() and refused.json()["errors"], refused.text


def test_a_client_that_accepts_json_gets_200_as_before_and_no_data_on_a_request_error(api: Api) -> None:
    for accept in (None, "application/json", "*/*", "text/html, */*;q=0.8"):
        for body in REQUEST_ERRORS:
            for _ in range(2):
                refused = post(api, body, accept)
                assert refused.status_code == 200, (accept, body, refused.text)
                assert refused.headers["content-type"] == "application/json"
                assert "data" not in refused.json() and refused.json()["errors"], refused.text


def test_a_write_answers_in_the_media_type_accepted(api: Api) -> None:
    for accept, media_type in ((GRAPHQL_RESPONSE, GRAPHQL_RESPONSE), (None, "application/json")):
        for _ in range(2):
            answered = post(api, {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "hi"}}, accept)
            assert answered.status_code == 200 and answered.headers["content-type"] == media_type
            assert answered.json() == {"data": {"writeRunLog": True}}


def test_a_field_error_keeps_data_and_200(api: Api) -> None:
    # Execution started: `data` is there (null up to the nullable parent), and it is no request error.
    answered = post(
        api, {"query": 'mutation { pruneTerminal(before: "2026-01-01T00:00:00Z") }'}, GRAPHQL_RESPONSE
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["data"] is None and answered.json()["errors"][0]["path"] == ["pruneTerminal"]


def test_a_query_by_get_with_url_encoded_variables(api: Api) -> None:
    assert api.write(7, "note", {"text": "by GET"})
    for accept, media_type in ((None, "application/json"), (URQL_ACCEPT, GRAPHQL_RESPONSE)):
        answered = api.client.get(
            "/graphql",
            params={"query": PAGE, "operationName": "RunLogPage", "variables": json.dumps({"runId": "7"})},
            headers={} if accept is None else {"Accept": accept},
        )
        assert answered.status_code == 200, answered.text
        assert answered.headers["content-type"] == media_type
        assert [line["kind"] for line in answered.json()["data"]["runLog"]["nodes"]] == ["NOTE"]
    refused = api.client.get("/graphql", params={"query": "{ nope }"}, headers={"Accept": GRAPHQL_RESPONSE})
    assert refused.status_code == 400 and "data" not in refused.json()


def test_a_mutation_by_get_is_refused_with_405_and_stores_nothing(api: Api) -> None:
    for accept in (None, GRAPHQL_RESPONSE):
        refused = api.client.get(
            "/graphql",
            params={"query": WRITE_NOTE, "variables": json.dumps({"runId": "7", "text": "by GET"})},
            headers={} if accept is None else {"Accept": accept},
        )
        assert refused.status_code == 405, refused.text
        assert refused.headers["Allow"] == "POST"
        error = refused.json()["errors"][0]
        assert error["extensions"]["code"] == "METHOD_NOT_ALLOWED" and "POST" in error["message"]
    assert api.data(PAGE, {"runId": "7"})["runLog"]["nodes"] == []
