"""Finding a line: runLog's phase, stepId, since, until and search filters, kindCounts and around.

Each on SQLite and MariaDB, through the API, with lines written between
pages: every filtered page walk gives each matching line once, and a cursor
made under one set of filters is refused under another.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from gql import store
from gql.domain import tail
from gql.store.db import create_engine

from .conftest import Api, Backend

PAGE = """
query P($runId: ID!, $kinds: [RunLogKind!], $limit: Int, $after: String, $before: String, $wait: Int,
        $phase: [Int!], $stepId: [ID!], $since: DateTime, $until: DateTime, $search: String, $around: ID) {
  runLog(runId: $runId, kinds: $kinds, limit: $limit, after: $after, before: $before, wait: $wait,
         phase: $phase, stepId: $stepId, since: $since, until: $until, search: $search, around: $around) {
    nodes { id phase stepId kindName at cursor }
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor scanLimitReached }
  }
}
"""
COUNTS = """
query C($runId: ID!, $kinds: [RunLogKind!], $phase: [Int!], $since: DateTime, $search: String) {
  runLog(runId: $runId, kinds: $kinds, phase: $phase, since: $since, search: $search, limit: 1) {
    kindCounts { kind kindName count }
  }
}
"""
T0 = datetime.datetime(2026, 3, 1, 12, 0, 0)


def _insert(backend: Backend, rows: list[dict[str, Any]]) -> list[int]:
    """Write rows as another writer would (their own `at`), then fold-words: the run's ids, oldest first."""
    for row in rows:
        at = row["at"]
        row.setdefault("step_id", None)
        row.setdefault("phase", None)
        row.setdefault("kind", "note")
        row.setdefault("detail", json.dumps({"text": "x"}))
        row["at"] = at.isoformat(sep=" ", timespec="milliseconds") if backend.name == "sqlite" else at
        row.setdefault("run_id", 7)
    with backend.sync.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "VALUES (:run_id, :step_id, :kind, :phase, :detail, :at)"
            ),
            rows,
        )
    assert backend.fold_words() == len(rows)
    return [r[0] for r in backend.rows("SELECT id FROM event_run_log WHERE run_id = 7 ORDER BY id")]


def _page(api: Api, **variables: Any) -> dict[str, Any]:
    found: dict[str, Any] = api.data(PAGE, {"runId": "7", **variables})["runLog"]
    return found


