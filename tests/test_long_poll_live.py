"""The long poll against real servers: `python -m gql serve` processes on one MariaDB, and shutdown.

A waiting `runLog(before:, wait:)` on one process answers with a line written
through another (they share nothing but the database), and a server that is
asked to stop answers its waiting calls at once, with empty pages.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from . import local
from .conftest import Backend
from .serving import serving
from .test_subscription_live import PATIENCE

PAGE = """query P($before: String, $wait: Int) { runLog(runId: 7, before: $before, wait: $wait, limit: 10) {
  nodes { id detail { ... on NoteDetail { text } } } pageInfo { startCursor } } }"""
WRITE = 'mutation W($text: String!) { writeRunLog(runId: 7, kind: "note", detail: {text: $text}) }'


def call(base: str, query: str, **variables: Any) -> dict[str, Any]:
    response = local.post(f"{base}/graphql", json={"query": query, "variables": variables}, timeout=PATIENCE)
    body: dict[str, Any] = response.json()
    assert "errors" not in body, body
    return body["data"]


def waiting_now(base: str, count: int) -> None:
    """Wait until the server's /metrics counts `count` runLog calls waiting for a newer line."""
    deadline = time.monotonic() + PATIENCE
    wanted = f"runlog_long_polls_waiting {float(count)}"
    while wanted not in local.get(f"{base}/metrics", timeout=PATIENCE).text.splitlines():
        assert time.monotonic() < deadline, f"{count} calls were not waiting within {PATIENCE}s"
        time.sleep(0.05)


def start_cursor(base: str) -> str:
    cursor: str = call(base, PAGE)["runLog"]["pageInfo"]["startCursor"]
    return cursor


@pytest.mark.mariadb
def test_a_long_poll_on_one_process_answers_with_a_line_written_through_another(
    mariadb: Backend, tmp_path: Path
) -> None:
    mariadb.create_tables()
    with serving(tmp_path, mariadb.url, "a") as (a, _), serving(tmp_path, mariadb.url, "b") as (b, _):
        assert call(b, WRITE, text="before")["writeRunLog"] is True
        cursor = start_cursor(a)
        for text in ("first", "second"):
            answer: dict[str, Any] = {}
            waiting = threading.Thread(
                target=lambda answer=answer, cursor=cursor: answer.update(
                    call(a, PAGE, before=cursor, wait=30)["runLog"]
                )
            )
            waiting.start()
            assert call(b, WRITE, text=text)["writeRunLog"] is True
            waiting.join(PATIENCE)
            assert not waiting.is_alive()
            # The line written through b, once; not an empty page at the wait's end.
            assert [n["detail"]["text"] for n in answer["nodes"]] == [text]
            cursor = answer["pageInfo"]["startCursor"]


def test_a_server_asked_to_stop_answers_its_waiting_calls_at_once(tables: Backend, tmp_path: Path) -> None:
    with serving(tmp_path, tables.url) as (base, server):
        assert call(base, WRITE, text="first")["writeRunLog"] is True
        cursor = start_cursor(base)
        answers: list[dict[str, Any]] = []
        waiting = [
            threading.Thread(
                target=lambda: answers.append(call(base, PAGE, before=cursor, wait=30)["runLog"])
            )
            for _ in range(3)
        ]
        for thread in waiting:
            thread.start()
        # Each call is waiting once the server counts it (a fixed pause of 1 s
        # may be too short on a loaded machine, and a call sent after the
        # SIGTERM is refused, not answered).
        waiting_now(base, 3)
        server.send_signal(signal.SIGTERM)
        # Well before their 30 s: each answered with its empty page and the cursor it sent.
        for thread in waiting:
            thread.join(20)
            assert not thread.is_alive()
        server.wait(PATIENCE)
    assert answers == [{"nodes": [], "pageInfo": {"startCursor": cursor}}] * 3
    log = (tmp_path / "serve.log").read_text()
    assert "Application shutdown complete." in log
    assert "Traceback" not in log and " ERROR " not in log, log
