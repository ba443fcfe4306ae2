"""Cursors are bounded whatever was written, tied to their run and kinds, and still deliver late commits once.

A burst of lines within the late window (the seconds in which a slow commit
can still land behind lines already read) is what made cursors grow: each
named every recent line it had delivered. A forged cursor could name
thousands. Here both are tried against each backend, through the API and the
tail, and every line must still come exactly once.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa

from gql import store
from gql.domain import tail
from gql.store.db import create_engine

from .conftest import Api, Backend

# What "small" means to a client: a cursor is a few hundred bytes, never
# more than this, however many lines were written or claimed.
SMALL = 4096
PAGE = """
query P($runId: ID!, $kinds: [RunLogKind!], $limit: Int, $after: String, $before: String, $wait: Int) {
  runLog(runId: $runId, kinds: $kinds, limit: $limit, after: $after, before: $before, wait: $wait) {
    nodes { id cursor }
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
  }
}
"""
LATE = "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (7, 'note', '{\"text\": \"late\"}', :at)"
PATIENCE = 60


def _now() -> datetime.datetime:
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _stamp(backend: Backend, at: datetime.datetime) -> Any:
    return at.isoformat(sep=" ", timespec="milliseconds") if backend.name == "sqlite" else at


def _burst(backend: Backend, count: int, run_id: int = 7) -> list[int]:
    """Write `count` lines at once, stamped now (within the late window), as another writer would."""
    at = _stamp(backend, _now())
    with backend.sync.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (:r, 'note', :d, :at)"),
            [{"r": run_id, "d": json.dumps({"text": f"burst {n}"}), "at": at} for n in range(count)],
        )
    return [row[0] for row in backend.rows("SELECT id FROM event_run_log WHERE run_id = :r", r=run_id)]


def _page(api: Api, **variables: Any) -> dict[str, Any]:
    found: dict[str, Any] = api.data(PAGE, {"runId": "7", **variables})["runLog"]
    return found


def _cursors(page: dict[str, Any]) -> list[str]:
    info = page["pageInfo"]
    return [node["cursor"] for node in page["nodes"]] + [
        c for c in (info["startCursor"], info["endCursor"]) if c
    ]


def _refusal(api: Api, variables: dict[str, Any]) -> str:
    [error] = api.post(PAGE, variables)["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    message: str = error["message"]
    return message


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _window_cursor(
    run_id: int, items: list[tuple[int, int]], settled: datetime.datetime | None = None
) -> str:
    """A cursor in this service's format whose window names `items` (id step, ms), as a forger writes it.

    Lines stamped before `settled` (default: 5 s ago) are behind it.
    """
    settled = _now() - datetime.timedelta(seconds=5) if settled is None else settled
    micros = (settled - datetime.datetime(1, 1, 1)) // datetime.timedelta(microseconds=1)
    raw = bytes([2]) + _varint(run_id) + b"\x00" + b"\x00" + b"\x01" + _varint(micros) + b"\x00"
    raw += _varint(len(items)) + b"".join(_varint(step) + _varint(ms) for step, ms in items)
    return _b64(raw)


def test_a_forged_cursor_naming_thousands_of_lines_is_refused_before_it_is_read(
    api: Api, tables: Backend
) -> None:
    """Repeated ids, or more lines than a cursor names, are refused: forged costs what real does."""
    before_the_lines = _now() - datetime.timedelta(seconds=1)
    assert api.write(7, "note", {"text": "a"})
    assert api.write(7, "note", {"text": "b"})
    settled = (_now() - datetime.timedelta(seconds=5)).isoformat(timespec="microseconds")
    # The earlier late-commit form, 2,000 lines of step 0: seconds of CPU per read before.
    earlier = _b64(f"~;;{settled};{','.join(['1.0'] + ['0.0'] * 1999)}".encode())
    assert "is not a cursor this service issued" in _refusal(api, {"runId": "7", "before": earlier})
    # This version's form: a step of 0 (a line named twice), and one line more than a cursor names.
    twice = _window_cursor(7, [(1, 0), (0, 0)])
    too_many = _window_cursor(7, [(1, 0)] * (store.RECENT_LINES + 1))
    for forged in (twice, too_many):
        assert "is not a cursor this service issued" in _refusal(api, {"runId": "7", "before": forged})
    # A cursor past the size any cursor can have is refused on its length alone.
    huge = "A" * (64 * 1024)
    assert "at most" in _refusal(api, {"runId": "7", "before": huge})
    # The most a forged cursor can name is what a real one can: it reads as one. Each names
    # line a (and lines never written), settling hours from now.
    a, b = (row[0] for row in tables.rows("SELECT id FROM event_run_log WHERE run_id = 7 ORDER BY id"))

    def naming(count: int) -> str:
        named = [(a, 10_000_000), (b + 1000, 10_000_000)] + [(1, 10_000_000)] * (count - 2)
        return _window_cursor(7, named, settled=before_the_lines)

    # Full: line b waits until the lines named settle; the page says a newer line is there
    # and keeps its place (a page that moved past b would lose it).
    full = naming(store.RECENT_LINES)
    read = _page(api, before=full, limit=5)
    assert read["nodes"] == [] and read["pageInfo"]["hasPreviousPage"] is True
    assert read["pageInfo"]["startCursor"] == full
    # With room for one more: line b, and b alone (a was named).
    read = _page(api, before=naming(store.RECENT_LINES - 1), limit=5)
    assert [int(n["id"]) for n in read["nodes"]] == [b]
    for cursor in _cursors(read):
        assert len(cursor) <= SMALL


def test_cursors_stay_small_after_a_burst_and_paging_on_gives_each_line_once(
    api: Api, tables: Backend
) -> None:
    written = _burst(tables, 2000)
    first = _page(api, limit=2000)
    sizes = [len(c) for c in _cursors(first)]
    assert max(sizes) <= SMALL
    # A page stops short rather than make a cursor that names every line of the burst.
    assert first["pageInfo"]["hasNextPage"] is True
    walked = [int(n["id"]) for n in first["nodes"]]
    after = first["pageInfo"]["endCursor"]
    for _ in range(100):
        page = _page(api, limit=2000, after=after)
        walked += [int(n["id"]) for n in page["nodes"]]
        sizes += [len(c) for c in _cursors(page)]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert max(sizes) <= SMALL
    assert sorted(walked) == sorted(written) and len(walked) == len(set(walked))
    # From the first page's start, nothing newer: every line of the burst is behind it.
    assert _page(api, before=first["pageInfo"]["startCursor"])["nodes"] == []


def test_a_cursor_is_refused_on_another_run_or_another_kinds_filter(api: Api) -> None:
    assert api.write(7, "note", {"text": "a"})
    assert api.write(8, "note", {"text": "b"})
    cursor = _page(api, limit=1)["pageInfo"]["startCursor"]
    for argument in ("before", "after"):
        message = _refusal(api, {"runId": "8", argument: cursor})
        assert f"{argument} is a cursor of run 7, not of run 8" in message
        message = _refusal(api, {"runId": "7", "kinds": ["NOTE"], argument: cursor})
        assert "under other filters" in message
    # The same kinds in another order are the same filter.
    by_kinds = _page(api, limit=1, kinds=["NOTE", "RUN_CREATED"])["pageInfo"]["startCursor"]
    assert _page(api, kinds=["RUN_CREATED", "NOTE"], before=by_kinds)["nodes"] == []


def test_a_before_walk_through_a_burst_larger_than_a_cursor_names_gives_each_line_once_late_included(
    make_api: Any, tables: Backend
) -> None:
    """More lines within the late window than a cursor names, and a late commit among them: each comes once.

    The walk is long polls: a page held back by the cursor's bound is answered
    once its oldest lines have settled (write_timeout is short here, so that
    is about three seconds).
    """
    # Lines are written as another writer would: the service's own writes get 0.05 s here.
    api = make_api(write_timeout=0.05)
    _burst(tables, 1)
    cursor = _page(api, limit=1)["pageInfo"]["startCursor"]
    held = tables.sync.connect()
    transaction = held.begin()
    stamped = _now() - datetime.timedelta(milliseconds=500)
    if tables.name == "sqlite":  # one writer at a time: the burst commits first
        _burst(tables, store.RECENT_LINES * 2)
        held.execute(sa.text(LATE), {"at": _stamp(tables, stamped)})
    else:
        held.execute(sa.text(LATE), {"at": _stamp(tables, stamped)})
        _burst(tables, store.RECENT_LINES * 2)
    delivered: list[int] = []
    try:
        found = _page(api, limit=100, before=cursor, wait=10)
        delivered += reversed([int(n["id"]) for n in found["nodes"]])
        cursor = found["pageInfo"]["startCursor"]
    finally:
        transaction.commit()
        held.close()
    every = [row[0] for row in tables.rows("SELECT id FROM event_run_log WHERE run_id = 7")]
    wanted = len(every) - 1  # all but "start"
    for _ in range(60):
        if len(delivered) >= wanted:
            break
        found = _page(api, limit=100, before=cursor, wait=10)
        delivered += reversed([int(n["id"]) for n in found["nodes"]])
        assert all(len(c) <= SMALL for c in _cursors(found))
        cursor = found["pageInfo"]["startCursor"]
    late = tables.scalar("SELECT id FROM event_run_log WHERE detail LIKE '%late%'")
    assert late in delivered
    assert len(delivered) == len(set(delivered)) == wanted
    # Nothing more from the last cursor.
    assert _page(api, before=cursor)["nodes"] == []


def test_a_tail_through_a_burst_sends_small_cursors_and_each_line_once(tables: Backend) -> None:
    async def run() -> None:
        settings = tables.settings(wait_interval=0.05, write_timeout=0.05)
        engine = create_engine(settings)
        watcher = tail.Watcher(engine, settings)
        watcher.start()
        context = SimpleNamespace(engine=engine, settings=settings, watcher=watcher)
        try:
            since = await store.cursor_now(
                engine, run_id=7, kinds=None, settled=store.settled_before(tail.late_window(settings))
            )
            written = await asyncio.to_thread(_burst, tables, 1000)
            lines = tail.tail_lines(context, 7, None, since)
            got: list[store.Line] = []
            async with asyncio.timeout(PATIENCE):
                while len(got) < len(written):
                    got.append(await anext(lines))
            await lines.aclose()
            assert max(len(line.cursor or "") for line in got) <= SMALL
            assert sorted(line.id for line in got) == sorted(written)
            # A tail of another run refuses the cursor.
            other = tail.tail_lines(context, 8, None, got[-1].cursor)
            try:
                await anext(other)
            except store.CursorError as exc:
                assert "a cursor of run 7, not of run 8" in str(exc)
            else:
                raise AssertionError("a cursor of run 7 was taken by a tail of run 8")
            finally:
                await other.aclose()
        finally:
            await watcher.stop()
            await engine.dispose()

    asyncio.run(run())


def test_the_docs_give_the_cursors_bounds_as_the_code_has_them() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for doc in ("docs/clients.md", "docs/operating.md"):
        text = " ".join((root / doc).read_text().split())
        assert f"{store.MAX_CURSOR_CHARS:,} characters" in text, doc
        assert f"{store.RECENT_LINES} recent lines" in text or f"{store.RECENT_LINES} of them" in text, doc
