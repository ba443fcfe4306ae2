"""What one request's details may weigh: a byte budget, and no detail read when none is asked.

A writer may store details of up to 64 KiB, and by default anyone may write:
2,000 of them made one 2,000-line page cost 0.77 s and 124 MB, and five
aliased pages 2.1 GB. The pages of one request return details up to
RUNLOG_MAX_PAGE_BYTES of stored bytes together; a page cut short says
`hasNextPage` and ends its cursor at its last line, so paging stays exact. A
page that does not select `detail` never has it fetched.

Every test reads through the HTTP app, on SQLite and on the real MariaDB.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.edge.graphiql import with_fragments

from .conftest import MARIADB_URL, Api, Backend, sent_statements
from .faultproxy import FaultProxy

OPERATIONS = Path(__file__).resolve().parent.parent / "gql" / "operations"
RUN_LOG = with_fragments((OPERATIONS / "RunLog.graphql").read_text())
BUDGET = 32 * 1024
START = datetime.datetime(2026, 3, 1, 12, 0, 0)


def add_notes(backend: Backend, texts: list[str], run_id: int = 7) -> dict[str, int]:
    """One `note` line per text, oldest first; answers each line's stored detail bytes by id.

    Written straight into the table, as a writer with a larger detail limit
    (or another tool) would leave them. Every second line shares its
    neighbour's `at`, so the id decides their order.
    """
    stored: dict[str, int] = {}
    with backend.sync.begin() as conn:
        for n, text in enumerate(texts):
            detail = json.dumps({"text": text}, ensure_ascii=False)
            at = START + datetime.timedelta(milliseconds=n // 2)
            line_id = conn.execute(
                sa.text("INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (:r, 'note', :d, :a)"),
                {"r": run_id, "d": detail, "a": at.isoformat(sep=" ", timespec="milliseconds")},
            ).lastrowid
            stored[str(line_id)] = len(detail.encode())
    return stored


def mixed_texts() -> list[str]:
    """Details of many sizes, some not ASCII (the budget counts bytes, not characters).

    One is larger than the whole budget: it must still come, alone on its page.
    """
    texts = []
    for n in range(60):
        size = (n * 2_731) % 13_000 + 10
        texts.append(("é" if n % 3 == 0 else "x") * size)
    texts[25] = "y" * (BUDGET + 5_000)
    return texts


@pytest.mark.parametrize("sizes_first", [True, False], ids=["sizes-first", "one-query"])
@pytest.mark.parametrize("limit", [None, 7])
def test_pages_of_large_details_stay_within_the_budget_and_see_every_line_once(
    tables: Backend, make_api: Callable[..., Api], sizes_first: bool, limit: int | None
) -> None:
    stored = add_notes(tables, mixed_texts())
    # The store reads the sizes first when a page's lines could weigh more
    # than the budget at the largest detail a writer may store: both ways of
    # reading are held to the same cut.
    api = make_api(max_page_bytes=BUDGET, max_detail_bytes=16 * 1024 * 1024 if sizes_first else 1)
    newest_first = sorted(stored, key=int, reverse=True)  # `at` rises with the id here
    seen: list[str] = []
    after = None
    for _ in range(100):
        page = api.data(RUN_LOG, {"runId": 7, "limit": limit, "after": after})["runLog"]
        ids = [node["id"] for node in page["nodes"]]
        assert ids, "a page with older lines to come returned none"
        weight = sum(stored[i] for i in ids)
        assert weight <= BUDGET or len(ids) == 1, (ids, weight)
        # Cut only where the next line would pass the budget (or at `limit`).
        rest = newest_first[len(seen) + len(ids) :]
        if rest and len(ids) != limit:
            assert weight + stored[rest[0]] > BUDGET, (ids, weight, stored[rest[0]])
        for node in page["nodes"]:
            assert node["detail"]["__typename"] == "NoteDetail"
            assert (
                len(json.dumps({"text": node["detail"]["text"]}, ensure_ascii=False).encode())
                == stored[node["id"]]
            )
        seen += ids
        assert page["pageInfo"]["endCursor"] is not None
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == newest_first


ALIASED = (
    "query Five($runId: ID!) {"
    + "".join(
        f" p{n}: runLog(runId: $runId, limit: 2000) {{"
        " nodes { id detail { ... on NoteDetail { text } } } pageInfo { hasNextPage endCursor } }"
        for n in range(5)
    )
    + " }"
)


@pytest.mark.parametrize("newest", ["ordinary", "past the budget"])
def test_five_aliased_pages_share_one_budget(
    tables: Backend, make_api: Callable[..., Api], newest: str
) -> None:
    line = 4 * 1024
    # A newest line past the whole budget spends it at once: each later page
    # then returns one line.
    stored = add_notes(tables, ["z" * line] * 60 + (["y" * (BUDGET + 1)] if newest != "ordinary" else []))
    largest = max(stored.values())
    api = make_api(max_page_bytes=BUDGET)
    data = api.data(ALIASED, {"runId": 7})
    pages = [data[f"p{n}"] for n in range(5)]
    weights = [sum(stored[node["id"]] for node in page["nodes"]) for page in pages]
    # The budget, and past it the one line each page returns whatever it
    # weighs, so that it too can be paged on from: not five times the run.
    assert sum(weights) <= BUDGET + 5 * largest, weights
    if newest == "ordinary":
        # One page filled the budget, and each later page returned one line.
        assert max(weights) > BUDGET - largest and sorted(weights)[:4] == [largest] * 4, weights
    if newest != "ordinary":
        assert sorted(len(page["nodes"]) for page in pages) == [1] * 5
    for page in pages:
        assert page["nodes"] and page["pageInfo"]["hasNextPage"] is True
        assert page["pageInfo"]["endCursor"] is not None


def test_the_budget_is_a_setting_with_a_default() -> None:
    from gql.settings import Settings

    assert Settings().max_page_bytes == 8 * 1024 * 1024
    assert Settings.from_env({"RUNLOG_MAX_PAGE_BYTES": "1048576"}).max_page_bytes == 1024 * 1024


@contextlib.contextmanager
def recorded_statements(backend: Backend) -> Iterator[tuple[Api, Callable[[], list[str]]]]:
    """The app on `backend`, and a call answering the statements sent since its last call.

    On MariaDB through FaultProxy, which notes the commands on the wire
    whatever the driver does; on SQLite through `sent_statements`.
    """
    if backend.name == "mariadb":
        upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
        with FaultProxy(*upstream) as proxy:
            url = sa.make_url(backend.url).set(host="127.0.0.1", port=proxy.port)
            settings = backend.settings(database_url=url.render_as_string(hide_password=False))
            with TestClient(create_app(settings)) as client:

                def taken() -> list[str]:
                    found = [text for name, text in proxy.commands if name == "query"]
                    proxy.commands.clear()
                    return found

                taken()
                yield Api(client), taken
        return
    with (
        TestClient(create_app(backend.settings())) as client,
        sent_statements(client.app_state["engine"]) as sent,
    ):

        def take() -> list[str]:
            found = list(sent)
            sent.clear()
            return found

        yield Api(client), take


def test_a_page_that_does_not_select_detail_never_fetches_it(tables: Backend) -> None:
    add_notes(tables, ["w" * 1000] * 5)
    with recorded_statements(tables) as (api, taken):
        taken()
        ids = [n["id"] for n in api.data("{ runLog(runId: 7) { nodes { id kind } } }")["runLog"]["nodes"]]
        assert len(ids) == 5
        only_ids = taken()
        nodes = api.data(RUN_LOG, {"runId": 7})["runLog"]["nodes"]
        assert [n["id"] for n in nodes] == ids and all(n["detail"]["text"] == "w" * 1000 for n in nodes)
        with_detail = taken()
    pages = [s for s in only_ids if "event_run_log" in s]
    assert pages and all("event_run_log.detail" not in s for s in pages), pages
    # The same recording sees the column when it is asked for.
    assert any("event_run_log.detail" in s for s in with_detail), with_detail


def test_a_page_serving_its_details_under_several_aliases_spends_them_that_many_times(
    tables: Backend, make_api: Callable[..., Api]
) -> None:
    stored = add_notes(tables, ["v" * (2 * 1024)] * 60)
    api = make_api(max_page_bytes=BUDGET)
    aliases = " ".join(f"d{n}: detail {{ ... on NoteDetail {{ text }} }}" for n in range(4))
    page = api.data(
        f"{{ runLog(runId: 7, limit: 2000) {{ nodes {{ id {aliases} }} pageInfo {{ hasNextPage }} }} }}"
    )
    nodes = page["runLog"]["nodes"]
    served = 4 * sum(stored[node["id"]] for node in nodes)
    assert nodes and page["runLog"]["pageInfo"]["hasNextPage"] is True
    assert served <= BUDGET, (len(nodes), served)
    assert served + 4 * max(stored.values()) > BUDGET, (len(nodes), served)  # and no fewer lines than fit


@pytest.mark.parametrize("largest", ["ordinary", "past its share"])
def test_a_full_page_under_the_budget_is_read_in_one_statement(tables: Backend, largest: str) -> None:
    # 2,001 lines of the largest detail a writer may store (64 KiB) could pass
    # the default 8 MiB budget, so the page's details are sized as it is
    # read. Ordinary details all fit their share of the budget (8 MiB over
    # 2,001 lines, 4,192 bytes): the page is one statement, not a statement
    # for the sizes and one for the lines. A detail past its share is read
    # by id afterwards, whole.
    texts = ["t" * (50 + n % 200) for n in range(2_100)]
    if largest != "ordinary":
        texts[-3] = "b" * 6_000
    stored = add_notes(tables, texts)
    with recorded_statements(tables) as (api, taken):
        taken()
        page = api.data(RUN_LOG, {"runId": 7, "limit": 2000})["runLog"]
        reads = [s for s in taken() if "event_run_log" in s]
    nodes = page["nodes"]
    assert len(nodes) == 2000 and page["pageInfo"]["hasNextPage"] is True
    assert [n["id"] for n in nodes] == sorted(stored, key=int, reverse=True)[:2000]
    assert [n["detail"]["text"] for n in nodes] == texts[::-1][:2000]
    assert len(reads) == (1 if largest == "ordinary" else 2), reads


HELD = """query H($after: String) {
  runsInFlight(limit: 10, after: $after) {
    nodes { id holds { sentence evidence { detail { ... on RunBlockedDetail { concurrencyKey } } } } }
    pageInfo { hasNextPage endCursor }
  }
}"""


def test_holds_sentences_and_evidence_count_against_the_requests_bytes(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    # Five runs, each blocked on a 30 KB key: its evidence says it (its sentence quotes 120
    # characters of it), 30 KB a run.
    api = make_api(max_page_bytes=70 * 1024)
    tables.add_run(90, "live", None, "2026-01-01 00:00:00")
    for run_id in range(1, 6):
        tables.add_run(run_id, "live", None, "2026-01-01 00:00:00")
        key = f"{run_id}" + "k" * 30_000
        assert api.write(run_id, "run.blocked", {"blockingRunId": 90, "concurrencyKey": key})
    seen: list[str] = []
    after = None
    while True:
        page = api.data(HELD, {"after": after})["runsInFlight"]
        held = [node for node in page["nodes"] if node["holds"]]
        # What one request carries stays near its budget: one run past it at most (its first comes).
        assert 1 <= len(held) <= 2, [node["id"] for node in page["nodes"]]
        seen += [node["id"] for node in held]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert sorted(seen) == ["1", "2", "3", "4", "5"]  # none skipped, none twice


PAGE_AND_HOLDS = """{
  runLog(runId: 1) {
    nodes { detail { ... on RunBlockedDetail { concurrencyKey } } }
    run { holds { sentence evidence { detail { ... on RunBlockedDetail { concurrencyKey } } } } }
  }
}"""


def test_a_pages_run_whose_holds_pass_the_requests_bytes_is_refused_naming_the_limit(
    make_api: Callable[..., Api], tables: Backend
) -> None:
    tables.add_run(1, "live", None, "2026-01-01 00:00:00")
    tables.add_run(90, "live", None, "2026-01-01 00:00:00")
    small = make_api(max_page_bytes=40 * 1024)
    # The line's detail (30 KB) fits; its run's hold says the key again, in its sentence and evidence.
    assert small.write(1, "run.blocked", {"blockingRunId": 90, "concurrencyKey": "k" * 30_000})
    body = small.post(PAGE_AND_HOLDS)
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "PAGE_TOO_LARGE" and "RUNLOG_MAX_PAGE_BYTES" in error["message"]
    assert error["path"] == ["runLog", "run"]
    assert len(body["data"]["runLog"]["nodes"]) == 1
    large = make_api(max_page_bytes=200 * 1024)
    (hold,) = large.data(PAGE_AND_HOLDS)["runLog"]["run"]["holds"]
    assert hold["evidence"][0]["detail"]["concurrencyKey"] == "k" * 30_000
