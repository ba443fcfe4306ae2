"""Load without loss: concurrent writers and a concurrent pruneTerminal on MariaDB.

Every `true` is a stored line (or one a prune then deleted, counted), every
stored line of a live run is still there, nothing is stored that was not
answered `true`, and every line not pruned reads back through `runLog`
pages, each once. Bounded: 6 writers of 40 lines each, one pruner, one reader.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from starlette.testclient import TestClient

from gql.edge.app import create_app

from .conftest import ADMIN, UNHURRIED_WRITE_TIMEOUT, Api, Backend

LIVE = (1, 2, 3)
TERMINAL = (11, 12, 13)
WRITERS, LINES = 6, 40
PRUNE = 'mutation { pruneTerminal(before: "2026-01-01T00:00:00Z", limit: 7) }'
PAGE = """query($runId: ID!, $after: String) {
  runLog(runId: $runId, limit: 25, after: $after) {
    nodes { detail { ... on NoteDetail { text } } }
    pageInfo { hasNextPage endCursor }
  }
}"""


def read_all(api: Api, run_id: int) -> list[str]:
    texts: list[str] = []
    after = None
    while True:
        page = api.data(PAGE, {"runId": run_id, "after": after})["runLog"]
        texts += [node["detail"]["text"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            return texts
        after = page["pageInfo"]["endCursor"]


@pytest.mark.mariadb
def test_concurrent_writers_and_a_concurrent_prune_lose_nothing(mariadb: Backend) -> None:
    mariadb.create_tables()
    for run_id in LIVE:
        mariadb.add_run(run_id, "live", None, "2025-01-01 00:00:00")
    for run_id in TERMINAL:
        mariadb.add_run(run_id, "completed", "2025-01-01 00:00:00", "2025-01-01 00:00:00")
    runs = LIVE + TERMINAL

    # Every write must be answered true here, and their deadline is not what
    # is tested: the most time the service allows, for a loaded machine.
    with TestClient(create_app(mariadb.settings(write_timeout=UNHURRIED_WRITE_TIMEOUT))) as client:
        api = Api(client)
        writing = threading.Event()
        writing.set()

        def writer(w: int) -> list[tuple[int, str, bool]]:
            answers = []
            for i in range(LINES):
                run_id = runs[(w + i) % len(runs)]
                text = f"w{w}-{i}"
                answers.append((run_id, text, api.write(run_id, "note", {"text": text})))
            return answers

        def pruner() -> list[int]:
            deleted = []
            while writing.is_set():
                deleted.append(api.data(PRUNE, token=ADMIN)["pruneTerminal"])
            return deleted

        def reader() -> int:
            pages = 0
            while writing.is_set():
                api.data(PAGE, {"runId": LIVE[0], "after": None})
                pages += 1
            return pages

        with ThreadPoolExecutor(WRITERS + 2) as pool:
            prunes = pool.submit(pruner)
            reads = pool.submit(reader)
            writes = [pool.submit(writer, w) for w in range(WRITERS)]
            answers = [answer for future in writes for answer in future.result()]
            writing.clear()
            deleted = sum(prunes.result())
            assert reads.result() > 0

        assert len(answers) == WRITERS * LINES
        refused = [a for a in answers if not a[2]]
        assert refused == [], "a healthy database refused writes"
        answered: dict[int, set[str]] = {run_id: set() for run_id in runs}
        for run_id, text, _ in answers:
            answered[run_id].add(text)

        stored_rows = mariadb.rows("SELECT run_id, detail FROM event_run_log")
        stored: dict[int, Counter[str]] = {run_id: Counter() for run_id in runs}
        for run_id, detail in stored_rows:
            stored[run_id][_text(detail)] += 1

        for run_id in runs:
            assert all(n == 1 for n in stored[run_id].values()), "a line is stored twice"
            assert set(stored[run_id]) <= answered[run_id], "a line is stored that was not answered true"
        for run_id in LIVE:
            assert set(stored[run_id]) == answered[run_id], "a live run lost a line"
        pruned = sum(len(answered[r]) - len(stored[r]) for r in TERMINAL)
        assert pruned == deleted, "every line missing from a terminal run was deleted by a prune, counted"
        assert deleted > 0, "the prune ran while the writers wrote"

        for run_id in runs:
            read = read_all(api, run_id)
            assert len(read) == len(set(read)), "a page repeated a line"
            assert set(read) == set(stored[run_id]), "a stored line does not read back"


def _text(detail: Any) -> str:
    import json

    text: str = json.loads(detail)["text"]
    return text
