"""`python -m bench.search`: `search` on one run of 1,000,000 lines, on MariaDB, through the API.

Fills a scratch database with one run of `--lines` lines (`note` and `run.status`,
10 ms apart; one line in 100,000 says "Zanzibar"), then times RunLog-shaped
requests through the app in this process, each `--rounds` times (median and
most, in ms):

- `python -m gql fold-words` (in process, `data.fold_words`): the upgrade step that keeps the
  words of the lines filled by hand (INSERT ... SELECT, as lines from before migration 0008);
- a write through the API, which keeps its line's words in its transaction, and a search
  that finds the line just written;
- the run's first search, with the default read timeout;
- a search for a word few lines hold, and for one no line holds (both read the
  whole run), for one every line holds (the page fills at once);
- kindCounts under the rare search;
- for comparison, the rare search in SQL alone: the words table scanned with
  instr (what the service does), and through an InnoDB FULLTEXT index on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings

from .data import bench_database, fold_words
from .mariadb import MARIADB_URL, connect

RUN = 1
QUERY = """
query S($runId: ID!, $search: String, $limit: Int) {
  runLog(runId: $runId, search: $search, limit: $limit) { nodes { id kindName at } pageInfo { hasNextPage } }
}
"""
WRITE = """
mutation W($runId: ID!, $text: String!) { writeRunLog(runId: $runId, kind: "note", detail: {text: $text}) }
"""
COUNTS = """
query C($runId: ID!, $search: String) {
  runLog(runId: $runId, search: $search, limit: 1) { kindCounts { kindName count } }
}
"""


def _fill(database: str, lines: int) -> None:
    conn = connect(database)
    with conn.cursor() as cur:
        for start in range(0, lines, 100_000):
            cur.execute(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "  # noqa: S608 (numbers)
                "SELECT %s, seq %% 50, IF(seq %% 4 = 0, 'run.status', 'note'), seq %% 5, "
                "CONCAT('{\"text\": \"step ', seq, ' of phase ', seq %% 5, "
                "IF(seq %% 100000 = 7, ': Zanzibar', ': all quiet'), '\", \"n\": ', seq, '}'), "
                "TIMESTAMP('2026-03-01') + INTERVAL seq * 10000 MICROSECOND "
                f"FROM seq_{start + 1}_to_{min(start + 100_000, lines)}",
                (RUN,),
            )
        cur.execute("ANALYZE TABLE event_run_log")
    conn.close()


def _timed(client: TestClient, query: str, variables: dict[str, Any], rounds: int) -> tuple[list[float], Any]:
    took = []
    answer = None
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.post("/graphql", json={"query": query, "variables": variables})
        took.append((time.perf_counter() - started) * 1000)
        answer = response.json()
        if "errors" in answer:
            raise RuntimeError(json.dumps(answer)[:500])
    [field] = answer["data"].values()  # the one field asked for
    return took, field


def _sql_ms(database: str, sql: str, rounds: int) -> tuple[list[float], int]:
    conn = connect(database)
    took, found = [], 0
    with conn.cursor() as cur:
        for _ in range(rounds):
            started = time.perf_counter()
            cur.execute(sql)
            found = len(cur.fetchall())
            took.append((time.perf_counter() - started) * 1000)
    conn.close()
    return took, found


def _say(label: str, took: list[float], note: str) -> None:
    median = statistics.median(took)
    print(f"{label:<58} median {median:8.1f} ms  most {max(took):8.1f} ms  {note}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with bench_database() as database:
        started = time.perf_counter()
        _fill(database, args.lines)
        took = time.perf_counter() - started
        print(f"filled {args.lines:,} lines of run {RUN} in {took:.1f} s", flush=True)
        started = time.perf_counter()
        folded = fold_words(database)
        print(f"fold-words kept {folded:,} lines' words in {time.perf_counter() - started:.1f} s", flush=True)
        url = MARIADB_URL.set(database=database).render_as_string(hide_password=False)
        with TestClient(create_app(Settings(database_url=url))) as client:
            first, page = _timed(client, QUERY, {"runId": RUN, "search": "zanzibar", "limit": 50}, 1)
            _say("first search of the run", first, f"{len(page['nodes'])} lines")
            wrote = [
                _timed(client, WRITE, {"runId": RUN, "text": f"Kilimanjaro {n}"}, 1)[0][0] for n in range(20)
            ]
            _say("a write (its line and words in one transaction)", wrote, "20 writes")
            took, page = _timed(client, QUERY, {"runId": RUN, "search": "kilimanjaro 19", "limit": 50}, 1)
            _say("a search for the line just written", took, f"{len(page['nodes'])} lines")
            for label, search in (
                ("a word 10 lines hold", "ZANZIBAR"),
                ("a word no line holds", "timbuktu"),
                ("a word every line holds", "quiet"),
            ):
                took, page = _timed(client, QUERY, {"runId": RUN, "search": search, "limit": 50}, args.rounds)
                _say(f"RunLog first page, {label}", took, f"{len(page['nodes'])} lines")
            took, page = _timed(client, COUNTS, {"runId": RUN, "search": "zanzibar"}, args.rounds)
            counted = sum(count["count"] for count in page["kindCounts"])
            _say("kindCounts, a word 10 lines hold", took, f"{counted} lines counted")
        order = "ORDER BY l.at DESC, l.id DESC LIMIT 51"
        joined = f"FROM event_run_log l JOIN event_run_log_words w ON w.id = l.id WHERE l.run_id = {RUN}"
        scan = f"SELECT id FROM event_run_log_words WHERE run_id = {RUN} AND INSTR(words, 'zanzibar') > 0"  # noqa: S608
        took, found = _sql_ms(database, f"{scan} ORDER BY line_at DESC, id DESC LIMIT 51", 5)
        _say("SQL: the run's words scanned with instr", took, f"{found} rows")
        took, found = _sql_ms(database, f"SELECT l.id {joined} AND INSTR(w.words, 'zanzibar') > 0 {order}", 5)
        _say("SQL: the lines scanned, each line's words joined", took, f"{found} rows")
        conn = connect(database)
        with conn.cursor() as cur:
            started = time.perf_counter()
            cur.execute("ALTER TABLE event_run_log_words ADD FULLTEXT INDEX ft_words (words)")
            print(f"FULLTEXT index built in {time.perf_counter() - started:.1f} s", flush=True)
        conn.close()
        matched = "MATCH(w.words) AGAINST('+zanzibar' IN BOOLEAN MODE)"
        took, found = _sql_ms(database, f"SELECT l.id {joined} AND {matched} {order}", 5)
        _say("SQL: the words through a FULLTEXT index", took, f"{found} rows")
        inside = "MATCH(w.words) AGAINST('+anzib*' IN BOOLEAN MODE)"
        took, found = _sql_ms(database, f"SELECT l.id {joined} AND {inside} {order}", 5)
        _say("SQL: FULLTEXT for 'anzib', inside the word", took, f"{found} rows (instr finds 10)")


if __name__ == "__main__":
    main()
