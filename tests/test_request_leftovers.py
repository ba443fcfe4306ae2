"""What a request leaves behind once it is answered: none of its body, whatever the collector does.

A body held in a reference cycle lives until the cyclic collector runs,
which the served app runs every 10,000 new containers: a hundred or so
requests. 64 query texts of 3 MiB refused for their size once took a
process from 81 to 950 MiB that way. Here the collector is off while the app
answers, and the body the client sent must have no referrer left but the
test's own: each request is answered by the app called in process, as ASGI,
with its lifespan running (the same app `serve` runs).
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from gql.edge.app import create_app

from .conftest import UNHURRIED_WRITE_TIMEOUT, Backend

MIB = 1024 * 1024


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[dict[str, Any]]:
    """`app`'s lifespan, driven through ASGI's lifespan messages; its state."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield scope["state"]
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task


async def post(app: Any, state: dict[str, Any], body: bytes) -> int:
    """POST `body` to /graphql in one message, as uvicorn hands it over; the status answered."""
    sent: list[dict[str, Any]] = []
    given = [body]

    async def receive() -> dict[str, Any]:
        if given:
            return {"type": "http.request", "body": given.pop(), "more_body": False}
        await asyncio.Event().wait()  # the client stays until answered
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append({k: v for k, v in message.items() if k != "body"})

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": dict(state),  # as uvicorn copies the lifespan's state into each request
    }
    await app(scope, receive, send)
    status: int = sent[0]["status"]
    return status


@contextmanager
def collector_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def held_elsewhere(body: bytes) -> list[str]:
    """What holds `body` but the calling test's frame (or its coroutine), named by type."""
    caller = sys._getframe(1)
    # gc.get_referrers does not see frozen objects, and the app froze what existed when it
    # started (a module's globals among them); its unfreeze when it stops finds none left.
    gc.unfreeze()
    return [
        type(r).__name__
        for r in gc.get_referrers(body)
        if r is not caller and getattr(r, "cr_frame", None) is not caller
    ]


def request(query: str, **variables: Any) -> bytes:
    return json.dumps({"query": query, "variables": variables}).encode()


BODIES = {
    # Refused for the size of its text (RUNLOG_MAX_QUERY_BYTES), as in the report.
    "a query text of 3 MiB": lambda: request("{ __typename }" + " " * 3 * MIB),
    # Answered.
    "3 MiB of variables": lambda: request("query Q($t: String) { __typename }", t="v" * 3 * MIB),
    # Answered (its text is cached by the first one).
    "a page with 200 KiB of variables": lambda: request(
        "query P($r: ID!, $t: String) { runLog(runId: $r) { nodes { id } } }", r=1, t="v" * 200 * 1024
    ),
    # Refused: not JSON.
    "3 MiB that are not JSON": lambda: b"{" + b" " * 3 * MIB,
    # A line refused for its detail's size (and logged whole).
    "a write of a 1 MiB detail": lambda: request(
        'mutation W($d: JSON) { writeRunLog(runId: 1, kind: "note", detail: $d) }', d={"text": "d" * MIB}
    ),
}


@pytest.mark.parametrize("name", list(BODIES))
def test_no_request_leaves_its_body_behind(tables: Backend, name: str) -> None:
    app = create_app(tables.settings(write_timeout=UNHURRIED_WRITE_TIMEOUT))

    async def scenario() -> list[list[str]]:
        found = []
        async with running(app) as state:
            with collector_off():
                for _ in range(2):  # the second time, whatever the first cached
                    body = BODIES[name]()
                    assert await post(app, state, body) in (200, 400)
                    found.append(held_elsewhere(body))
                    del body
        return found

    assert asyncio.run(scenario()) == [[], []]