def _walk(api: Api, after: str | None = None, **variables: Any) -> list[int]:
    """Every line of a filtered read, page by page (`after`), newest first."""
    seen: list[int] = []
    while True:
        page = _page(api, after=after, **variables)
        seen += [int(node["id"]) for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            return seen
        after = page["pageInfo"]["endCursor"]


def _refused(api: Api, variables: dict[str, Any], query: str = PAGE) -> str:
    [error] = api.post(query, {"runId": "7", **variables})["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    message: str = error["message"]
    return message


def _mixed(backend: Backend) -> list[int]:
    """30 lines, a second apart: phase n % 3, step n % 5 + 1, kind note or run.status every fourth."""
    return _insert(
        backend,
        [
            {
                "at": T0 + datetime.timedelta(seconds=n),
                "phase": n % 3,
                "step_id": n % 5 + 1,
                "kind": "run.status" if n % 4 == 0 else "note",
                "detail": json.dumps({"text": f"line {n}" + (" Britain" if n % 7 == 0 else "")}),
            }
            for n in range(30)
        ],
    )


def test_phase_step_and_time_filters_page_both_ways_each_line_once(api: Api, tables: Backend) -> None:
    ids = _mixed(tables)
    n_of = {line_id: n for n, line_id in enumerate(ids)}
    newest_first = ids[::-1]
    assert _walk(api, phase=[1], limit=3) == [i for i in newest_first if n_of[i] % 3 == 1]
    assert _walk(api, phase=[0, 2], stepId=["2"], limit=2) == [
        i for i in newest_first if n_of[i] % 3 != 1 and n_of[i] % 5 == 1
    ]
    assert _walk(api, phase=[1], kinds=["NOTE"], limit=2) == [
        i for i in newest_first if n_of[i] % 3 == 1 and n_of[i] % 4
    ]
    since, until = T0 + datetime.timedelta(seconds=5), T0 + datetime.timedelta(seconds=12)
    # `since` inclusive, `until` exclusive; an offset is read as such.
    offset = datetime.timezone(datetime.timedelta(hours=2))
    assert _walk(
        api, since=since.replace(tzinfo=datetime.UTC).isoformat(), until=until.astimezone(offset).isoformat()
    ) == [i for i in newest_first if 5 <= n_of[i] < 12]
    assert _walk(api, since=(since - datetime.timedelta(microseconds=1)).isoformat() + "Z", limit=100) == [
        i for i in newest_first if n_of[i] >= 5
    ]
    assert _page(api, phase=[], limit=5)["nodes"] == []
    # Written while paging: a line of the phase comes by `before` from the first page, once.
    first = _page(api, phase=[1], limit=4)
    api.write(7, "note", {"text": "new"}, phase=1)
    api.write(7, "note", {"text": "other phase"}, phase=2)
    newer = _page(api, phase=[1], before=first["pageInfo"]["startCursor"])
    assert [node["phase"] for node in newer["nodes"]] == [1]
    again = _page(api, phase=[1], before=newer["pageInfo"]["startCursor"])
    assert again["nodes"] == []
    older = _walk(api, phase=[1], after=first["pageInfo"]["endCursor"], limit=4)
    assert [int(node["id"]) for node in first["nodes"]] + older == [
        i for i in newest_first if n_of[i] % 3 == 1
    ]


def test_a_cursor_is_refused_under_other_filters(api: Api, tables: Backend) -> None:
    _mixed(tables)
    cursor = _page(api, phase=[1], limit=2)["pageInfo"]["endCursor"]
    assert len(_page(api, phase=[1], after=cursor, limit=2)["nodes"]) == 2
    for other in ({}, {"phase": [2]}, {"phase": [1], "stepId": ["1"]}, {"phase": [1], "search": "line"}):
        message = _refused(api, {"after": cursor, **other})
        assert "under other filters" in message, message


def test_long_poll_under_a_filter_waits_past_lines_it_does_not_keep(make_api: Any, tables: Backend) -> None:
    api = make_api(wait_interval=0.05)
    start = _page(api, phase=[4], limit=5)["pageInfo"]["startCursor"]
    watcher = api.client.app_state["watcher"]

    def probed(times: int) -> None:
        """Wait until the watcher has probed `times` more times (each wakes a waiting poll that has news)."""
        probes = watcher.probes
        while watcher.probes < probes + times and not polled.done():
            time.sleep(0.01)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        polled: concurrent.futures.Future[dict[str, Any]] = pool.submit(
            _page, api, phase=[4], before=start, wait=20
        )
        while 7 not in watcher._watches and not polled.done():  # the poll is waiting
            time.sleep(0.01)
        probed(2)
        api.write(7, "note", {"text": "not this phase"}, phase=3)
        probed(3)  # woken, read nothing it keeps, waiting again
        assert not polled.done()
        api.write(7, "note", {"text": "this one"}, phase=4)
        page = polled.result(timeout=60)
    assert [node["phase"] for node in page["nodes"]] == [4]


def test_bad_filters_are_refused_naming_the_argument(api: Api, tables: Backend) -> None:
    _mixed(tables)
    assert "since" in _refused(api, {"since": "2026-03-02T00:00:00Z", "until": "2026-03-01T00:00:00Z"})
    assert "phase must be 0 or more" in _refused(api, {"phase": [2, -1]})
    assert "search must not be empty" in _refused(api, {"search": ""})
    assert "search is at most 256" in _refused(api, {"search": "x" * 10_240})
    assert "stepId" in _refused(api, {"stepId": ["nope"]})
    assert "phase lists at most 100" in _refused(api, {"phase": list(range(101))})


def test_kind_counts_count_under_the_other_filters(api: Api, tables: Backend) -> None:
    ids = _mixed(tables)
    del ids
    counts = api.data(COUNTS, {"runId": "7"})["runLog"]["kindCounts"]
    assert counts == [
        {"kind": "NOTE", "kindName": "note", "count": 22},
        {"kind": "RUN_STATUS", "kindName": "run.status", "count": 8},
    ]
    # The kinds filter does not narrow them; phase and time do.
    by_phase = api.data(COUNTS, {"runId": "7", "kinds": ["NOTE"], "phase": [0]})["runLog"]["kindCounts"]
    assert {c["kindName"]: c["count"] for c in by_phase} == {
        "note": sum(1 for n in range(30) if n % 3 == 0 and n % 4),
        "run.status": sum(1 for n in range(30) if n % 3 == 0 and n % 4 == 0),
    }
    since = (T0 + datetime.timedelta(seconds=28)).isoformat() + "Z"
    late = api.data(COUNTS, {"runId": "7", "since": since})["runLog"]["kindCounts"]
    assert (
        late
        == [
            {"kind": "RUN_STATUS", "kindName": "run.status", "count": 1},
            {"kind": "NOTE", "kindName": "note", "count": 1},
        ][::-1]
    )
    assert api.data(COUNTS, {"runId": "8"})["runLog"]["kindCounts"] == []


def test_around_opens_the_page_at_a_line_and_pages_on_both_ways(api: Api, tables: Backend) -> None:
    ids = _mixed(tables)
    newest_first = ids[::-1]
    target = ids[10]
    page = _page(api, around=str(target), limit=5)
    shown = [int(node["id"]) for node in page["nodes"]]
    at = newest_first.index(target)
    assert shown == newest_first[at - 2 : at + 3]
    info = page["pageInfo"]
    assert info["hasNextPage"] and info["hasPreviousPage"]
    older = _walk(api, after=info["endCursor"], limit=4)
    newer: list[int] = []
    before = info["startCursor"]
    while True:
        up = _page(api, before=before, limit=4)
        newer = [int(node["id"]) for node in up["nodes"]] + newer
        if not up["pageInfo"]["hasPreviousPage"]:
            break
        before = up["pageInfo"]["startCursor"]
    assert newer + shown + older == newest_first
    # Under a filter: the line must pass it.
    by_phase = _page(api, around=str(ids[9]), phase=[0], limit=3)
    assert [int(node["id"]) for node in by_phase["nodes"]] == [ids[12], ids[9], ids[6]]
    assert "outside this page's filters" in _refused(api, {"around": str(ids[10]), "phase": [0]})
    api.write(8, "note", {"text": "elsewhere"})
    other = tables.scalar("SELECT id FROM event_run_log WHERE run_id = 8")
    assert "a line of run 8, not of run 7" in _refused(api, {"around": str(other)})
    assert "there is no line" in _refused(api, {"around": "999999"})
    assert "around cannot be given with after" in _refused(
        api, {"around": str(target), "after": info["endCursor"]}
    )
    # At the newest line: nothing newer, and the page is filled from the older side.
    top = _page(api, around=str(ids[-1]), limit=5)
    assert [int(node["id"]) for node in top["nodes"]] == newest_first[:5]
    assert not top["pageInfo"]["hasPreviousPage"]


# Details as a writer (or a hand) stored them, and what each search finds among them.
WORDS = [
    json.dumps({"text": "éclair au chocolat"}, ensure_ascii=False),
    json.dumps({"text": "Ωmega point"}, ensure_ascii=False),
    json.dumps({"text": "ÜBER alles"}),  # escaped: \u00dc
    json.dumps({"city": "İstanbul"}, ensure_ascii=False),
    json.dumps({"text": "fire 🔥 here"}, ensure_ascii=False),
    json.dumps({"text": 'say "hi"'}),
    json.dumps({"country": "Wales", "street": "Straße"}, ensure_ascii=False),
    json.dumps({"attempt": 12345, "ok": True, "nothing": None}),
    "plain TEXT, not JSON {",
]
FOUND = [
    ("ÉCLAIR", [0]),
    ("Éclair", [0]),
    ("Ωmega", [1]),
    ("ωMEGA", [1]),
    ("ÜBER", [2]),
    ("über", [2]),
    ("İstanbul", [3]),
    ("i̇stanbul", [3]),  # i and U+0307: how İ folds
    ("😀", []),
    ("🔥", [4]),
    ('say "hi"', [5]),
    ("\\u00dc", []),  # a JSON escape is not a word on the page
    ("country", []),  # nor is a key
    ("text", [8]),
    ("STRASSE", [6]),
    ("12345", [7]),
    ("true", [7]),
    ("null", []),
    ("not json {", [8]),
]


@pytest.mark.parametrize(("search", "found"), FOUND, ids=[f"{n}" for n in range(len(FOUND))])
def test_search_finds_the_words_on_the_page_ignoring_case_by_unicode(
    api: Api, tables: Backend, search: str, found: list[int]
) -> None:
    ids = _insert(
        tables, [{"at": T0 + datetime.timedelta(seconds=n), "detail": d} for n, d in enumerate(WORDS)]
    )
    wanted = [ids[n] for n in found][::-1]
    assert [int(node["id"]) for node in _page(api, search=search)["nodes"]] == wanted
    counts = api.data(COUNTS, {"runId": "7", "search": search})["runLog"]["kindCounts"]
    assert counts == ([{"kind": "NOTE", "kindName": "note", "count": len(found)}] if found else [])


def test_a_search_page_is_full_unless_the_run_has_no_more(api: Api, tables: Backend) -> None:
    rows = [
        {"at": T0 + datetime.timedelta(milliseconds=n), "detail": json.dumps({"text": f"n{n}"})}
        for n in range(3000)
    ]
    for n in (3, 150, 151, 1420, 2990):
        rows[n]["detail"] = json.dumps({"country": "Great BRITAIN", "n": n})
    ids = _insert(tables, rows)
    wanted = [ids[n] for n in (2990, 1420, 151, 150, 3)]
    pages = []
    after = None
    while True:
        page = _page(api, search="britain", after=after, limit=2)
        pages.append([int(node["id"]) for node in page["nodes"]])
        assert not page["pageInfo"]["scanLimitReached"]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert pages == [wanted[:2], wanted[2:4], wanted[4:]]
    whole = _page(api, search="britain", limit=10)
    assert [int(node["id"]) for node in whole["nodes"]] == wanted
    assert not whole["pageInfo"]["hasNextPage"]
    # Newer, by `before`: the one match among many lines written since, on the first page.
    start = whole["pageInfo"]["startCursor"]
    for _ in range(150):
        api.write(7, "note", {"text": "plain"})
    api.write(7, "note", {"text": "britain again"})
    page = _page(api, search="britain", before=start, limit=10)
    assert [node["kindName"] for node in page["nodes"]] == ["note"]
    assert not page["pageInfo"]["hasPreviousPage"]
    assert _page(api, search="britain", before=page["pageInfo"]["startCursor"])["nodes"] == []
    # A line stored by hand since, stamped long before the others, is found once folded.
    [*_, backdated] = _insert(
        tables, [{"at": T0 - datetime.timedelta(days=30), "detail": '"britain, by hand"'}]
    )
    whole = _page(api, search="britain", limit=10)
    assert [int(node["id"]) for node in whole["nodes"]][-2:] == [wanted[-1], backdated]


def test_kind_counts_count_a_search_s_matches_under_the_other_filters(api: Api, tables: Backend) -> None:
    _mixed(tables)
    counts = api.data(COUNTS, {"runId": "7", "search": "BRITAIN"})["runLog"]["kindCounts"]
    assert counts == [
        {"kind": "NOTE", "kindName": "note", "count": sum(1 for n in range(30) if n % 7 == 0 and n % 4)},
        {"kind": "RUN_STATUS", "kindName": "run.status", "count": 2},  # 0 and 28
    ]
    by_phase = api.data(COUNTS, {"runId": "7", "search": "britain", "phase": [1], "kinds": ["NOTE"]})
    # Lines 7 and 28; the kinds filter does not narrow the counts.
    assert by_phase["runLog"]["kindCounts"] == [
        {"kind": "NOTE", "kindName": "note", "count": 1},
        {"kind": "RUN_STATUS", "kindName": "run.status", "count": 1},
    ]
    # A line written since is counted too.
    api.write(7, "note", {"text": "Britain, once more"}, phase=1)
    by_phase = api.data(COUNTS, {"runId": "7", "search": "britain", "phase": [1]})
    assert by_phase["runLog"]["kindCounts"] == [
        {"kind": "NOTE", "kindName": "note", "count": 2},
        {"kind": "RUN_STATUS", "kindName": "run.status", "count": 1},
    ]
    assert api.data(COUNTS, {"runId": "7", "search": "nowhere"})["runLog"]["kindCounts"] == []


def test_a_tail_under_filters_delivers_only_their_lines_each_once(tables: Backend) -> None:
    async def run(context: Any) -> None:
        filters = store.Filters(phases=(2,), search="keep")
        lines = tail.tail_lines(context, 7, None, None, filters=filters)
        first = asyncio.ensure_future(anext(lines))
        async with asyncio.timeout(60):
            while 7 not in context.watcher._watches:  # noqa: ASYNC110 (the watcher has no event for this)
                await asyncio.sleep(0.01)
            probes = context.watcher.probes
            while context.watcher.probes < probes + 2:  # noqa: ASYNC110 (as above)
                await asyncio.sleep(0.01)
        written = [(2, "drop"), (1, "KEEP, wrong phase"), (2, "keep 1"), (2, "keep 2")]
        # Written as the service writes them, each line with its words, in one INSERT.
        new = [store.NewLine(7, "note", phase=p, detail=json.dumps({"text": t})) for p, t in written]
        writes = create_engine(context.settings, writes=True)  # the writes' pool, as the service's
        try:
            await store.insert_lines(writes, new, deadline=asyncio.get_running_loop().time() + 30)
        finally:
            await writes.dispose()
        ids = [r[0] for r in tables.rows("SELECT id FROM event_run_log WHERE run_id = 7 ORDER BY id")]
        async with asyncio.timeout(60):
            got = [await first, await anext(lines)]
        assert [line.id for line in got] == ids[-2:]
        await lines.aclose()
        # From the first one's cursor, under the same filters: the second, once.
        again = tail.tail_lines(context, 7, None, got[0].cursor, filters=filters)
        async with asyncio.timeout(60):
            assert (await anext(again)).id == ids[-1]
        await again.aclose()
        with pytest.raises(store.CursorError):
            await anext(tail.tail_lines(context, 7, None, got[0].cursor))

    async def follow() -> None:
        settings = tables.settings(wait_interval=0.05)
        engine = create_engine(settings)
        watcher = tail.Watcher(engine, settings)
        watcher.start()
        try:
            await run(SimpleNamespace(engine=engine, settings=settings, watcher=watcher))
        finally:
            await watcher.stop()
            await engine.dispose()

    asyncio.run(follow())


def test_a_line_written_is_found_at_once_its_words_kept_with_it(api: Api, tables: Backend) -> None:
    # Nothing folds here: no fold-words, no folder. Lines in grouped INSERTs, one keyed.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sent = [pool.submit(api.write, 7, "note", {"text": f"Zanzibar {n}"}) for n in range(12)]
        assert [future.result() for future in sent] == [True] * 12
    keyed = api.post(
        'mutation { writeRunLog(runId: 7, kind: "note", detail: {text: "ÉCLAIR"}, idempotencyKey: "k") }'
    )
    assert keyed["data"]["writeRunLog"] is True
    at = "strftime('%Y-%m-%d %H:%M:%f', l.at)" if tables.name == "sqlite" else "l.at"
    kept = tables.rows(
        "SELECT l.detail, w.words FROM event_run_log l JOIN event_run_log_words w "
        f"ON w.run_id = l.run_id AND w.id = l.id AND w.line_at = {at} ORDER BY l.id"
    )
    assert len(kept) == tables.scalar("SELECT COUNT(*) FROM event_run_log") == 13
    assert all(words == store.words_of(detail) for detail, words in kept)
    assert len(_page(api, search="zanzibar", limit=50)["nodes"]) == 12
    assert [node["kindName"] for node in _page(api, search="éclair")["nodes"]] == ["note"]


def test_a_line_is_stored_with_its_words_or_not_at_all(api: Api, tables: Backend) -> None:
    # A database that refuses the words refuses the write: a line is never stored without them.
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
        assert not api.write(7, "note", {"text": "refused"})
        assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0
    finally:
        tables.execute("DROP TRIGGER no_words")
    assert api.write(7, "note", {"text": "stored"})
    assert [node["kindName"] for node in _page(api, search="stored")["nodes"]] == ["note"]
