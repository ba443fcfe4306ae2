"""`GET /runs/{runId}/log.ndjson` and `python -m gql export`: a run's log, oldest first, as GraphQL reads.

Against each backend: the lines and their order, the filters as query
parameters, refusals naming the parameter, the caller's authorization, a
body sent page by page (never held whole), and a client that stops reading
dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

from starlette.testclient import TestClient

from gql.edge import export
from gql.edge.app import create_app
from gql.edge.graphiql import with_fragments

from .conftest import Api, Backend

NODES = with_fragments(
    "query N($runId: ID!) { runLog(runId: $runId, limit: 2000) { nodes { cursor ...RunLogLineFields } } }\n"
)


def _lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.decode().splitlines()]


def _uncursored(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lines without their cursors (a recent line's names what was read up to it, so they differ by read)."""
    return [{k: v for k, v in line.items() if k != "cursor"} for line in lines]


def _written(api: Api) -> None:
    api.write(7, "note", {"text": "first"}, phase=1, stepId="3")
    api.write(7, "run.status", {"from": "scheduled", "to": "live"}, phase=2)
    api.write(8, "note", {"text": "another run"})
    api.write(7, "note", {"text": "Britain"}, phase=1, stepId="4")


def test_the_export_is_the_runs_lines_oldest_first_as_graphql_gives_them(api: Api) -> None:
    _written(api)
    response = api.client.get("/runs/7/log.ndjson")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = _lines(response.content)
    # Newest first in GraphQL; oldest first here, each line as it reads there.
    nodes = api.data(NODES, {"runId": "7"})["runLog"]["nodes"][::-1]
    assert _uncursored(lines) == _uncursored(nodes)
    assert all(line["cursor"] for line in lines)
    assert [line["detail"]["__typename"] for line in lines] == ["NoteDetail", "RunStatusDetail", "NoteDetail"]
    assert all(isinstance(line["id"], str) and line["runId"] == "7" for line in lines)
    by_phase = _lines(api.client.get("/runs/7/log.ndjson?phase=1&stepId=3,4").content)
    assert [line["detail"]["text"] for line in by_phase] == ["first", "Britain"]
    assert [
        line["detail"]["text"] for line in _lines(api.client.get("/runs/7/log.ndjson?search=brit").content)
    ] == ["Britain"]
    assert [
        line["kindName"] for line in _lines(api.client.get("/runs/7/log.ndjson?kinds=run.status").content)
    ] == ["run.status"]
    assert api.client.get("/runs/9/log.ndjson").content == b""


def test_a_parameter_that_does_not_parse_is_a_400_naming_it(api: Api) -> None:
    for query, named in (
        ("since=yesterday", "since"),
        ("phase=one", "phase"),
        ("phase=-1", "phase"),
        ("stepId=x", "stepId"),
        ("search=", "search"),
        ("kinds=NOPE", "kinds"),
        ("kinds=", "kinds= is empty: name at least one kind or leave kinds out"),
        ("colour=red", "colour"),
        ("since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", "since"),
    ):
        response = api.client.get(f"/runs/7/log.ndjson?{query}")
        assert response.status_code == 400, (query, response.text)
        assert named in response.json()["errors"][0]["message"], (query, response.text)
    assert api.client.get("/runs/x/log.ndjson").status_code == 400


def test_the_export_asks_what_runlog_asks_of_its_caller(tables: Backend) -> None:
    with TestClient(create_app(tables.settings(reader_tokens=("reader-token",)))) as client:
        refused = client.get("/runs/7/log.ndjson")
        # As /graphql says it, with the scheme to answer with.
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        assert (
            client.post("/graphql", json={"query": "{ runLog(runId: 7) { nodes { id } } }"}).json()["errors"][
                0
            ]["extensions"]["code"]
            == "UNAUTHENTICATED"
        )
        answer = client.get("/runs/7/log.ndjson", headers={"Authorization": "Bearer reader-token"})
        assert answer.status_code == 200


