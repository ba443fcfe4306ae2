"""The folder: lines get their words (for runLog's search) in the background, ahead of any search.

Each on SQLite and MariaDB, through the API: the words appear without a search, through the
readers' pool only, a search then has nothing left to fold, and the folder stops with the app.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql import tail
from gql.app import create_app
from gql.db import create_engine
from gql.settings import Settings
from gql.store import words

from .conftest import Api, Backend, sent_statements

PAGE = """
query P($runId: ID!, $search: String, $limit: Int) {
  runLog(runId: $runId, search: $search, limit: $limit) { nodes { id } }
}
"""
T0 = datetime.datetime(2026, 3, 1, 12, 0, 0)


def _words_kept(backend: Backend, want: int) -> int:
    """Wait (up to a minute) until `want` lines have words kept; answer how many have."""
    deadline = time.monotonic() + 60
    while True:
        kept: int = backend.scalar("SELECT COUNT(*) FROM event_run_log_words")
        if kept >= want or time.monotonic() > deadline:
            return kept
        time.sleep(0.02)  # a poll, not a wait that the test's outcome depends on


def _kept_as_folded(backend: Backend) -> None:
    """Every line has its words kept, as `words_of` folds its detail."""
    rows = backend.rows(
        "SELECT l.detail, w.words FROM event_run_log l "
        "LEFT JOIN event_run_log_words w ON w.run_id = l.run_id AND w.id = l.id"
    )
    assert rows and all(kept == words.words_of(detail) for detail, kept in rows)


def _left_to_fold(settings: Settings, run_id: int) -> int:
    """How many lines a search's catch-up on `run_id` would fold now."""

    async def catch_up() -> int:
        engine = create_engine(settings)
        try:
            late = tail.late_window(settings)
            folded = await words.catch_up(engine, engine, run_id=run_id, needle=None, late=late)
        finally:
            await engine.dispose()
        return folded.lines

    return asyncio.run(catch_up())


def _found(api: Api, run_id: int, search: str) -> list[int]:
    nodes = api.data(PAGE, {"runId": str(run_id), "search": search, "limit": 500})["runLog"]["nodes"]
    return [int(node["id"]) for node in nodes]


def test_written_lines_get_their_words_without_a_search_never_through_the_writes_pool(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    api = make_api(fold_interval=0.05)
    state = api.client.app_state
    with sent_statements(state["write_engine"]) as written:
        for n in range(30):
            where = "STRASSE" if n % 3 else "Straße"
            assert api.write(7 if n % 5 else 8, "note", {"text": f"Line {n} {where}"})
        assert _words_kept(tables, 30) == 30
    _kept_as_folded(tables)
    if state["write_engine"] is not state["engine"]:
        # The writes' own connections never fold: a write waits on no fold.
        assert written and not [sql for sql in written if "event_run_log_words" in sql]
    # A search now has nothing to fold: its first page reads words only.
    assert _left_to_fold(tables.settings(), 7) == 0
    assert _left_to_fold(tables.settings(), 8) == 0
    assert len(_found(api, 7, "straße")) == 24
    assert len(_found(api, 8, "line")) == 6


def _stored_before(backend: Backend, lines: int) -> list[dict[str, Any]]:
    """Store lines as from before the words' migration, or by hand: some stamped out of order."""
    rows: list[dict[str, Any]] = [
        {
            "run_id": 7 if n % 4 else 9,
            "kind": "note",
            "detail": json.dumps({"text": f"Old line {n}", "n": n}) if n % 10 else "not JSON: Ärger",
            "at": T0 + datetime.timedelta(seconds=n if n % 7 else -n),
        }
        for n in range(lines)
    ]
    for row in rows:
        if backend.name == "sqlite":
            row["at"] = row["at"].isoformat(sep=" ", timespec="milliseconds")
    with backend.sync.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (:run_id, :kind, :detail, :at)"
            ),
            rows,
        )
    return rows


