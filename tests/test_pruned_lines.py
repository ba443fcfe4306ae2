"""A page that reaches a run's oldest surviving line says what pruning took: how many, up to when."""

from __future__ import annotations

import datetime
from typing import Any

from .conftest import ADMIN, Api, Backend

PRUNE = "mutation($before: DateTime!, $limit: Int) { pruneTerminal(before: $before, limit: $limit) }"
PAGE = """query($runId: ID!, $limit: Int, $after: String) {
  runLog(runId: $runId, limit: $limit, after: $after) {
  nodes { id at } pageInfo { hasNextPage endCursor } pruned { lines through prunedAt } } }"""


def read(api: Api, run_id: int, **variables: Any) -> dict[str, Any]:
    page: dict[str, Any] = api.data(PAGE, {"runId": str(run_id), **variables})["runLog"]
    return page


def test_a_page_that_reaches_the_oldest_surviving_line_says_what_pruning_took(
    tables: Backend, api: Api
) -> None:
    tables.add_run(1, "completed", "2026-01-01 00:00:00", "2026-01-01 00:00:00")
    tables.add_run(2, "live", None, "2026-01-01 00:00:00")
    for run_id in (1, 2):
        for i in range(5):
            assert api.write(run_id, "note", {"text": f"line {i}"})
    stamps = [datetime.datetime.fromisoformat(n["at"]) for n in read(api, 1)["nodes"]]  # newest first
    assert read(api, 1)["pruned"] is None  # nothing pruned yet
    started = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    # Two slices: the run's lines go three, then two.
    assert api.post(PRUNE, {"before": "2026-02-01T00:00:00", "limit": 3}, token=ADMIN)["data"] == {
        "pruneTerminal": 3
    }
    survivors = read(api, 1)
    assert len(survivors["nodes"]) == 2
    pruned = survivors["pruned"]
    assert pruned["lines"] == 3
    through = datetime.datetime.fromisoformat(pruned["through"])
    assert through in stamps
    assert datetime.datetime.fromisoformat(pruned["prunedAt"]) >= started
    # A page with older lines after it does not say it; its last page does.
    first = read(api, 1, limit=1)
    assert first["pageInfo"]["hasNextPage"] is True and first["pruned"] is None
    last = read(api, 1, limit=1, after=first["pageInfo"]["endCursor"])
    assert last["pageInfo"]["hasNextPage"] is False and last["pruned"]["lines"] == 3
    assert api.post(PRUNE, {"before": "2026-02-01T00:00:00", "limit": 3}, token=ADMIN)["data"] == {
        "pruneTerminal": 2
    }
    gone = read(api, 1)
    assert gone["nodes"] == []
    assert gone["pruned"]["lines"] == 5
    assert datetime.datetime.fromisoformat(gone["pruned"]["through"]) == max(stamps)
    # A run that was never pruned says nothing.
    assert read(api, 2)["pruned"] is None
    assert tables.scalar("SELECT line_count FROM event_run_log_pruned WHERE run_id = 1") == 5
