"""Reading a run's lines: pages, the lines since a time, and the health check's ping."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from .connections import read_rows
from .cursors import RECENT_LINES, Cursor, cursor_scope, encode_cursor, fresh_window, naive
from .rows import mariadb_lines, sqlite_lines
from .statements import (
    as_compared,
    bind_filters,
    count_statement,
    details_statement,
    kind_counts_statement,
    line_statement,
    page_statement,
    recent_statement,
    words_counts_statement,
    words_scan_statement,
)
from .values import NO_FILTERS, Filters, Line, Page
from .words import words_of


async def read_page(
    engine: AsyncEngine,
    *,
    run_id: int,
    kinds: Sequence[str] | None,
    limit: int,
    after: Cursor | None,
    detail: bool = True,
    max_detail_bytes: int | None = None,
    largest_detail: int = 64 * 1024,
    before: Cursor | None = None,
    filters: Filters = NO_FILTERS,
) -> Page:
    """One page of a run's lines, newest first by (at, id); with `before`, the lines just newer, oldest first.

    A search page holds `limit` matches unless the run has no more: it reads the lines' kept words
    (store/words.py). With `max_detail_bytes`, the page ends early once its details would weigh more.
    """
    if (kinds is not None and not kinds) or filters.phases == () or filters.steps == ():
        return Page(lines=[], has_next=False)
    sqlite = engine.dialect.name == "sqlite"
    statement_of = functools.partial(
        page_statement, run_id=run_id, kinds=kinds, after=after, sqlite=sqlite, before=before, filters=filters
    )
    if filters.search is not None:
        found = await _search_ids(engine, statement_of, limit + 1, run_id, kinds, filters, after, before)
        if not found:
            return Page(lines=[], has_next=False)
        statement_of = functools.partial(statement_of, ids=found)
    return await _read_any(engine, statement_of, limit, sqlite, detail, max_detail_bytes, largest_detail)


async def _search_ids(
    engine: AsyncEngine,
    statement_of: Callable[..., tuple[Select[Any], dict[str, Any]]],
    want: int,
    run_id: int,
    kinds: Sequence[str] | None,
    filters: Filters,
    after: Cursor | None,
    before: Cursor | None,
) -> list[int]:
    """The ids of the first `want` lines of the page `statement_of` reads whose kept words hold the search.

    The words are read in the page's order, from about where the page starts; the page's own
    statement, on those ids, says which of them it holds.
    """
    sqlite = engine.dialect.name == "sqlite"
    values: dict[str, Any] = {"run_id": run_id, "search": filters.search}
    if kinds is not None:
        values["kinds"] = sorted(set(kinds))
    narrowed = bind_filters(values, filters.without_search(), sqlite)
    bound = None
    start = _page_start(after, before)
    if start is not None:
        values["from_at"], bound = as_compared(start, sqlite), "coarse"
    read: list[int] = []
    most = want
    while True:
        statement = words_scan_statement(sqlite, before is None, kinds is not None, narrowed, bound)
        rows = await read_rows(engine, statement, {**values, "limit": most})
        read += [line_id for line_id, _ in rows]
        page, page_values = statement_of(limit=want - 1, read="lines without detail", ids=read)
        held = await read_rows(engine, page, page_values)
        if len(held) >= want or len(rows) < most:
            return [row[0] for row in held[:want]]
        last_id, last_at = rows[-1]
        values.update(from_at=last_at, from_id=last_id)
        bound, most = "exact", most * 2


def _page_start(after: Cursor | None, before: Cursor | None) -> datetime.datetime | None:
    """Where a page starts, if at a time: its lines are at or before it (with `before`, at or after)."""
    if before is None:
        return after.at if after is not None and isinstance(after.at, datetime.datetime) else None
    if before.window is None:
        return before.at if isinstance(before.at, datetime.datetime) else None
    floor = before.window.floor
    if floor is not None:
        return floor.at if isinstance(floor.at, datetime.datetime) else None
    return before.window.settled


async def _read_any(
    engine: AsyncEngine,
    statement_of: Callable[..., tuple[Select[Any], dict[str, Any]]],
    limit: int,
    sqlite: bool,
    detail: bool,
    max_detail_bytes: int | None,
    largest_detail: int,
) -> Page:
    """`read_page`'s page, whose statement `statement_of(limit=, read=, fits=)` makes."""
    if not detail or max_detail_bytes is None or (limit + 1) * largest_detail <= max_detail_bytes:
        return await _read_lines(engine, statement_of, limit, sqlite, detail, max_detail_bytes)
    if max_detail_bytes <= 0:
        # The request's budget is spent: its first line is all a page returns.
        return await _read_lines(engine, statement_of, 1, sqlite, detail, max_detail_bytes)
    fits = max_detail_bytes // (limit + 1)
    while True:
        statement, values = statement_of(limit=limit, read="lines with sizes", fits=fits)
        rows = await read_rows(engine, statement, values)
        sizes = [row[-1] or 0 for row in rows[:limit]]
        kept = _fitting(sizes, max_detail_bytes)
        has_next = len(rows) > kept
        kept_rows = [row[:-1] for row in rows[:kept]]  # the size, last, is not part of a line
        lines = sqlite_lines(kept_rows) if sqlite else mariadb_lines(kept_rows)
        left_out = [line.id for line, size in zip(lines, sizes[:kept], strict=True) if size > fits]
        if left_out:
            found = dict(await read_rows(engine, details_statement(sqlite), {"ids": left_out}))
            if len(found) < len(left_out):
                continue  # lines deleted since the page was read (pruning): read it again
            lines = [line._replace(detail=found[line.id]) if line.id in found else line for line in lines]
        return Page(lines=lines, has_next=has_next, detail_bytes=sum(sizes[:kept]))


