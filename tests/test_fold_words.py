"""`python -m gql fold-words`: the upgrade step that keeps the words of lines stored without them.

Lines stored before migration 0008, or by hand, have no words until it runs; the service keeps a
line's words as it writes it (tests/test_find.py). Each on SQLite and MariaDB.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from typing import Any

import sqlalchemy as sa

from gql.store import words

from .conftest import Api, Backend

PAGE = """
query P($runId: ID!, $search: String, $limit: Int) {
  runLog(runId: $runId, search: $search, limit: $limit) { nodes { id } }
}
"""
T0 = datetime.datetime(2026, 3, 1, 12, 0, 0)


def _stored_before(backend: Backend, lines: int) -> None:
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


def _kept_as_folded(backend: Backend) -> None:
    """Every line has its words kept, as `words_of` folds its detail, under its `at` as reads order it."""
    at = "strftime('%Y-%m-%d %H:%M:%f', l.at)" if backend.name == "sqlite" else "l.at"
    rows = backend.rows(
        "SELECT l.detail, w.words FROM event_run_log l "
        f"LEFT JOIN event_run_log_words w ON w.run_id = l.run_id AND w.id = l.id AND w.line_at = {at}"
    )
    assert rows and all(kept == words.words_of(detail) for detail, kept in rows)


def test_fold_words_keeps_the_words_of_lines_stored_without_them_once(api: Api, tables: Backend) -> None:
    _stored_before(tables, 600)  # past a batch (250)
    assert api.write(7, "note", {"text": "written by the service"})  # its words kept already

    def fold_words(*args: str) -> str:
        env = {**os.environ, "RUNLOG_DATABASE_URL": tables.url}
        command = [sys.executable, "-m", "gql", "fold-words", *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def found(search: str) -> int:
        return len(api.data(PAGE, {"runId": "7", "search": search, "limit": 500})["runLog"]["nodes"])

    assert found("old line") == 0  # no words yet: what the upgrade step is for
    assert fold_words() == "600 lines folded: every line's words are kept\n"
    _kept_as_folded(tables)
    assert fold_words() == "0 lines folded: every line's words are kept\n"
    assert found("old line") == sum(1 for n in range(600) if n % 4 and n % 10)
