"""The generated Python client (clients/python/runlog_client) against the live app over HTTP."""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from runlog_client import RunLogClient, RunLogKind
from runlog_client.exceptions import GraphQLClientGraphQLMultiError
from runlog_client.fragments import (
    RunLogLineFieldsDetailConditionEvaluatedDetail,
    RunLogLineFieldsDetailNoteDetail,
    RunLogLineFieldsDetailRunBlockedDetail,
)
from runlog_client_async import AsyncRunLogClient
from runlog_client_async.fragments import RunLogLineFieldsDetailNoteDetail as AsyncNoteDetail

from gql.domain import demo, demo_runs
from gql.edge.app import create_app
from gql.edge.server import uvicorn_options
from gql.settings import Settings

from .conftest import UNHURRIED_WRITE_TIMEOUT, Backend, wait_until_healthy

WRITER = "writer-token-0123456789"


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def live_url(tables: Backend) -> Iterator[str]:
    """The app under uvicorn on a free port, with the demo loaded (and a writer token set)."""
    asyncio.run(demo.load_into(tables.settings(), allow_non_embedded=True))
    app = create_app(tables.settings(writer_tokens=(WRITER,), write_timeout=UNHURRIED_WRITE_TIMEOUT))
    sock = _free_socket()
    # Websockets as `serve` serves them (gql/edge/server.py): "auto" would pick whichever is installed.
    config = uvicorn.Config(app, log_level="warning", lifespan="on", ws=uvicorn_options(Settings())["ws"])
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 90  # generous: CI may be loaded
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}/graphql"
    server.should_exit = True
    thread.join(timeout=15)
    sock.close()


@pytest.fixture
def client(live_url: str) -> Iterator[RunLogClient]:
    with RunLogClient(url=live_url, headers={"Authorization": f"Bearer {WRITER}"}) as client:
        yield client


def test_reads_a_runs_log_and_matches_each_detail_on_its_typename(client: RunLogClient) -> None:
    page = client.run_log(run_id=str(demo_runs.BLOCKED)).run_log
    assert not page.page_info.has_next_page
    blocked = [line for line in page.nodes if line.kind is RunLogKind.RUN_BLOCKED]
    assert blocked
    for line in blocked:
        match line.detail:
            case RunLogLineFieldsDetailRunBlockedDetail() as detail:
                assert detail.typename__ == "RunBlockedDetail"
                assert detail.blocking_run_id == str(demo_runs.INVASION)
                assert detail.concurrency_key == "invasion:Yew"
                assert detail.blocking_run is not None
                assert (detail.blocking_run.status, detail.blocking_run.terminal) == ("live", False)
            case other:
                pytest.fail(f"run.blocked read as {other!r}")
        assert line.at.tzinfo is not None
        assert line.at.utcoffset() == datetime.timedelta(0)


def test_every_demo_line_arrives_as_its_kinds_typed_model(client: RunLogClient) -> None:
    typenames = set()
    for run_id in demo_runs.RUN_IDS:
        for line in client.run_log(run_id=str(run_id)).run_log.nodes:
            assert line.detail is not None
            assert line.kind is not None and line.kind.value == line.kind_name.replace(".", "_").upper()
            expected = "".join(part.title() for part in line.kind_name.split(".")) + "Detail"
            assert line.detail.typename__ == expected
            assert type(line.detail).__name__ == f"RunLogLineFieldsDetail{line.detail.typename__}"
            typenames.add(line.detail.typename__)
    assert len(typenames) == len(RunLogKind)


def test_filters_by_kinds(client: RunLogClient) -> None:
    kinds = [RunLogKind.CONDITION_EVALUATED]
    nodes = client.run_log_by_kinds(run_id=str(demo_runs.INVASION), kinds=kinds).run_log.nodes
    details = [line.detail for line in nodes]
    assert details and all(isinstance(d, RunLogLineFieldsDetailConditionEvaluatedDetail) for d in details)
    matched = [d.matched for d in details if isinstance(d, RunLogLineFieldsDetailConditionEvaluatedDetail)]
    assert matched == [True, False, False]  # newest first: the match, after two misses
    assert client.run_log_by_kinds(run_id=str(demo_runs.INVASION), kinds=[]).run_log.nodes == []