async def _read_lines(
    engine: AsyncEngine,
    statement_of: Callable[..., tuple[Select[Any], dict[str, Any]]],
    limit: int,
    sqlite: bool,
    detail: bool,
    max_detail_bytes: int | None,
) -> Page:
    """A page read in one statement, cut on the sizes of the details it fetched."""
    statement, values = statement_of(limit=limit, read="lines" if detail else "lines without detail")
    rows = await read_rows(engine, statement, values)
    lines = sqlite_lines(rows[:limit]) if sqlite else mariadb_lines(rows[:limit])
    if not detail:
        return Page(lines=lines, has_next=len(rows) > limit)
    sizes = [_stored_bytes(line.detail) for line in lines]
    kept = len(lines) if max_detail_bytes is None else _fitting(sizes, max_detail_bytes)
    return Page(lines=lines[:kept], has_next=len(rows) > kept, detail_bytes=sum(sizes[:kept]))


async def count_recent(
    engine: AsyncEngine, *, run_ids: Sequence[int], earlier: datetime.datetime, since: datetime.datetime
) -> dict[int, tuple[int, int]]:
    """Per run (none: left out), how many lines are stamped at or after `earlier`, and at or after `since`."""
    if not run_ids:
        return {}
    sqlite = engine.dialect.name == "sqlite"
    values = {
        "runs": sorted(set(run_ids)),
        "earlier": as_compared(earlier, sqlite),
        "since": as_compared(since, sqlite),
    }
    rows = await read_rows(engine, count_statement(sqlite), values)
    return {run_id: (int(counted), int(recent or 0)) for run_id, counted, recent in rows}


def _fitting(sizes: Sequence[int], max_bytes: int) -> int:
    """How many of the first `sizes` come to at most `max_bytes` together; never none of them."""
    total = 0
    for count, size in enumerate(sizes):
        total += size
        if total > max_bytes and count:
            return count
    return len(sizes)