def test_the_body_is_sent_a_page_at_a_time(api: Api, tables: Backend) -> None:
    import sqlalchemy as sa

    count = 3 * export.PAGE_LINES + 7
    with tables.sync.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, 'note', :d, :at)"),
            [
                {"d": json.dumps({"text": f"n{n}"}), "at": f"2026-03-01 12:00:00.{n % 1000:03d}"}
                for n in range(count)
            ],
        )
    chunks: list[int] = []
    seen = 0
    with api.client.stream("GET", "/runs/7/log.ndjson") as response:
        for chunk in response.iter_raw():
            chunks.append(len(chunk))
            seen += chunk.count(b"\n")
    assert seen == count
    # Never the whole body at once: at most a page in each send.
    assert len(chunks) >= 4 and max(chunks) < sum(chunks) / 3


def test_a_client_that_stops_reading_is_dropped(make_api: Any, tables: Backend) -> None:
    api = make_api(send_timeout=1.0)
    for n in range(3):
        api.write(7, "note", {"text": f"n{n}"})
    app = api.client.app
    never = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":
            await never.wait()  # a client whose socket is full: the server's send waits for ever

    asked: list[bool] = []

    async def receive() -> dict[str, Any]:
        if not asked:
            asked.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/runs/7/log.ndjson",
        "raw_path": b"/runs/7/log.ndjson",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": dict(api.client.app_state),  # as uvicorn copies the lifespan's state
        "app": app,
    }

    async def run() -> None:
        async with asyncio.timeout(30):  # dropped after 1 s, not held
            await app(scope, receive, send)

    api.client.portal.call(run)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


def test_python_m_gql_export_writes_the_same_lines(api: Api, tables: Backend) -> None:
    _written(api)
    env = {**os.environ, "RUNLOG_DATABASE_URL": tables.url}
    done = subprocess.run(
        [sys.executable, "-m", "gql", "export", "7", "--phase", "1"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert _uncursored(_lines(done.stdout)) == _uncursored(
        _lines(api.client.get("/runs/7/log.ndjson?phase=1").content)
    )
    assert len(_lines(done.stdout)) == 2
    refused = subprocess.run(
        [sys.executable, "-m", "gql", "export", "7", "--since", "soon"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert refused.returncode == 1 and b"since" in refused.stderr


def test_a_failure_of_ours_is_a_500_whose_request_id_finds_its_stack_in_the_log(
    api: Api, tables: Backend, caplog: Any
) -> None:
    _written(api)
    tables.execute("DROP TABLE event_run_log")  # a fault of the server's database, not the caller's
    for path in ("Strawberry", "the engine"):  # the text's first export prepares it for the next
        caplog.clear()
        response = api.client.get("/runs/7/log.ndjson")
        assert response.status_code == 500, path
        error = response.json()["errors"][0]
        assert error["extensions"]["requestId"] in error["message"]
        logged = [r for r in caplog.records if error["extensions"]["requestId"] in r.getMessage()]
        assert [(r.levelno, bool(r.exc_info)) for r in logged] == [(logging.ERROR, True)], path


def test_past_max_exports_an_export_is_refused_with_when_to_retry(make_api: Any, tables: Backend) -> None:
    api = make_api(max_exports=1)
    api.write(7, "note", {"text": "n"})
    app = api.client.app
    stuck = asyncio.Event()
    started: list[Any] = []

    async def send(message: Any) -> None:
        started.append(message)
        await stuck.wait()  # a client that takes nothing

    asked: list[bool] = []

    async def receive() -> dict[str, Any]:
        if not asked:
            asked.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await stuck.wait()
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/runs/7/log.ndjson",
        "raw_path": b"/runs/7/log.ndjson",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": dict(api.client.app_state),
        "app": app,
    }
    portal = api.client.portal
    running = portal.start_task_soon(app, scope, receive, send)
    deadline = time.monotonic() + 30
    while not started:  # the first export holds its place
        assert time.monotonic() < deadline
        time.sleep(0.01)
    refused = api.client.get("/runs/7/log.ndjson")
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "5")
    error = refused.json()["errors"][0]
    assert error["extensions"]["code"] == "TOO_MANY_EXPORTS"
    assert "RUNLOG_MAX_EXPORTS=1" in error["message"] and "try again in 5 s" in error["message"]
    portal.call(stuck.set)  # the first client leaves
    running.result(timeout=30)
    assert api.client.get("/runs/7/log.ndjson").status_code == 200
