"""A `writeRunLog` that answers false says why, in `extensions.runlog.notStored`, however it is answered.

One entry per field not stored: its response path, a stable reason, a sentence naming
the value, and the request id. Each way the service answers a write is tried: over HTTP, and
both websocket protocols.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app

from .conftest import MARIADB_URL, UNHURRIED_WRITE_TIMEOUT, Api, Backend
from .faultproxy import FaultProxy

WRITE = "mutation W($r: ID!, $k: String!, $d: JSON) { writeRunLog(runId: $r, kind: $k, detail: $d) }"
TWO = (
    "mutation Two($d: JSON) {"
    ' w1: writeRunLog(runId: 1, kind: "note", detail: $d)'
    ' w2: writeRunLog(runId: 1, kind: "run.blockd") }'
)
UNKNOWN_KIND = "kind 'run.blockd' is not one of the 22 kinds this server knows"
REQUEST_ID = "why-not-stored-1"

WAYS = ["http", "graphql-transport-ws", "graphql-ws"]


class Ways:
    """One app served one way; `answer` sends an operation that way and gives the answer's payload."""

    def __init__(self, backend: Backend, way: str, **overrides: Any) -> None:
        settings = backend.settings(write_timeout=UNHURRIED_WRITE_TIMEOUT, **overrides)
        self.way = way
        self.client = TestClient(create_app(settings))

    def __enter__(self) -> Ways:
        self.client.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.__exit__(*exc)

    def answer(self, query: str, **variables: Any) -> dict[str, Any]:
        """The payload the operation is answered with, the way this was made for."""
        if self.way in ("graphql-transport-ws", "graphql-ws"):
            return self._over_websocket(query, variables)
        return self._post(query, variables)

    def _post(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(
            "/graphql",
            json={"query": query, "variables": variables},
            headers={"x-request-id": REQUEST_ID},
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def _over_websocket(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        protocol = self.way
        start = "subscribe" if protocol == "graphql-transport-ws" else "start"
        payloads = []
        headers = {"x-request-id": REQUEST_ID}
        with self.client.websocket_connect("/graphql", subprotocols=[protocol], headers=headers) as ws:
            ws.send_json({"type": "connection_init", "payload": {}})
            assert ws.receive_json() == {"type": "connection_ack"}
            # Twice on one socket: each operation's answer says why for its own writes alone.
            for op_id in ("1", "2"):
                ws.send_json(
                    {"type": start, "id": op_id, "payload": {"query": query, "variables": variables}}
                )
                while (message := ws.receive_json())["type"] == "ka":
                    pass
                assert message["type"] in ("next", "data") and message["id"] == op_id, message
                assert ws.receive_json() == {"type": "complete", "id": op_id}
                payloads.append(message["payload"])
        assert payloads[0] == payloads[1]
        result: dict[str, Any] = payloads[1]
        return result


@pytest.fixture(params=WAYS)
def served(request: pytest.FixtureRequest, tables: Backend) -> Iterator[Ways]:
    with Ways(tables, request.param) as ways:
        yield ways


def not_stored(body: dict[str, Any]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = body["extensions"]["runlog"]["notStored"]
    return entries


def entry(path: list[str], reason: str, message: str) -> dict[str, Any]:
    return {"path": path, "reason": reason, "message": message, "requestId": REQUEST_ID}


def test_an_unknown_kind_answers_false_and_says_why_and_is_still_logged_whole(
    served: Ways, caplog: pytest.LogCaptureFixture
) -> None:
    query = WRITE
    with caplog.at_level(logging.WARNING, logger="gql"):
        body = served.answer(query, r="7", k="run.blockd", d={"text": "x"})
    assert body["data"]["writeRunLog"] is False
    assert "errors" not in body
    assert not_stored(body) == [entry(["writeRunLog"], "UNKNOWN_KIND", UNKNOWN_KIND)]
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run log line not stored")]
    assert logged and all(UNKNOWN_KIND in m and f"request {REQUEST_ID}" in m for m in logged)
    assert all('"kind": "run.blockd"' in m and '"detail": {"text": "x"}' in m for m in logged)


def test_of_two_aliased_writes_only_the_one_not_stored_has_an_entry(served: Ways, tables: Backend) -> None:
    body = served.answer(TWO, d={"text": "stored"})
    assert body["data"] == {"w1": True, "w2": False}
    assert not_stored(body) == [entry(["w2"], "UNKNOWN_KIND", UNKNOWN_KIND)]
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log WHERE kind = 'note'") >= 1


def test_a_line_that_is_stored_carries_no_extensions_even_after_one_that_was_not(served: Ways) -> None:
    query = WRITE
    refused = served.answer(query, r="7", k="run.blockd", d={"text": "not stored"})
    assert [e["reason"] for e in not_stored(refused)] == ["UNKNOWN_KIND"]
    body = served.answer(query, r="7", k="note", d={"text": "stored"})
    assert body["data"]["writeRunLog"] is True
    assert "extensions" not in body


def test_a_detail_that_does_not_fit_its_kind_says_which_field(tables: Backend, api: Api) -> None:
    body = api.post(WRITE, {"r": "7", "k": "run.status", "d": {"to": 5}})
    assert body["data"] == {"writeRunLog": False}
    (found,) = not_stored(body)
    assert found["path"] == ["writeRunLog"] and found["reason"] == "DETAIL_DOES_NOT_FIT"
    assert "to: input should be a valid string" in found["message"]


def test_a_detail_over_the_size_limit_says_its_size_and_the_limit(tables: Backend, make_api: Any) -> None:
    api = make_api(max_detail_bytes=1000)
    body = api.post(WRITE, {"r": "7", "k": "note", "d": {"text": "x" * 1000}})
    assert body["data"] == {"writeRunLog": False}
    (found,) = not_stored(body)
    assert found["reason"] == "DETAIL_TOO_LARGE"
    assert (
        found["message"] == "detail is 1011 bytes as JSON, over the limit of 1000 (RUNLOG_MAX_DETAIL_BYTES)"
    )


@contextmanager
def down(backend: Backend, client_settings: dict[str, Any]) -> Iterator[TestClient]:
    """An app whose database is down in the block: SQLite locked by another process, MariaDB refusing."""
    if backend.name == "sqlite":
        path = backend.url.removeprefix("sqlite+aiosqlite:///")
        with TestClient(create_app(backend.settings(**client_settings))) as client:
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
            try:
                yield client
            finally:
                holder.execute("COMMIT")
                holder.close()
        return
    with FaultProxy(MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306) as proxy:
        url = sa.make_url(backend.url).set(host="127.0.0.1", port=proxy.port)
        settings = backend.settings(database_url=url.render_as_string(hide_password=False), **client_settings)
        # Refusing before the app connects: a connection it held would be cut mid-INSERT,
        # whose outcome no one knows (OUTCOME_UNKNOWN, tests/test_faults.py).
        proxy.refuse()
        with TestClient(create_app(settings)) as client:
            yield client


def test_a_database_that_is_down_answers_false_saying_the_database_could_not_store_it(
    tables: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    with down(tables, {"write_timeout": 1.0}) as client, caplog.at_level(logging.WARNING, logger="gql"):
        body = Api(client).post(WRITE, {"r": "7", "k": "note", "d": {"text": "while down"}})
    assert body["data"] == {"writeRunLog": False}
    (found,) = not_stored(body)
    assert found["reason"] == "DATABASE"
    assert found["message"].startswith("the database could not store the line")
    # What the driver said (a host, a file) is the server log's, not the writer's.
    (logged,) = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("run log line not stored")
    ]
    assert "while down" in logged
    said = logged.removeprefix("run log line not stored: ").split("; request ", 1)[0]
    assert said not in found["message"]