def _stored_bytes(detail: str | bytes | None) -> int:
    """A detail's size as stored, in bytes (the column holds UTF-8)."""
    if detail is None:
        return 0
    if isinstance(detail, bytes) or detail.isascii():
        return len(detail)
    return len(detail.encode("utf-8", "surrogatepass"))


async def ping(engine: AsyncEngine) -> None:
    """Raise unless the database answers, with `event_run_log` in place (writes work without `event_runs`)."""
    await read_rows(engine, text("SELECT 1 FROM event_run_log LIMIT 0"))


async def cursor_now(
    engine: AsyncEngine,
    *,
    run_id: int,
    kinds: Sequence[str] | None,
    settled: datetime.datetime,
    filters: Filters = NO_FILTERS,
) -> str:
    """A cursor with every line written so far behind it: a `before` read from it waits for new lines."""
    seen: list[tuple[int, datetime.datetime]] = []
    if (kinds is None or kinds) and filters.phases != () and filters.steps != ():
        sqlite = engine.dialect.name == "sqlite"
        values: dict[str, Any] = {
            "run_id": run_id,
            "settled": as_compared(settled, sqlite),
            "limit": RECENT_LINES,
        }
        if kinds is not None:
            values["kinds"] = sorted(set(kinds))
        narrowed = bind_filters(values, filters.without_search(), sqlite)
        statement = recent_statement(sqlite, kinds is not None, narrowed)
        for line_id, at in await read_rows(engine, statement, values):
            if isinstance(at, str):
                at = datetime.datetime.fromisoformat(at)
            seen.append((line_id, naive(at)))
    scope = cursor_scope(run_id, kinds, filters)
    return encode_cursor(Cursor(at=None, id=0), scope, fresh_window(settled, seen))


async def count_kinds(engine: AsyncEngine, *, run_id: int, filters: Filters) -> list[tuple[str, int]]:
    """How many of the run's lines under `filters` are of each kind: one grouped query."""
    if filters.phases == () or filters.steps == ():
        return []
    sqlite = engine.dialect.name == "sqlite"
    values: dict[str, Any] = {"run_id": run_id}
    if filters.search is None:
        statement = kind_counts_statement(sqlite, bind_filters(values, filters, sqlite))
        return [(_kind_name(kind), int(count)) for kind, count in await read_rows(engine, statement, values)]
    narrowed = bind_filters(values, filters.without_search(), sqlite)
    statement = words_counts_statement(sqlite, narrowed)
    rows = await read_rows(engine, statement, {**values, "search": filters.search})
    return sorted((_kind_name(kind), int(count)) for kind, count in rows)


async def find_line(
    engine: AsyncEngine, *, run_id: int, line_id: int, kinds: Sequence[str] | None, filters: Filters
) -> Line | None:
    """The line `line_id` of `run_id` if it passes `kinds` and `filters`; None when it does not."""
    if (kinds is not None and not kinds) or filters.phases == () or filters.steps == ():
        return None
    sqlite = engine.dialect.name == "sqlite"
    values: dict[str, Any] = {"run_id": run_id, "around": line_id, "limit": 1}
    if kinds is not None:
        values["kinds"] = sorted(set(kinds))
    narrowed = bind_filters(values, filters.without_search(), sqlite)
    rows = await read_rows(engine, line_statement(sqlite, kinds is not None, narrowed), values)
    lines = sqlite_lines(rows) if sqlite else mariadb_lines(rows)
    if not lines or (filters.search is not None and filters.search not in words_of(lines[0].detail)):
        return None
    return lines[0]


async def run_of_line(engine: AsyncEngine, line_id: int) -> int | None:
    """The run the line `line_id` is of; None when there is no such line."""
    rows = await read_rows(engine, text("SELECT run_id FROM event_run_log WHERE id = :id"), {"id": line_id})
    return int(rows[0][0]) if rows else None


def _kind_name(kind: str | bytes) -> str:
    return kind.decode("utf-8", "replace") if isinstance(kind, bytes) else kind