def test_pages_through_a_log_by_passing_end_cursor_as_after(client: RunLogClient) -> None:
    run_id = str(demo_runs.INVASION)
    whole = [line.id for line in client.run_log(run_id=run_id).run_log.nodes]
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        page = client.run_log_page(run_id=run_id, limit=4, after=after).run_log
        seen += [line.id for line in page.nodes]
        pages += 1
        if not page.page_info.has_next_page:
            break
        after = page.page_info.end_cursor
    assert seen == whole
    assert pages == -(-len(whole) // 4)


def test_writes_a_note_and_reads_it_back(client: RunLogClient) -> None:
    run_id = str(demo_runs.BLOCKED)
    assert client.write_note(run_id=run_id, text="38 waits for 37", actor="Iolo (GM)").write_run_log
    assert client.write_note(run_id=run_id, text="no actor this time").write_run_log

    newest = client.run_log(run_id=run_id, limit=2).run_log.nodes
    notes = [line.detail for line in newest]
    assert all(isinstance(note, RunLogLineFieldsDetailNoteDetail) for note in notes)
    assert [(n.text, n.actor) for n in notes if isinstance(n, RunLogLineFieldsDetailNoteDetail)] == [
        ("no actor this time", None),
        ("38 waits for 37", "Iolo (GM)"),
    ]


def test_the_shipped_run_log_reads_newer_lines_with_before(client: RunLogClient) -> None:
    # The same RunLog operation both ways: its startCursor as `before`.
    run_id = str(demo_runs.BLOCKED)
    first = client.run_log(run_id=run_id, limit=2).run_log
    assert first.page_info.start_cursor == first.nodes[0].cursor
    assert first.page_info.end_cursor == first.nodes[-1].cursor
    assert client.run_log(run_id=run_id, before=first.page_info.start_cursor).run_log.nodes == []

    assert client.write_note(run_id=run_id, text="written since", actor=None).write_run_log
    newer = client.run_log(run_id=run_id, before=first.page_info.start_cursor).run_log
    assert [line.detail.text for line in newer.nodes] == ["written since"]  # type: ignore[union-attr]
    assert newer.page_info.has_previous_page is False
    older = client.run_log(run_id=run_id, after=first.page_info.end_cursor, limit=1).run_log
    assert older.nodes and older.nodes[0].id not in {line.id for line in first.nodes}


def test_a_request_error_is_raised_with_the_servers_message(live_url: str) -> None:
    # A request error has no `data` (GraphQL over HTTP); the client raises it, naming the variable.
    with RunLogClient(url=live_url) as anonymous, pytest.raises(GraphQLClientGraphQLMultiError) as raised:
        anonymous.run_log(run_id=None)  # type: ignore[arg-type]
    assert "$runId" in str(raised.value)


def test_a_write_the_server_refuses_answers_false_not_an_exception(live_url: str) -> None:
    with RunLogClient(url=live_url) as anonymous:  # no writer token
        assert anonymous.write_note(run_id=str(demo_runs.BLOCKED), text="hi").write_run_log is False
    with RunLogClient(url=live_url, headers={"Authorization": f"Bearer {WRITER}"}) as writer:
        assert writer.write_note(run_id="not-a-run", text="hi").write_run_log is False


def test_the_async_client_tails_a_run_and_resumes_from_the_last_cursor(
    live_url: str, client: RunLogClient
) -> None:
    """runlog_client_async's run_log_tail over the live server's websocket, then again with `since`."""
    run_id = str(demo_runs.BLOCKED)
    written: list[str] = []

    def write(text: str) -> None:
        assert client.write_note(run_id=run_id, text=text).write_run_log
        written.append(text)

    def text_of(item: Any) -> str:
        detail = item.run_log_tail.detail
        assert isinstance(detail, AsyncNoteDetail), detail
        return detail.text

    async def follow() -> tuple[list[str], list[str]]:
        tails = AsyncRunLogClient(
            url=live_url,
            ws_url=live_url.replace("http://", "ws://"),
            # A reader's token goes here; reads are open on this server, so any payload passes.
            ws_connection_init_payload={"Authorization": f"Bearer {WRITER}"},
        )
        # From now on: notes are written until the tail, once started, sees one.
        stream = tails.run_log_tail(run_id=run_id)
        first = asyncio.ensure_future(anext(stream))
        while not first.done():
            await asyncio.to_thread(write, f"note {len(written)}")
            await asyncio.wait([first], timeout=0.5)
        item = first.result()
        seen_first = [text_of(item)]
        await stream.aclose()
        # Disconnected: two more lines, then a new tail from the last cursor seen.
        await asyncio.to_thread(write, "while away 1")
        await asyncio.to_thread(write, "while away 2")
        resumed = tails.run_log_tail(run_id=run_id, since=item.run_log_tail.cursor)
        after = [text_of(await anext(resumed)) for _ in written[written.index(seen_first[0]) + 1 :]]
        await resumed.aclose()
        return seen_first, after

    seen_first, after = asyncio.run(follow())
    assert after == written[written.index(seen_first[0]) + 1 :]
    assert after[-2:] == ["while away 1", "while away 2"]


def test_serve_demo_is_ready_to_explore_in_one_command(tmp_path: Path) -> None:
    sock = _free_socket()
    port = sock.getsockname()[1]
    sock.close()  # uvicorn binds it again in its own process
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLOG_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--demo", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", server)
        with RunLogClient(url=f"http://127.0.0.1:{port}/graphql") as client:
            nodes = client.run_log(run_id=str(demo_runs.BLOCKED)).run_log.nodes
        assert any(isinstance(line.detail, RunLogLineFieldsDetailRunBlockedDetail) for line in nodes)
    finally:
        server.terminate()
        server.wait(timeout=15)
        if server.stdout:
            server.stdout.close()