def test_a_log_stored_before_the_folder_is_folded_batch_by_batch_and_after_a_restart(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    rows = _stored_before(tables, 230)
    api = make_api(fold_interval=0.01, fold_batch=20)
    assert _words_kept(tables, 230) == 230
    _kept_as_folded(tables)
    assert _left_to_fold(tables.settings(), 7) == 0
    angry = [row for row in rows if row["run_id"] == 9 and "Ärger" in row["detail"]]
    assert len(_found(api, 9, "ärger")) == len(angry)
    # Started again (its place forgotten), it walks the folded log and keeps up with new lines.
    again = make_api(fold_interval=0.01, fold_batch=20)
    assert again.write(9, "note", {"text": "New ÄRGER"})
    assert _words_kept(tables, 231) == 231
    _kept_as_folded(tables)
    assert len(_found(again, 9, "ärger")) == len(angry) + 1


def test_the_folder_stops_with_the_app_and_is_off_when_asked(
    tables: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gql.folder"):
        with TestClient(create_app(tables.settings(fold_interval=0.01))) as client:
            folder = client.app_state["folder"]
            assert folder.running
        assert not folder.running
    assert [r.getMessage() for r in caplog.records if r.name == "gql.folder"][-1] == (
        "folder stopped: the words of 0 lines kept since it started"
    )
    with TestClient(create_app(tables.settings(fold_interval=None))) as client:
        assert client.app_state["folder"] is None


def test_fold_words_keeps_a_run_s_words_then_every_line_s(tables: Backend) -> None:
    _stored_before(tables, 2100)  # past a batch (2,000) in run 7

    def fold_words(*args: str) -> str:
        env = {**os.environ, "RUNLOG_DATABASE_URL": tables.url}
        command = [sys.executable, "-m", "gql", "fold-words", *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    in_run_9 = tables.scalar("SELECT COUNT(*) FROM event_run_log WHERE run_id = 9")
    assert fold_words("--run", "9") == f"{in_run_9} lines folded: every line's words are kept\n"
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log_words WHERE run_id <> 9") == 0
    assert fold_words() == f"{2100 - in_run_9} lines folded: every line's words are kept\n"
    _kept_as_folded(tables)
    assert fold_words() == "0 lines folded: every line's words are kept\n"


def test_a_fold_cut_short_leaves_no_line_stamped_earlier_behind(tables: Backend) -> None:
    # A line stored by hand with an older `at` among new lines: the folder's batch, cut short among
    # the new ones, must not raise the highest id kept past it unread (no search would read it).
    _stored_before(tables, 30)
    settings = tables.settings()

    async def fold(engine: Any, most: int | None) -> int:
        folded = await words.catch_up(engine, engine, run_id=7, needle=None, late=5.0, most=most)
        return folded.lines

    async def arrange_and_fold() -> None:
        engine = create_engine(settings)
        try:
            await fold(engine, None)
            later = T0 + datetime.timedelta(hours=1)
            with tables.sync.begin() as conn:
                for n in range(45):
                    at = (
                        T0 - datetime.timedelta(hours=1) if n == 10 else later + datetime.timedelta(seconds=n)
                    )
                    detail = json.dumps({"text": "Hidden gem" if n == 10 else f"New line {n}"})
                    stamp = at.isoformat(sep=" ", timespec="milliseconds") if tables.name == "sqlite" else at
                    conn.execute(
                        sa.text(
                            "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, 'note', :d, :at)"
                        ),
                        {"d": detail, "at": stamp},
                    )
            while await fold(engine, 20):
                pass
        finally:
            await engine.dispose()

    asyncio.run(arrange_and_fold())
    unread = tables.rows(
        "SELECT l.detail FROM event_run_log l LEFT JOIN event_run_log_words w "
        "ON w.run_id = l.run_id AND w.id = l.id WHERE l.run_id = 7 AND w.id IS NULL"
    )
    assert unread == []


def test_words_the_database_refuses_are_logged_and_a_search_still_finds_the_lines(
    make_api: Callable[..., Api], tables: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    if tables.name == "sqlite":
        refuse = (
            "CREATE TRIGGER no_words BEFORE INSERT ON event_run_log_words "
            "BEGIN SELECT RAISE(ABORT, 'no'); END"
        )
    else:
        refuse = (
            "CREATE TRIGGER no_words BEFORE INSERT ON event_run_log_words FOR EACH ROW "
            "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no'"
        )
    tables.execute(refuse)
    try:
        with caplog.at_level(logging.INFO, logger="gql.folder"):
            api = make_api(fold_interval=0.01)
            assert api.write(7, "note", {"text": "Kept nowhere"})
            deadline = time.monotonic() + 60
            failed = "folder: a tick failed: WordsNotKept: the database did not keep the words folded"
            while not [r for r in caplog.records if r.getMessage().startswith(failed)]:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.02)
        assert len(_found(api, 7, "kept nowhere")) == 1
        assert tables.scalar("SELECT COUNT(*) FROM event_run_log_words") == 0
    finally:
        tables.execute("DROP TRIGGER no_words")
