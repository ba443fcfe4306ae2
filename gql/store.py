"""The run log's operations as plain async functions over an engine.

Each call takes its own connection from the pool: graphql-core resolves sibling
fields as concurrent tasks, and an SQLAlchemy connection must not be shared
between tasks. Nothing here knows about GraphQL.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import contextlib
import contextvars
import datetime
import functools
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Executable,
    Integer,
    LargeBinary,
    Select,
    String,
    TextClause,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal_column,
    null,
    or_,
    select,
    text,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from . import tracing
from .db import (
    SQLITE_AT_ORDER,
    event_run_log,
    event_run_log_keys,
    event_run_log_pruned,
    event_runs,
    mark_pool_stale,
    pool_generation,
    transaction,
)
from .kinds import TERMINAL_STATUSES

READ_LIMIT_DEFAULT, READ_LIMIT_MAX = 500, 2000
PRUNE_LIMIT_DEFAULT, PRUNE_LIMIT_MAX = 5000, 50_000
LINE_ID_MAX = 2**63 - 1  # BIGINT, and the largest integer SQLite holds
PHASE_MIN, PHASE_MAX = -(2**31), 2**31 - 1  # what GraphQL's Int holds
# What `at` reads as on a line whose stored `at` is not a time: the earliest
# DateTime, since such lines come after every line with a time (SQLITE_AT_ORDER;
# MariaDB orders NULL and its zero date last).
STAND_IN_AT = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


class Line(NamedTuple):
    """One stored line, as stored: `kind` and `detail` are not interpreted here.

    A named tuple rather than a frozen dataclass: one is made for every line
    of every page, and a tuple is made in a third of the time.

    A row this service did not write may hold what no line can (`at` that is
    not a time, a NULL kind, a phase past 32 bits): it is still a line, with
    a stand-in where the value cannot be shown and `problem` saying what was
    stored, so that one bad row never breaks its page.
    """

    id: int
    run_id: int
    step_id: int | str | None
    kind: str
    phase: int | None
    detail: str | bytes | None  # bytes: as stored, maybe not UTF-8 (details.read_detail decodes)
    at: datetime.datetime  # aware, UTC; STAND_IN_AT when `position` is set
    problem: str | None = None
    # Set when `at` is a stand-in: what the database orders the line by, in
    # the text it compares ('' when it holds no time at all). The cursor
    # carries it, so paging stays exact across such lines.
    position: str | None = None
    # The line's cursor, where it was delivered by a tail (gql/tail.py).
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class NewLine:
    run_id: int
    kind: str
    step_id: int | None = None
    phase: int | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Page:
    lines: list[Line]
    has_next: bool
    detail_bytes: int = 0  # the stored bytes of the lines' details

    @property
    def end_cursor(self) -> str | None:
        return encode_cursor(self.lines[-1]) if self.lines else None


@dataclass(frozen=True, slots=True)
class Cursor:
    """A position in a run's log, and what a `before` read from it has already delivered.

    A plain cursor is a line's position, (at, id): everything at or before it
    is behind it. A cursor of a recent line (see `Window`) also carries a
    window, because `at` is stamped before its line commits: a line whose
    commit is slow can still land at a position a reader has passed.
    """

    # Naive UTC; or a line's `position` when its stored `at` is not a time.
    # None only on a cursor of a read that found no line (`cursor_now`).
    at: datetime.datetime | str | None
    id: int
    window: Window | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """What a cursor of a recent line has behind it, besides its position.

    Behind the cursor: every line at or before `floor` (when set), every line
    with `at` before `settled`, and the lines `seen` (id and at, naive UTC).
    A `before` read from it reads the lines that are none of those.
    `settled` trails the read that made the cursor by `late_window` seconds,
    the longest a line's commit can land after its `at` (a write's deadline,
    RUNLOG_WRITE_TIMEOUT, and a margin): a line whose `at` is before it was
    committed when the cursor was made, so only the lines since need naming.
    """

    settled: datetime.datetime
    floor: Cursor | None = None
    seen: tuple[tuple[int, datetime.datetime], ...] = ()


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    status: str
    ended_at: datetime.datetime | None
    updated_at: datetime.datetime | None


class CursorError(ValueError):
    """An `after` value this service did not issue."""


def clamp_read_limit(limit: int | None) -> int:
    """Null or 0 means 500; anything else is clamped to 1..2000, as the seed does."""
    if not limit:
        return READ_LIMIT_DEFAULT
    return min(max(limit, 1), READ_LIMIT_MAX)


def clamp_prune_limit(limit: int | None) -> int:
    """Null or 0 means 5000; anything else is clamped to 1..50000."""
    if not limit:
        return PRUNE_LIMIT_DEFAULT
    return min(max(limit, 1), PRUNE_LIMIT_MAX)


def utc_now_millis() -> datetime.datetime:
    """Now, naive UTC, truncated to the millisecond the column keeps."""
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def as_naive_utc(value: datetime.datetime) -> datetime.datetime:
    """A datetime as the database holds it: UTC without an offset (naive is read as UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def encode_cursor(line: Line | Cursor, window: Window | None = None) -> str:
    """A line's (or a position's) cursor; with `window`, one that also remembers what it delivered."""
    if window is None and isinstance(line, Cursor):
        window = line.window
    at = line.position if isinstance(line, Line) and line.position is not None else line.at
    position = _position_text(at, line.id)
    if window is None:
        return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")
    text = _WindowText(window.settled, window.floor)
    for line_id, seen_at in sorted(window.seen):
        text.add(line_id, seen_at)
    return text.cursor(line)


def _position_text(at: datetime.datetime | str | None, line_id: int) -> str:
    if at is None:
        return ""
    if isinstance(at, str):
        return f"!{at}|{line_id}"
    at = as_naive_utc(at)
    # Milliseconds as the column keeps them; finer only if an older column holds finer.
    spec = "milliseconds" if at.microsecond % 1000 == 0 else "microseconds"
    return f"{at.isoformat(timespec=spec)}|{line_id}"


class _WindowText:
    """A window's `seen` as cursor text, grown a line at a time.

    A page's cursors share their window but for the lines each adds: written
    out whole for each line, a 500-line page of recent lines took 0.8 s of
    CPU (every cursor names every line before it). Kept as text here, a line
    whose id is the largest so far (the usual case) costs one item; one that
    is not (a late commit, on MariaDB) rewrites the text once.
    """

    def __init__(self, settled: datetime.datetime, floor: Cursor | None) -> None:
        self.settled = settled
        self.head = "" if floor is None else _position_text(floor.at, floor.id)
        self.stamp = settled.isoformat(timespec="microseconds")
        self.seen: list[tuple[int, datetime.datetime]] = []
        self.text = ""

    def add(self, line_id: int, at: datetime.datetime) -> None:
        if not self.seen or line_id > self.seen[-1][0]:
            last = self.seen[-1][0] if self.seen else 0
            item = self._item(line_id - last, at)
            self.text = f"{self.text},{item}" if self.seen else item
            self.seen.append((line_id, at))
            return
        bisect.insort(self.seen, (line_id, at))
        items, last = [], 0
        for found, when in self.seen:
            items.append(self._item(found - last, when))
            last = found
        self.text = ",".join(items)

    def _item(self, step: int, at: datetime.datetime) -> str:
        # Ids as steps from the last, times as milliseconds past `settled`,
        # rounded up (a line kept a little longer is only named again).
        micros = (at - self.settled) // datetime.timedelta(microseconds=1)
        return f"{step:x}.{max(0, -(-micros // 1000)):x}"

    def cursor(self, line: Line | Cursor) -> str:
        at = line.position if isinstance(line, Line) and line.position is not None else line.at
        raw = f"~{_position_text(at, line.id)};{self.head};{self.stamp};{self.text}"
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


# A plain cursor is a few dozen characters; anything much longer was not issued here.
_CURSOR_MAX = 200
# A cursor with a window names the lines of the last few seconds it delivered,
# a few bytes each: 64 KiB holds thousands.
_WINDOW_CURSOR_MAX = 64 * 1024
# A position is a date as SQLite's normalised form or MariaDB prints it
# (`0000-00-00 00:00:00.000`, `2026-02-30 00:00:00.000`), or '' for no time.
_POSITION = re.compile(r"[0-9 :.-]{0,40}")
_ID = re.compile(r"[0-9]{1,19}")
_SEEN = re.compile(r"[0-9a-f]{1,16}\.[0-9a-f]{1,12}")


def decode_cursor(value: str, argument: str = "after") -> Cursor:
    shown = value if len(value) <= 60 else f"{value[:60]}... ({len(value)} characters)"
    issued = (
        f"{argument}={shown!r} is not a cursor this service issued: "
        "pass a line's cursor, or a page's pageInfo.endCursor or startCursor"
    )
    if len(value) > _WINDOW_CURSOR_MAX:
        raise CursorError(issued)
    try:
        padded = value + "=" * (-len(value) % 4)
        raw = base64.urlsafe_b64decode(padded).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CursorError(issued) from None
    if not raw.startswith("~"):
        if len(value) > _CURSOR_MAX:
            raise CursorError(issued)
        return _decode_position(raw, issued)
    try:
        position_text, floor_text, settled_text, seen_text = raw[1:].split(";")
        settled = datetime.datetime.fromisoformat(settled_text)
    except ValueError:
        raise CursorError(issued) from None
    if settled.tzinfo is not None:
        raise CursorError(issued)
    seen: list[tuple[int, datetime.datetime]] = []
    last = 0
    for item in seen_text.split(",") if seen_text else ():
        if _SEEN.fullmatch(item) is None:
            raise CursorError(issued)
        step, millis = (int(part, 16) for part in item.split("."))
        last += step
        try:
            seen.append((last, settled + datetime.timedelta(milliseconds=millis)))
        except OverflowError:
            raise CursorError(issued) from None
    if last > LINE_ID_MAX:
        raise CursorError(issued)
    floor = _decode_position(floor_text, issued, floor=True) if floor_text else None
    window = Window(settled=settled, floor=floor, seen=tuple(seen))
    if not position_text:
        return Cursor(at=None, id=0, window=window)
    position = _decode_position(position_text, issued)
    return Cursor(at=position.at, id=position.id, window=window)


def _decode_position(raw: str, issued: str, *, floor: bool = False) -> Cursor:
    """A position as `_position_text` writes it; a floor may name id 0 (before every line at its time)."""
    try:
        at_text, id_text = raw.rsplit("|", 1)
    except ValueError:
        raise CursorError(issued) from None
    if _ID.fullmatch(id_text) is None or not (0 if floor else 1) <= int(id_text) <= LINE_ID_MAX:
        raise CursorError(
            f"{issued} (its line id {id_text[:30]!r} is not an integer from 1 to {LINE_ID_MAX})"
        )
    if at_text.startswith("!"):
        if _POSITION.fullmatch(at_text[1:]) is None:
            raise CursorError(issued)
        return Cursor(at=at_text[1:], id=int(id_text))
    try:
        at = as_naive_utc(datetime.datetime.fromisoformat(at_text))
    except ValueError:
        raise CursorError(issued) from None
    except OverflowError:
        raise CursorError(f"{issued} (its time {at_text!r} is outside the years 1 to 9999 in UTC)") from None
    return Cursor(at=at, id=int(id_text))


_l = event_run_log
# What SQLite orders a line by; spelt as the index spells it (db.SQLITE_AT_ORDER).
_sqlite_at: ColumnElement[Any] = literal_column(SQLITE_AT_ORDER)


def _sqlite_text(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """A column another writer may have filled with text that is not UTF-8, as bytes.

    SQLite's driver fails the whole fetch on one such value; as bytes it is
    decoded line by line, and a bad one is stated on its line.
    """
    return cast(column, LargeBinary)


def _sqlite_number(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """An INTEGER column: text in it (maybe not UTF-8) comes as bytes, numbers as they are."""
    return case((func.typeof(column) == "text", cast(column, LargeBinary)), else_=column)


def page_query(
    *,
    run_id: int,
    kinds: Sequence[str] | None,
    limit: int,
    after: Cursor | None,
    sqlite: bool = False,
    read: str = "lines",
    fits: int = 0,
    before: Cursor | None = None,
) -> Select[Any]:
    """The one statement that reads a page, its values bound (kinds must not be empty).

    On MariaDB `at` is a DATETIME, compared and ordered as it is, through its
    index. On SQLite (`sqlite=True`) it is ordered by its normalised form, and
    the text columns come as bytes (see `_sqlite_text`). `read` is what each
    row holds: "lines", "lines without detail" (NULL in its place), or
    "lines with sizes" (each line's stored detail bytes last, its detail
    NULL where that is more than `fits`).
    """
    statement, values = page_statement(
        run_id=run_id,
        kinds=kinds,
        limit=limit,
        after=after,
        sqlite=sqlite,
        read=read,
        fits=fits,
        before=before,
    )
    return statement.params(values)


def page_statement(
    *,
    run_id: int,
    kinds: Sequence[str] | None,
    limit: int,
    after: Cursor | None,
    sqlite: bool = False,
    read: str = "lines",
    fits: int = 0,
    before: Cursor | None = None,
) -> tuple[Select[Any], dict[str, Any]]:
    """`page_query` as a prebuilt statement and the values for its parameters.

    A page has a few shapes (with or without kinds, which kind of cursor, the
    backend, what it reads), each built once: building a `Select` and its cache key took
    0.25 ms of every read, 0.4 ms with kinds and a cursor (timeit, against a
    prebuilt statement whose key SQLAlchemy memoises), on 50-line pages that
    cost the service 2.5 to 4.5 ms of CPU in all.
    """
    # One more than asked: its presence is what makes hasNextPage exact.
    values: dict[str, Any] = {"run_id": run_id, "limit": limit + 1}
    if read == "lines with sizes":
        values["fits"] = fits
    if kinds is not None:
        values["kinds"] = sorted(set(kinds))
    if before is not None:
        return _newer_statement(values, before, sqlite, kinds is not None, read)
    cursor = None
    if after is not None and after.at is not None:
        cursor = _bind_position(values, after, "after", sqlite)
    return _page_shape(sqlite, kinds is not None, cursor, read), values


# What a page statement reads of each line (see page_query).
PAGE_READS = ("lines", "lines without detail", "lines with sizes")


@functools.cache
def _page_shape(sqlite: bool, by_kinds: bool, cursor: str | None, read: str) -> Select[Any]:
    if read not in PAGE_READS:
        raise ValueError(f"read={read!r} is not one of {PAGE_READS}")
    # NULL in the place of a detail not asked for: the row keeps its shape, so
    # it is read into a line as any other, and the column is never sent.
    detail: ColumnElement[Any] = null().label("detail") if read == "lines without detail" else _l.c.detail
    if sqlite:
        order = _sqlite_at
        if read != "lines without detail":
            detail = _sqlite_text(_l.c.detail).label("detail")
        columns = [
            _l.c.id,
            _l.c.run_id,
            _sqlite_number(_l.c.step_id).label("step_id"),
            _sqlite_text(_l.c.kind).label("kind"),
            _sqlite_number(_l.c.phase).label("phase"),
            detail,
            order.label("at_utc"),  # not `at`: the expression names the column `at`
            _sqlite_text(_l.c.at).label("stored_at"),
        ]
    else:
        order = _l.c.at
        columns = [_l.c.id, _l.c.run_id, _l.c.step_id, _l.c.kind, _l.c.phase, detail, _l.c.at]
    if read == "lines with sizes":
        # Bytes as stored: LENGTH of a BLOB on SQLite, of text on MariaDB (its
        # LENGTH counts bytes, CHAR_LENGTH characters); NULL for no detail.
        # A detail larger than `fits` is left out (NULL), its size still read.
        # No literal in it: every value of a page statement is a named
        # parameter (the raw read on MariaDB binds them by name, see _read).
        size = func.length(detail)
        fits = bindparam("fits", type_=Integer())
        columns[5] = case((size <= fits, detail)).label("detail")
        columns.append(size.label("size"))
    query = (
        select(*columns)
        .where(_l.c.run_id == bindparam("run_id"))
        .order_by(order.desc(), _l.c.id.desc())
        .limit(bindparam("limit", type_=Integer()))
    )
    if by_kinds:
        query = query.where(_l.c.kind.in_(bindparam("kinds", expanding=True)))
    if cursor is not None:
        query = query.where(_older_than(cursor, order, sqlite=sqlite))
    return query


def _older_than(
    cursor: str, order: ColumnElement[Any], *, sqlite: bool, name: str = "after"
) -> ColumnElement[bool]:
    """The lines after the cursor's, newest first by (order, id)."""
    after_id = bindparam(f"{name}_id", type_=Integer())
    if cursor == "null":
        # A NULL `at` (an older table's column may allow it) sorts after
        # every time on MariaDB. `<=>`, not IS NULL: MariaDB reads
        # `at IS NULL` on a NOT NULL DATETIME as "is the zero date".
        return and_(_l.c.at.op("<=>")(null()), _l.c.id < after_id)
    if cursor == "text" or sqlite:
        # Compared as the database compares its own value: a zero date on
        # MariaDB, the normalised text on SQLite.
        value: Any = bindparam(f"{name}_at", type_=String())
    else:
        value = bindparam(f"{name}_at", type_=_l.c.at.type)
    # `at <= x AND (at < x OR id < y)` rather than a row comparison: both
    # MariaDB and SQLite turn the first term into an index range.
    older = and_(order <= value, or_(order < value, and_(order == value, _l.c.id < after_id)))
    if sqlite:
        return older
    # Lines with a NULL `at` come last, after every cursor with a time: still
    # one index range for MariaDB, and nothing at all on a NOT NULL column.
    return or_(older, _l.c.at.op("<=>")(null()))


def _bind_position(values: dict[str, Any], position: Cursor, name: str, sqlite: bool) -> str:
    """Bind a position's `{name}_at` and `{name}_id`; answer its kind: "time", "text" or "null"."""
    values[f"{name}_id"] = position.id
    if isinstance(position.at, str):
        if not (position.at or sqlite):
            return "null"
        values[f"{name}_at"] = position.at
        return "text"
    values[f"{name}_at"] = _as_compared(position.at, sqlite) if position.at is not None else None
    return "time"


def _as_compared(at: datetime.datetime, sqlite: bool) -> Any:
    """A time as the page statements compare it: SQLite's normalised text, MariaDB's DATETIME."""
    return at.isoformat(sep=" ", timespec="milliseconds") if sqlite else at


def _newer_statement(
    values: dict[str, Any], before: Cursor, sqlite: bool, by_kinds: bool, read: str
) -> tuple[Select[Any], dict[str, Any]]:
    window = before.window
    if window is None:
        position = _bind_position(values, before, "before", sqlite)
        return _newer_shape(sqlite, by_kinds, position, None, False, read), values
    floor = None if window.floor is None else _bind_position(values, window.floor, "floor", sqlite)
    settled = window.settled
    values["settled"] = (
        settled.isoformat(sep=" ", timespec="milliseconds")
        if sqlite
        else settled.replace(microsecond=settled.microsecond // 1000 * 1000)
    )
    if window.seen:
        values["seen"] = sorted(line_id for line_id, _ in window.seen)
    return _newer_shape(sqlite, by_kinds, None, floor, bool(window.seen), read), values


@functools.cache
def _newer_shape(
    sqlite: bool, by_kinds: bool, position: str | None, floor: str | None, seen: bool, read: str
) -> Select[Any]:
    """The lines newer than a cursor, oldest first (see `Window` for what a window leaves out)."""
    order = _sqlite_at if sqlite else _l.c.at
    query = _page_shape(sqlite, by_kinds, None, read).order_by(None).order_by(order.asc(), _l.c.id.asc())
    if position is not None:
        query = query.where(_newer_than(position, order, sqlite=sqlite, name="before"))
    if floor is not None:
        query = query.where(_newer_than(floor, order, sqlite=sqlite, name="floor"))
    if position is None:
        settled: Any = bindparam("settled", type_=String() if sqlite else _l.c.at.type)
        query = query.where(order >= settled)
    if seen:
        query = query.where(_l.c.id.not_in(bindparam("seen", expanding=True)))
    return query


def _newer_than(cursor: str, order: ColumnElement[Any], *, sqlite: bool, name: str) -> ColumnElement[bool]:
    """The lines before the cursor's in `_older_than`'s order: newer, by (order, id)."""
    line_id = bindparam(f"{name}_id", type_=Integer())
    if cursor == "null":
        # Every line with a time is newer than one with a NULL `at` (see _older_than).
        return or_(~_l.c.at.op("<=>")(null()), and_(_l.c.at.op("<=>")(null()), _l.c.id > line_id))
    if cursor == "text" or sqlite:
        value: Any = bindparam(f"{name}_at", type_=String())
    else:
        value = bindparam(f"{name}_at", type_=_l.c.at.type)
    # A NULL `at` compares as NULL: such lines are never newer than a time.
    return and_(order >= value, or_(order > value, and_(order == value, _l.c.id > line_id)))


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
) -> Page:
    """One page of a run's lines, newest first by (at, id); with `before`, the lines just newer, oldest first.

    A `before` page's `has_next` says whether newer lines remain past it.

    `detail=False` leaves every line's detail out (None), unread. With
    `max_detail_bytes`, the page ends early, with `has_next`, once its lines'
    stored details would come to more than that many bytes; its first line
    is returned whatever its size, so that paging always goes on.

    One statement, whatever the budget. When `limit + 1` lines of
    `largest_detail` bytes each (the most a writer may store) could pass
    `max_detail_bytes`, that statement also reads each line's detail size,
    and leaves out any detail larger than the budget's share of one line
    (`max_detail_bytes // (limit + 1)`): what it fetches stays within the
    budget, and the page is cut on the sizes. Only a page that keeps a
    detail left out reads it in a second statement, by line id. Ordinary
    details fit their share (4 KiB for a 2,000-line page under 8 MiB), so
    pages of them take one round trip. Reading the sizes in a statement of
    their own first cost every 2,000-line page a round trip and 2,001 sizes:
    its latency was 1.84x the physical floor's, 1.55x with one statement
    (bench's RunLog 2,000-line case, both services side by side in
    alternating rounds on a loaded machine). The database still reads every
    detail of the page to size it: 2,000 details of 64 KiB took MariaDB
    about 0.3 s, off the event loop.
    """
    if kinds is not None and not kinds:
        return Page(lines=[], has_next=False)
    sqlite = engine.dialect.name == "sqlite"
    if not detail or max_detail_bytes is None or (limit + 1) * largest_detail <= max_detail_bytes:
        return await _read_lines(
            engine, run_id, kinds, limit, after, before, sqlite, detail, max_detail_bytes
        )
    if max_detail_bytes <= 0:
        # The request's budget is spent: its first line is all a page returns.
        return await _read_lines(engine, run_id, kinds, 1, after, before, sqlite, detail, max_detail_bytes)
    fits = max_detail_bytes // (limit + 1)
    while True:
        statement, values = page_statement(
            run_id=run_id,
            kinds=kinds,
            limit=limit,
            after=after,
            sqlite=sqlite,
            read="lines with sizes",
            fits=fits,
            before=before,
        )
        rows = await _read(engine, statement, values)
        sizes = [row[-1] or 0 for row in rows[:limit]]
        kept = _fitting(sizes, max_detail_bytes)
        has_next = len(rows) > kept
        kept_rows = [row[:-1] for row in rows[:kept]]  # the size, last, is not part of a line
        lines = _sqlite_lines(kept_rows) if sqlite else _lines(kept_rows)
        left_out = [line.id for line, size in zip(lines, sizes[:kept], strict=True) if size > fits]
        if left_out:
            found = dict(await _read(engine, _details_statement(sqlite), {"ids": left_out}))
            if len(found) < len(left_out):
                continue  # lines deleted since the page was read (pruning): read it again
            lines = [line._replace(detail=found[line.id]) if line.id in found else line for line in lines]
        return Page(lines=lines, has_next=has_next, detail_bytes=sum(sizes[:kept]))


async def _read_lines(
    engine: AsyncEngine,
    run_id: int,
    kinds: Sequence[str] | None,
    limit: int,
    after: Cursor | None,
    before: Cursor | None,
    sqlite: bool,
    detail: bool,
    max_detail_bytes: int | None,
) -> Page:
    """A page read in one statement, cut on the sizes of the details it fetched."""
    read = "lines" if detail else "lines without detail"
    statement, values = page_statement(
        run_id=run_id, kinds=kinds, limit=limit, after=after, sqlite=sqlite, read=read, before=before
    )
    rows = await _read(engine, statement, values)
    lines = _sqlite_lines(rows[:limit]) if sqlite else _lines(rows[:limit])
    if not detail:
        return Page(lines=lines, has_next=len(rows) > limit)
    sizes = [_stored_bytes(line.detail) for line in lines]
    kept = len(lines) if max_detail_bytes is None else _fitting(sizes, max_detail_bytes)
    return Page(lines=lines[:kept], has_next=len(rows) > kept, detail_bytes=sum(sizes[:kept]))


@functools.cache
def _details_statement(sqlite: bool) -> Select[Any]:
    """The details of the lines `ids`, by line id (the ones a page statement left out)."""
    detail = _sqlite_text(_l.c.detail) if sqlite else _l.c.detail
    return select(_l.c.id, detail.label("detail")).where(_l.c.id.in_(bindparam("ids", expanding=True)))


# ── cursors that remember late commits ───────────────────────────────────────
# A line is stamped with `at` before its commit, and a commit can be slow (a
# grouped INSERT, another process): a line can land behind lines a reader
# already has. A cursor of a line older than `settled` (the read's time less
# the longest a commit can lag its `at`) is its plain position, as before; a
# cursor of a recent line also carries a `Window`, and `before` reads from it
# find a late line however far behind it landed.


def settled_before(late_window: float) -> datetime.datetime:
    """Now less `late_window` seconds, naive UTC to the millisecond: lines stamped earlier have committed."""
    return utc_now_millis() - datetime.timedelta(seconds=late_window)


def _naive(at: datetime.datetime) -> datetime.datetime:
    return at.replace(tzinfo=None) if at.tzinfo is not None else at


def page_cursors(
    lines: Sequence[Line], *, has_next: bool, settled: datetime.datetime, only_ends: bool = False
) -> list[str]:
    """The cursors of a page read newest first (no cursor, or `after`), in its order.

    A recent line's window names the page's recent lines at or before it,
    and its floor is the page's end: a late line that lands beyond the page's
    end is the next `after` page's, not a `before` read's. On the last page
    there is no floor, so a late line there is found by `before`.
    With `only_ends`, the lines between the first and the last get ''.
    """
    floor = None
    if has_next and lines:
        last = lines[-1]
        at: datetime.datetime | str = last.position if last.position is not None else _naive(last.at)
        floor = Cursor(at=at, id=last.id - 1)
    wanted = set(range(len(lines))) if not only_ends else ({0, len(lines) - 1} if lines else set())
    cursors = [""] * len(lines)
    # From the page's end up: line i's window is the recent lines from it to the end.
    text = _WindowText(settled, floor)
    # Lines read from the database hold aware times: compared as they are,
    # rather than made naive one by one (a new datetime for every line).
    settled_utc = settled.replace(tzinfo=datetime.UTC)
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        at = line.at
        recent = line.position is None and (
            at >= settled_utc if at.tzinfo is datetime.UTC else _naive(at) >= settled
        )
        if recent:
            text.add(line.id, _naive(line.at))
        if i in wanted:
            cursors[i] = text.cursor(line) if recent else encode_cursor(line)
    return cursors


def newer_cursors(lines: Sequence[Line], *, before: Cursor, settled: datetime.datetime) -> list[str]:
    """The cursors of a `before` page (read oldest first), in its order.

    Behind line j: what was behind `before`, and the page's lines up to j.
    """
    window = before.window
    floor: Cursor | None
    carried: tuple[tuple[int, datetime.datetime], ...]
    if window is None:
        floor, carried, newest = before, (), settled
    else:
        floor, carried = window.floor, window.seen
        newest = max(settled, window.settled)
    cursors: list[str] = []
    # The usual case, a line stamped since `newest`: the window of `newest`,
    # grown a line at a time (see _WindowText).
    text = _WindowText(newest, floor)
    for line_id, seen_at in sorted(carried):
        if seen_at >= newest:
            text.add(line_id, seen_at)
    for j, line in enumerate(lines):
        at_j = None if line.position is not None else _naive(line.at)
        if at_j is not None and at_j >= newest:
            text.add(line.id, at_j)
            cursors.append(text.cursor(line))
            continue
        if at_j is None or (at_j < settled and all((a, i) < (at_j, line.id) for i, a in carried)):
            # Old enough that no line can still land at or before it, and
            # nothing delivered earlier is newer: its position says it all.
            cursors.append(encode_cursor(line))
            continue
        settled_j = min(newest, at_j)
        seen = [(i, a) for i, a in carried if a >= settled_j]
        seen += [
            (other.id, _naive(other.at))
            for other in lines[: j + 1]
            if other.position is None and _naive(other.at) >= settled_j
        ]
        cursors.append(encode_cursor(line, Window(settled=settled_j, floor=floor, seen=tuple(seen))))
    return cursors


async def cursor_now(
    engine: AsyncEngine, *, run_id: int, kinds: Sequence[str] | None, settled: datetime.datetime
) -> str:
    """A cursor with every line written so far behind it: a `before` read from it waits for new lines."""
    seen: list[tuple[int, datetime.datetime]] = []
    if kinds is None or kinds:
        sqlite = engine.dialect.name == "sqlite"
        values: dict[str, Any] = {"run_id": run_id, "settled": _as_compared(settled, sqlite)}
        if kinds is not None:
            values["kinds"] = sorted(set(kinds))
        for line_id, at in await _read(engine, _recent_shape(sqlite, kinds is not None), values):
            if isinstance(at, str):
                at = datetime.datetime.fromisoformat(at)
            seen.append((line_id, _naive(at)))
    return encode_cursor(Cursor(at=None, id=0), Window(settled=settled, seen=tuple(seen)))


async def count_recent(
    engine: AsyncEngine, *, run_ids: Sequence[int], earlier: datetime.datetime, since: datetime.datetime
) -> dict[int, tuple[int, int]]:
    """Per run, how many lines are stamped at or after `earlier`, and how many at or after `since`.

    One query for all the runs, an index range on (run_id, at) each; a run
    with no such line is left out.
    """
    if not run_ids:
        return {}
    sqlite = engine.dialect.name == "sqlite"
    values = {
        "runs": sorted(set(run_ids)),
        "earlier": _as_compared(earlier, sqlite),
        "since": _as_compared(since, sqlite),
    }
    rows = await _read(engine, _count_shape(sqlite), values)
    return {run_id: (int(counted), int(recent or 0)) for run_id, counted, recent in rows}


@functools.cache
def _count_shape(sqlite: bool) -> Select[Any]:
    order = _sqlite_at if sqlite else _l.c.at
    kind: Any = String() if sqlite else _l.c.at.type
    earlier, since = bindparam("earlier", type_=kind), bindparam("since", type_=kind)
    return (
        select(_l.c.run_id, func.count(), func.count(case((order >= since, _l.c.id))))
        .where(_l.c.run_id.in_(bindparam("runs", expanding=True)), order >= earlier)
        .group_by(_l.c.run_id)
    )


@functools.cache
def _recent_shape(sqlite: bool, by_kinds: bool) -> Select[Any]:
    """The ids and times of a run's lines stamped at or after `settled`."""
    order = _sqlite_at if sqlite else _l.c.at
    settled: Any = bindparam("settled", type_=String() if sqlite else _l.c.at.type)
    query = select(_l.c.id, order.label("at_utc")).where(_l.c.run_id == bindparam("run_id"), order >= settled)
    if by_kinds:
        query = query.where(_l.c.kind.in_(bindparam("kinds", expanding=True)))
    return query


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


def _lines(rows: Sequence[Any]) -> list[Line]:
    """MariaDB's rows as lines: a row as this service writes it on the fast path."""
    utc, moment = datetime.UTC, datetime.datetime
    low, high = PHASE_MIN, PHASE_MAX
    # Unpacked in the order the page statement selects: by position is several times
    # cheaper than by name, on every line of every page.
    return [
        Line(line_id, run, step, kind, phase, detail, at.replace(tzinfo=utc))
        if type(at) is moment
        and type(kind) is str
        and type(detail) is not bytes
        and (phase is None or (type(phase) is int and low <= phase <= high))
        else _odd_line(line_id, run, step, kind, phase, detail, at, at)
        for line_id, run, step, kind, phase, detail, at in rows
    ]


def _sqlite_lines(rows: Sequence[Any]) -> list[Line]:
    """SQLite's rows as lines: `at` is the normalised text, text columns are bytes."""
    lines = []
    parse, utc, moment = datetime.datetime.fromisoformat, datetime.UTC, datetime.datetime
    low, high = PHASE_MIN, PHASE_MAX
    for line_id, run, step, kind, phase, detail, at, stored_at in rows:
        try:
            when = parse(at).replace(tzinfo=utc) if at else at  # '' holds no time
        except ValueError:  # a date SQLite reads and Python does not (`2026-02-30`)
            when = at
        if (
            type(when) is moment
            and type(kind) is bytes
            and kind.isascii()  # every kind's name is; anything else is looked at closely
            and (step is None or type(step) is int)
            and (phase is None or (type(phase) is int and low <= phase <= high))
        ):
            lines.append(Line(line_id, run, step, kind.decode(), phase, detail, when))
        else:
            lines.append(_odd_line(line_id, run, step, kind, phase, detail, when, stored_at))
    return lines


def _odd_line(
    line_id: int, run: int, step: Any, kind: Any, phase: Any, detail: Any, at: Any, stored_at: Any
) -> Line:
    """A row as another writer left it: stand-ins where needed, and what was wrong.

    `at` is a datetime if the row holds a time, else the text the database
    orders it by (or None); `stored_at` is what the row holds.
    """
    problems = []
    position = None
    if type(at) is datetime.datetime:
        at = at if at.tzinfo else at.replace(tzinfo=datetime.UTC)
    else:
        position = "" if at is None else str(at)
        problems.append(
            "stored at is null" if stored_at is None else f"stored at {_shown(stored_at)} is not a time"
        )
        at = STAND_IN_AT
    if type(kind) is not str:
        if kind is None:
            problems.append("stored kind is null")
            kind = ""
        else:
            kind, problem = _text(kind)
            if problem:
                problems.append(f"stored kind {problem}")
    if type(step) is bytes:
        step, problem = _text(step)
        if problem:
            problems.append(f"stored stepId {problem}")
    if phase is not None and not (type(phase) is int and PHASE_MIN <= phase <= PHASE_MAX):
        problems.append(f"stored phase {_shown(phase)} is not an integer from {PHASE_MIN} to {PHASE_MAX}")
        phase = None
    return Line(line_id, run, step, kind, phase, detail, at, "; ".join(problems) or None, position)


def _text(value: Any) -> tuple[str, str | None]:
    """Stored bytes as text, and what was wrong if they are not UTF-8."""
    if type(value) is not bytes:
        return str(value), None
    try:
        return value.decode(), None
    except UnicodeDecodeError as exc:
        return value.decode(errors="replace"), f"is not UTF-8 (byte {exc.start})"


def _shown(value: Any) -> str:
    """A stored value for a problem's text: quoted if text, and never long."""
    if type(value) is bytes:
        value = value.decode(errors="replace")
    shown = repr(value)
    return shown if len(shown) <= 60 else f"{shown[:60]}... ({len(shown)} characters)"


async def _read(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None = None
) -> Sequence[Any]:
    """The rows of one read, retried once on a connection the server had closed.

    The pool does not ping a connection before handing it out (db.py), so a
    connection closed by the server since its last use (wait_timeout, a
    restart, KILL) fails on first use. The pool's connections are then marked
    stale (as SQLAlchemy does on a disconnect it sees); a read changes nothing,
    so it is sent again, once, on a fresh one. Any other failure is the
    caller's to handle.
    """
    raw = None
    direct, spans = _direct(engine)
    if direct:
        raw = _raw_statement(engine, statement, values)
    try:
        if raw is not None:
            return await _read_raw(engine, raw, values, spans)
        async with engine.connect() as conn:
            return (await conn.execute(statement, values)).all()
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    if raw is not None:
        return await _read_raw(engine, raw, values, spans)
    async with engine.connect() as conn:
        return (await conn.execute(statement, values)).all()


def _direct(engine: AsyncEngine) -> tuple[bool, tracing.SqlSpans | None]:
    """Whether statements may go to the driver directly, past SQLAlchemy, and the spans to make of them.

    A listener to the statements (a test counting round trips) sees them only
    through SQLAlchemy's execution: it keeps them. The OpenTelemetry tracer
    alone does not (gql/tracing.py): the direct path makes its spans.
    `dispatch` is SQLAlchemy's event registry; no public call says whether it
    is empty.
    """
    if engine.dialect.name == "sqlite":
        return False, None
    if not engine.sync_engine.dispatch.before_cursor_execute:
        return True, None
    spans = tracing.direct_spans(engine.sync_engine)
    return spans is not None, spans


class _RawStatement(NamedTuple):
    sql: str
    # Where each positional parameter comes from: a value's name, and its
    # index when the value is an expanded list (`IN (...)`).
    sources: tuple[tuple[str, int | None], ...]


def _raw_statement(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None
) -> _RawStatement | None:
    """`statement` as the driver's SQL for these values' shape, or None where it needs SQLAlchemy."""
    # Each value's name, and a list's length: `IN (...)` is written out per length.
    shape = tuple((k, len(v) if type(v) is list else -1) for k, v in values.items()) if values else ()
    return _compiled_raw(engine.sync_engine.dialect, statement, shape)


@functools.lru_cache(maxsize=1024)
def _compiled_raw(
    dialect: Any, statement: Executable, shape: tuple[tuple[str, int], ...]
) -> _RawStatement | None:
    """Compile once per statement and list sizes: what SQLAlchemy would send, with no types to apply.

    Only for statements whose parameters and columns need no conversion by
    SQLAlchemy (none on MariaDB for what the reads select); anything else
    keeps SQLAlchemy's execution.
    """
    sample = {name: [0] * size if size >= 0 else None for name, size in shape}
    bound: Any = statement.params(sample) if sample and isinstance(statement, Select) else statement
    compiled = bound.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    if dialect.paramstyle != "format":
        return None
    for bind in compiled.binds.values():
        if bind.type.bind_processor(dialect) is not None:
            return None
    if isinstance(statement, Select):
        for column in statement.selected_columns:
            if column.type.result_processor(dialect, None) is not None:
                return None
    sources: list[tuple[str, int | None]] = []
    names = {name for name, _ in shape}
    lists = {name for name, size in shape if size >= 0}
    for name in compiled.positiontup or ():
        base, _, index = name.rpartition("_")
        if name not in lists and base in lists and index.isdigit():
            sources.append((base, int(index) - 1))
        elif name in names:
            sources.append((name, None))
        else:
            # A value the statement holds itself (a literal such as
            # COALESCE's 0), not one of `values`: SQLAlchemy binds it.
            return None
    return _RawStatement(compiled.string, tuple(sources))


async def _raw_checkout(engine: AsyncEngine) -> Any:
    """The pool's own connection (`AsyncEngine.raw_connection`), failing as engine.connect() fails."""
    dialect = engine.dialect
    try:
        return await engine.raw_connection()
    except dialect.loaded_dbapi.Error as exc:
        raise sa_exc.DBAPIError.instance(
            None,
            None,
            exc,
            dialect.loaded_dbapi.Error,
            connection_invalidated=dialect.is_disconnect(exc, None, None),
        ) from exc


class _Held:
    """The pooled connection the reads of one engine take in turn, within `one_connection`."""

    __slots__ = ("busy", "done", "engine", "pooled")

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.pooled: Any = None
        self.busy = False  # a read is on it: another read (another task) takes its own
        self.done = False  # `one_connection` has ended: a read still on it puts it back


_held: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("store_held", default=None)


class one_connection:  # used as a context manager, named as one
    """Within it, this task's direct reads of `engine` take one pooled connection, put back at its end.

    A page and its blocking runs are two reads: one checkout and return
    instead of two bought 1.045 to 1.061x less CPU per 50-line RunLog page
    (one process, 8 clients, alternating rounds with and without, two
    runs on a loaded machine). Only
    what `_read_raw` runs shares it, one read at a time (a read while
    another is on it takes its own); a failed or cancelled read leaves it, as
    it would a connection of its own, and the next read takes a fresh one.
    Not for a call that waits between its reads (the long poll): the
    connection would be held from the pool meanwhile.
    """

    __slots__ = ("_held", "_token")

    def __init__(self, engine: AsyncEngine) -> None:
        self._held = _Held(engine)

    async def __aenter__(self) -> None:
        self._token = _held.set(self._held)

    async def __aexit__(self, *_: object) -> None:
        _held.reset(self._token)
        held = self._held
        held.done = True
        pooled, held.pooled = held.pooled, None
        if pooled is not None and not held.busy:
            await greenlet_spawn(pooled.close)


async def _read_raw(
    engine: AsyncEngine, raw: _RawStatement, values: dict[str, Any] | None, spans: tracing.SqlSpans | None
) -> Sequence[Any]:
    """Run `raw` on a pooled aiomysql connection, taken from the pool as the driver's own.

    Buys 1.07 to 1.10x less CPU per 50-line RunLog page (SQLAlchemy's
    per-statement execution and its greenlet adapter skipped), measured as
    time.process_time over 2,000 shipped RunLog requests, 8 at a time,
    through the ASGI app on MariaDB (three alternating runs). The connection
    is the pool's (`AsyncEngine.raw_connection`), not an `AsyncConnection`
    around it: a 50-line page's read and its blocking runs' read took 3.37 ms
    of CPU through `engine.connect()`, 2.93 ms this way (median of 12
    alternating rounds of 300, in one process, on a loaded machine: the
    ratio, not the figures). What SQLAlchemy would do on a
    failure is kept: a disconnect invalidates the connection and marks the
    pool's others stale, any failure is raised as SQLAlchemy's DBAPIError,
    and a connection left mid-statement (cancelled by the read's timeout) is
    thrown away.
    """
    params = (
        [values[name] if index is None else values[name][index] for name, index in raw.sources]
        if values
        else None
    )
    dialect = engine.dialect
    held = _held.get()
    if held is not None and (held.engine is not engine or held.busy or held.done):
        held = None  # another engine's (a replica's), or on another read: a connection of its own
    pooled = held.pooled if held is not None and held.pooled is not None else await _raw_checkout(engine)
    if held is not None:
        held.pooled = pooled
        held.busy = True
    # Back to the pool in a greenlet: a connection past the pool's size is
    # closed there, which the async driver does only inside one.
    put_back: Callable[[], None] = pooled.close
    kept = held is not None  # left held, for the next read, unless this one fails
    driver: Any = pooled.driver_connection
    try:
        if spans is not None:
            with spans.statement(raw.sql):
                return await _fetch(driver, raw.sql, params)
        return await _fetch(driver, raw.sql, params)
    except Exception as exc:
        kept = False
        if not isinstance(exc, dialect.loaded_dbapi.Error):
            put_back = functools.partial(pooled.invalidate, exc)
            raise
        disconnect = dialect.is_disconnect(exc, None, None)
        if disconnect:
            mark_pool_stale(engine)
            put_back = functools.partial(pooled.invalidate, exc)
        raise sa_exc.DBAPIError.instance(
            raw.sql, params, exc, dialect.loaded_dbapi.Error, connection_invalidated=disconnect
        ) from exc
    except BaseException:
        # Cancelled mid-statement: what is left on the wire is unknown.
        kept = False
        put_back = pooled.invalidate
        raise
    finally:
        if held is not None:
            held.busy = False
            if not kept or held.done:
                kept = False
                if held.pooled is pooled:
                    held.pooled = None
        if not kept:
            await greenlet_spawn(put_back)  # invalidate() checks the connection in as well


async def _fetch(driver: Any, sql: str, params: list[Any] | None) -> Sequence[Any]:
    async with driver.cursor() as cursor:
        await cursor.execute(sql, params)
        return await cursor.fetchall()  # type: ignore[no-any-return]


# ── writing lines ────────────────────────────────────────────────────────────
# A write's answer must be exact: `true` once stored, `false` only when nothing
# was stored. So every failure below says which of three it is: the line was
# never sent (NotStored), the database answered with an error and the
# statement rolled back (NotStored, `refused_by_database`), or the statement
# was sent and no answer came back (OutcomeUnknown: it may have committed).

# Least time worth starting a statement with: a line with less left is not
# sent at all, since its caller could not wait for the commit.
MIN_STATEMENT_SECONDS = 0.05
# How long past a line's deadline its caller waits for an answer the database
# owes it. The statement itself is bounded on the server to end by the
# deadline; this covers the round trip and a slow commit, and is the one
# bound left when the database stops answering at all.
ANSWER_GRACE_SECONDS = 1.0


class NotStored(Exception):
    """Nothing of the line (or batch) was stored; `refused_by_database` when the database said no."""

    def __init__(self, reason: str, *, refused_by_database: bool = False, transient: bool = True) -> None:
        super().__init__(reason)
        self.refused_by_database = refused_by_database
        # A refusal about time or locks: trying the same lines again now would
        # only spend time the callers do not have.
        self.transient = transient


class OutcomeUnknown(Exception):
    """The statement was sent and no answer came back: the line may have been stored."""


class KeyReused(Exception):
    """An idempotency key already stored a different line of the same run."""


def _bound(engine: AsyncEngine, seconds: float) -> str | None:
    """MariaDB's statement bound for `seconds` left, in tenths (rounded down: never past the deadline)."""
    if not getattr(engine.dialect, "is_mariadb", False):
        return None
    return f"{max(int(seconds * 10) / 10, MIN_STATEMENT_SECONDS):.2f}"


@functools.lru_cache(maxsize=512)
def _insert_text(count: int, bound: str | None) -> TextClause:
    """The INSERT of `count` lines, bounded on MariaDB's side to `bound` seconds.

    Written as text rather than `insert(table)` with a list: the driver would
    run a list as many statements, and MariaDB's `SET STATEMENT ... FOR`
    must come before the INSERT, where SQLAlchemy has no place for a prefix.
    `max_statement_time` ends the statement (error 1969, rolled back) when a
    lock or anything else holds it past the bound; measured here on MariaDB
    10.11 against `LOCK TABLES ... WRITE` and a row lock alike (1.0 s bound,
    ended at 1.0 s). `lock_wait_timeout` and `innodb_lock_wait_timeout` end
    only lock waits, in whole seconds (1 at least), so they cannot hold a
    statement to the 3 s deadline's last fraction. MySQL has no `SET
    STATEMENT`: there the statement is bounded only by the caller's wait,
    and a statement still running then is answered `false` and logged as an
    unknown outcome (it may still commit). SQLite's
    bound is its busy timeout, set around the statement (`_sqlite_bounded`).
    One object per (size, bound in tenths), so SQLAlchemy compiles each once:
    building and compiling the text was about 250 us of CPU per batch.
    """
    rows = ", ".join(f"(:r{i}, :s{i}, :k{i}, :p{i}, :d{i}, :a{i})" for i in range(count))
    # Only our own table name and placeholders: every value is a bound parameter.
    sql = f"INSERT INTO {_l.name} (run_id, step_id, kind, phase, detail, at) VALUES {rows}"  # noqa: S608
    if bound is not None:
        sql = f"SET STATEMENT max_statement_time={bound} FOR {sql}"
    return text(sql).bindparams(*(bindparam(f"a{i}", type_=_l.c.at.type) for i in range(count)))


@functools.lru_cache(maxsize=512)
def _raw_insert_sql(count: int, bound: str | None) -> str:
    """`_insert_text` as the driver takes it (`%s` placeholders, the values in column order)."""
    rows = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * count)
    sql = f"INSERT INTO {_l.name} (run_id, step_id, kind, phase, detail, at) VALUES {rows}"  # noqa: S608
    return sql if bound is None else f"SET STATEMENT max_statement_time={bound} FOR {sql}"


def _insert(
    engine: AsyncEngine, lines: Sequence[NewLine], at: datetime.datetime, seconds: float
) -> tuple[TextClause, dict[str, Any]]:
    """The statement and parameters that store `lines`, bounded to `seconds` (see `_insert_text`)."""
    params: dict[str, Any] = {}
    for i, line in enumerate(lines):
        params[f"r{i}"] = line.run_id
        params[f"s{i}"] = line.step_id
        params[f"k{i}"] = line.kind
        params[f"p{i}"] = line.phase
        params[f"d{i}"] = line.detail
        params[f"a{i}"] = at
    return _insert_text(len(lines), _bound(engine, seconds)), params


def answered_by_database(exc: BaseException, dialect_name: str) -> bool:
    """Whether `exc` is the database's own answer to a statement (so it rolled back).

    MySQL's client errors (2000 to 2999: lost connection, gone away) are the
    driver's, not the server's: the statement may have run. SQLite runs in the
    process, so every error it raises is its answer.
    """
    if not isinstance(exc, sa_exc.DBAPIError) or exc.connection_invalidated:
        return False
    if dialect_name == "sqlite":
        return True
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    code = args[0] if args else None
    return isinstance(code, int) and not 2000 <= code < 3000


@dataclass
class _Progress:
    """How far a write got: what its failure means depends on it."""

    sent: bool = False  # a statement of it reached the driver
    committing: bool = False  # its COMMIT was sent (a keyed write)
    done: bool = False  # the database answered that it was stored


class HeldConnection:
    """A pooled connection kept from one batch INSERT to the next (`insert_lines`' `held`).

    A writer that has another batch waiting when one is answered sends it on
    the same connection: a checkout and a return to the pool cost about 29 us
    of CPU (the pool's bookkeeping, each in a greenlet), a third of what the
    INSERT's own round trip costs. It is kept only after an INSERT it
    answered, and given back after MAX_HELD_BATCHES batches (so that
    pool_recycle applies at the next checkout), once the pool has thrown a
    connection away or been marked stale since (`db.pool_generation`: the
    pool would have replaced this one), and by `release`, which its owner
    calls when no batch is left to send; a failure gives it back (or throws
    it away) as before.
    """

    MAX_HELD_BATCHES = 100

    def __init__(self) -> None:
        self.pooled: Any = None
        self.batches = 0  # sent on the connection kept
        self.generation = 0  # the pool's, when it was kept

    async def take(self, engine: AsyncEngine) -> Any:
        """The connection kept, now the caller's; None when there is none to use."""
        pooled, self.pooled = self.pooled, None
        if pooled is not None and (
            self.batches >= self.MAX_HELD_BATCHES or self.generation != pool_generation(engine)
        ):
            await self.release(pooled)
            return None
        return pooled

    def keep(self, pooled: Any, engine: AsyncEngine) -> None:
        """Keep `pooled`, which has just answered a batch, for the next one."""
        self.generation = pool_generation(engine)  # known good now
        self.pooled = pooled
        self.batches += 1

    async def release(self, pooled: Any = None) -> None:
        """Give the connection kept (or `pooled`) back to the pool."""
        pooled = pooled or self.pooled
        self.pooled = None
        self.batches = 0
        if pooled is not None:
            await greenlet_spawn(pooled.close)


async def insert_lines(
    engine: AsyncEngine, lines: Sequence[NewLine], *, deadline: float, held: HeldConnection | None = None
) -> None:
    """Store `lines` in one INSERT and one commit, in autocommit, all stamped with now.

    `deadline` is the event loop's time by which the statement must have
    ended. No statement is started with less than MIN_STATEMENT_SECONDS left;
    the database is told to end it by the deadline; the answer is awaited
    until ANSWER_GRACE_SECONDS past it. Raises NotStored or OutcomeUnknown.
    With `held`, the INSERT goes on the connection it keeps, if any, and the
    connection is kept there afterwards (on MariaDB; SQLite's go back).
    """
    # A listener to the statements (a test counting round trips) sees them
    # only through SQLAlchemy's execution, as for the reads (`_direct`).
    direct, spans = _direct(engine)
    if direct:
        await _retrying_conflicts(
            deadline, functools.partial(_insert_raw_once, engine, lines, deadline, spans, held)
        )
        return
    # Autocommit: the INSERT is its own transaction, one round trip, with no
    # BEGIN or COMMIT of its own.
    await _bounded(engine, deadline, functools.partial(_run_insert, lines), isolation_level="AUTOCOMMIT")


async def _insert_raw_once(
    engine: AsyncEngine,
    lines: Sequence[NewLine],
    deadline: float,
    spans: tracing.SqlSpans | None,
    held: HeldConnection | None = None,
) -> None:
    """`_bounded_once` for `insert_lines` on MariaDB, on the pool's own aiomysql connection.

    The same bounds, in the same order, and the same account of a failure
    (`_account`); what it skips is SQLAlchemy's `AsyncConnection` around the
    pooled connection (its start, the autocommit check through it, its
    close: each a greenlet round trip), as the reads do (`_read_raw`). The
    driver's connection inside an `AsyncConnection` bought 1.07 to 1.19x less
    CPU per WriteNote, 8 at a time; taking it from the pool without one took
    2024 us of server CPU per WriteNote down to 1633 (8 clients over HTTP,
    8 alternating rounds against the floor, load average 3.6 to 4.2). A
    connection taken from the pool autocommits (db.create_engine); one that
    does not is put back and the write goes through SQLAlchemy, which sets
    autocommit for it. A disconnect invalidates the connection and marks the
    pool's others stale; a connection left mid-statement (cancelled by the
    deadline) is thrown away. With `held`, the connection it keeps is used
    instead of a checkout, and one that stored the batch is kept there.
    """
    loop = asyncio.get_running_loop()
    dialect = engine.dialect
    progress = _Progress()
    through_sqlalchemy = False
    try:
        async with asyncio.timeout_at(deadline + ANSWER_GRACE_SECONDS):
            pooled = None if held is None else await held.take(engine)
            if pooled is None:
                async with asyncio.timeout_at(deadline):
                    pooled = await _raw_checkout(engine)
            # Back to the pool in a greenlet: a connection past the pool's
            # size is closed there, which the async driver does only inside one.
            put_back: Callable[[], None] | None = pooled.close
            driver: Any = pooled.driver_connection
            try:
                seconds = deadline - loop.time()
                if seconds < MIN_STATEMENT_SECONDS:
                    raise NotStored("the line's deadline came before a database connection was free")
                if not driver.get_autocommit():
                    through_sqlalchemy = True
                    return
                sql = _raw_insert_sql(len(lines), _bound(engine, seconds))
                at = utc_now_millis()
                values = [
                    v for ln in lines for v in (ln.run_id, ln.step_id, ln.kind, ln.phase, ln.detail, at)
                ]
                progress.sent = True
                try:
                    if spans is not None:
                        with spans.statement(sql):
                            await _fetch(driver, sql, values)
                    else:
                        await _fetch(driver, sql, values)
                except dialect.loaded_dbapi.Error as exc:
                    disconnect = dialect.is_disconnect(exc, None, None)
                    if disconnect:
                        mark_pool_stale(engine)
                        put_back = functools.partial(pooled.invalidate, exc)
                    raise sa_exc.DBAPIError.instance(
                        sql, values, exc, dialect.loaded_dbapi.Error, connection_invalidated=disconnect
                    ) from exc
                progress.done = True
                if held is not None:
                    held.keep(pooled, engine)
                    put_back = None
            except NotStored:
                raise
            except Exception as exc:
                if not isinstance(exc, sa_exc.DBAPIError):
                    put_back = functools.partial(pooled.invalidate, exc)
                raise
            except BaseException:
                # Cancelled mid-statement: what is left on the wire is unknown.
                put_back = pooled.invalidate
                raise
            finally:
                if put_back is not None:
                    await greenlet_spawn(put_back)  # invalidate() checks the connection in as well
    except Exception as exc:
        _account(exc, progress, dialect.name, transaction=False)
        return
    if through_sqlalchemy:
        await _bounded_once(
            engine, deadline, functools.partial(_run_insert, lines), isolation_level="AUTOCOMMIT"
        )


async def _run_insert(
    lines: Sequence[NewLine], conn: AsyncConnection, seconds: float, progress: _Progress
) -> None:
    statement, params = _insert(conn.engine, lines, utc_now_millis(), seconds)
    progress.sent = True
    await conn.execute(statement, params)
    progress.done = True


async def insert_keyed(
    engine: AsyncEngine, line: NewLine, *, key_digest: str, line_digest: str, deadline: float
) -> bool:
    """Store `line` under an idempotency key; False when the key already stored this same line.

    The key and the line are written in one transaction, so either both are
    stored or neither: a retry after a lost answer finds the key and stores
    nothing. Raises KeyReused when the key stored a different line of this
    run, and NotStored or OutcomeUnknown as `insert_lines` does.
    """
    keys = event_run_log_keys
    outcome: list[bool] = []

    async def run(conn: AsyncConnection, seconds: float, progress: _Progress) -> None:
        now = utc_now_millis()
        key_statement = _key_text(_bound(conn.engine, seconds))
        progress.sent = True
        try:
            # The key first: a second writer with the same key waits here on
            # the first one's row lock, then finds the key once it commits.
            await conn.execute(key_statement, {"r": line.run_id, "k": key_digest, "l": line_digest, "c": now})
        except sa_exc.IntegrityError:
            await conn.rollback()
            stored_digest = (
                await conn.execute(
                    select(keys.c.line_digest).where(
                        keys.c.run_id == line.run_id, keys.c.key_digest == key_digest
                    )
                )
            ).scalar()
            await conn.rollback()
            if stored_digest is None:
                raise
            if stored_digest != line_digest:
                raise KeyReused("its idempotency key already stored a different line of this run") from None
            outcome.append(False)
            progress.done = True
            return
        # The line's own bound is what is left of the deadline after the key.
        left = max(deadline - asyncio.get_running_loop().time(), MIN_STATEMENT_SECONDS)
        # Stamped now, not before the key: the key may have waited for another
        # writer's lock on it, and a line stamped before the wait would land
        # behind lines committed meanwhile, between two lines a reader paging
        # back from the newest has already read: no page would show it.
        statement, params = _insert(conn.engine, [line], utc_now_millis(), left)
        await conn.execute(statement, params)
        progress.committing = True
        await conn.commit()
        outcome.append(True)
        progress.done = True

    # Whatever the engine's default, the key and the line need one real
    # transaction: the database's own default level gives one.
    await _bounded(engine, deadline, run, isolation_level=None)
    return outcome[0]


@functools.lru_cache(maxsize=64)
def _key_text(bound: str | None) -> TextClause:
    keys = event_run_log_keys
    sql = (  # our own table name; every value is a bound parameter
        f"INSERT INTO {keys.name} (run_id, key_digest, line_digest, created_at) VALUES (:r, :k, :l, :c)"  # noqa: S608
    )
    if bound is not None:
        sql = f"SET STATEMENT max_statement_time={bound} FOR {sql}"
    return text(sql).bindparams(bindparam("c", type_=keys.c.created_at.type))


async def _bounded(
    engine: AsyncEngine,
    deadline: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
    *,
    isolation_level: str | None,
) -> None:
    """`_bounded_once`, tried again while a deadlock rolled the write back whole and the deadline allows.

    A deadlock (1213) is the database's answer that it rolled the statement
    or transaction back so that another could go on: nothing of it was
    stored, so sending it again is safe. On a Galera cluster it is also how a
    certification conflict with a write through another node comes back (two
    writers of one idempotency key, at COMMIT).
    """
    await _retrying_conflicts(
        deadline, functools.partial(_bounded_once, engine, deadline, run, isolation_level=isolation_level)
    )


async def _retrying_conflicts(deadline: float, attempt: Callable[[], Awaitable[None]]) -> None:
    """`attempt`, tried again while a deadlock (1213) rolled it back whole and the deadline allows."""
    loop = asyncio.get_running_loop()
    retries = 0
    while True:
        try:
            return await attempt()
        except NotStored as exc:
            if not (exc.refused_by_database and is_conflict(exc.__cause__)):
                raise
            pause = random.uniform(0.002, 0.01) * 2 ** min(retries, 5)  # noqa: S311 (not a secret)
            if deadline - loop.time() - pause < 2 * MIN_STATEMENT_SECONDS:
                raise
        await asyncio.sleep(pause)
        retries += 1


async def _bounded_once(
    engine: AsyncEngine,
    deadline: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
    *,
    isolation_level: str | None,
) -> None:
    """Check out a connection by `deadline`, then `run` a write bounded to end by it.

    A connection not had by the deadline means nothing was sent. Once the
    write is sent, its answer is awaited ANSWER_GRACE_SECONDS past the
    deadline: the database was told to end the statement by the deadline, so
    only a database that stopped answering is cut off, and then the outcome
    is unknown (for a transaction, only once its COMMIT was sent: before
    that, a dropped connection rolls it back).
    """
    loop = asyncio.get_running_loop()
    name = engine.dialect.name
    progress = _Progress()
    try:
        async with asyncio.timeout_at(deadline + ANSWER_GRACE_SECONDS):
            conn = engine.connect()
            try:
                async with asyncio.timeout_at(deadline):
                    await conn.start()
                    level = isolation_level or conn.default_isolation_level
                    if level and not await _autocommits_already(conn, level):
                        await conn.execution_options(isolation_level=level)
                seconds = deadline - loop.time()
                if seconds < MIN_STATEMENT_SECONDS:
                    raise NotStored("the line's deadline came before a database connection was free")
                if name == "sqlite":
                    await _sqlite_bounded(conn, seconds, run, progress)
                else:
                    await run(conn, seconds, progress)
            finally:
                if conn.sync_connection is not None:  # it was checked out
                    await conn.close()
    except Exception as exc:
        _account(exc, progress, name, transaction=isolation_level is None)


def _account(exc: Exception, progress: _Progress, dialect_name: str, *, transaction: bool) -> None:
    """Raise what `exc` means for a write that got as far as `progress`; return if it was stored anyway.

    A write in a `transaction` (not autocommit) is rolled back by a dropped
    connection until its COMMIT is sent.
    """
    if isinstance(exc, TimeoutError):
        if progress.done:
            return  # stored; only handing the connection back was slow
        if not progress.sent:
            raise NotStored("no database connection within the line's deadline") from None
        if transaction and not progress.committing:
            raise NotStored("the database did not answer before the commit; nothing was committed") from None
        raise OutcomeUnknown("the database did not answer the statement in time") from None
    if isinstance(exc, NotStored | OutcomeUnknown | KeyReused):
        raise exc
    if progress.done:
        return
    if not progress.sent:
        raise NotStored(one_line_reason(exc)) from exc
    if answered_by_database(exc, dialect_name) or (transaction and not progress.committing):
        raise NotStored(
            one_line_reason(exc), refused_by_database=True, transient=is_unavailable(exc)
        ) from exc
    raise OutcomeUnknown(one_line_reason(exc)) from exc


async def _autocommits_already(conn: AsyncConnection, level: str) -> bool:
    """Whether autocommit is asked of a MariaDB connection that already autocommits (the pool's default).

    Setting it again through SQLAlchemy, and its reset when the connection
    goes back, cost two greenlet round trips per batch for nothing: skipping
    it buys 1.02 to 1.23x less CPU per WriteNote, 8 at a time (six
    alternating in-process runs, time.process_time per request).
    """
    if level != "AUTOCOMMIT" or conn.dialect.name == "sqlite":
        return False
    driver: Any = (await conn.get_raw_connection()).driver_connection
    return bool(driver.get_autocommit())


async def _sqlite_bounded(
    conn: AsyncConnection,
    seconds: float,
    run: Callable[[AsyncConnection, float, _Progress], Awaitable[None]],
    progress: _Progress,
) -> None:
    """Run `run` with SQLite's busy timeout set to `seconds`, then put the connection's back.

    Another connection holding the write lock makes SQLite wait in its busy
    handler, in aiosqlite's thread, where no asyncio timeout reaches: the busy
    timeout is the one bound that ends that wait (SQLITE_BUSY, nothing stored).
    """
    before = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
    await conn.exec_driver_sql(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 1)}")
    try:
        await run(conn, seconds, progress)
    finally:
        with contextlib.suppress(Exception):  # a connection that broke is thrown away anyway
            await conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(before or 0)}")


def one_line_reason(exc: BaseException) -> str:
    """A one-line account of a failure for the server's log: the driver's own words."""
    original = getattr(exc, "orig", None) or exc
    return f"{type(original).__name__}: {original}".splitlines()[0]


async def forget_keys(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> int:
    """Delete at most `limit` idempotency keys stored before `before`; answer how many."""
    keys = event_run_log_keys
    async with engine.begin() as conn:
        found = (
            await conn.execute(
                select(keys.c.run_id, keys.c.key_digest).where(keys.c.created_at < before).limit(limit)
            )
        ).all()
        for run_id, key_digest in found:
            await conn.execute(delete(keys).where(keys.c.run_id == run_id, keys.c.key_digest == key_digest))
    return len(found)


async def detail_capacity(engine: AsyncEngine) -> int | None:
    """The most bytes the `detail` column holds, or None when it has no such limit (SQLite).

    An existing table may have TEXT (65,535 bytes) where this service creates
    MEDIUMTEXT; a longer detail would be refused by the database (or cut
    short, outside strict mode).
    """
    if engine.dialect.name == "sqlite":
        return None
    async with engine.connect() as conn:
        octets = (
            await conn.execute(
                text(
                    "SELECT CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t AND COLUMN_NAME = 'detail'"
                ),
                {"t": _l.name},
            )
        ).scalar()
    return None if octets is None else int(octets)


def _eligible_runs(before: datetime.datetime) -> Select[Any]:
    """The ids of the runs whose lines a prune with this horizon deletes."""
    r = event_runs
    return select(r.c.id).where(
        r.c.status.in_(TERMINAL_STATUSES),
        func.coalesce(r.c.ended_at, r.c.updated_at) < as_naive_utc(before),
    )


@asynccontextmanager
async def _lockless(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit: each SELECT is a consistent read of its own, taking no lock.

    `event_runs` belongs to the events system: what the prune reads of it must
    never make the events system wait. In a transaction, InnoDB reads with
    locks where a statement also writes (`DELETE ... WHERE run_id IN (SELECT
    ... FROM event_runs)` takes shared locks on the runs it reads, until
    commit) and under SERIALIZABLE even a plain SELECT locks; in autocommit a
    SELECT locks nothing at any isolation level.
    """
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


@dataclass(frozen=True, slots=True)
class PruneSlice:
    """What one slice of a prune did: how many lines it deleted, and from which runs."""

    deleted: int
    run_ids: frozenset[int]


async def prune_terminal(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> int:
    """Delete at most `limit` lines of terminal runs that ended before `before`."""
    return (await prune_slice(engine, before=before, limit=limit)).deleted


# A slice that loses a conflict with another pruner is chosen again, this many
# times at most, after a short random pause that doubles each time. On Galera
# two nodes deleting the same lines at once fail one of the two at commit with
# a deadlock (1213: the certification conflict); on one server InnoDB's
# deadlock detector does the same to one of two overlapping deletes. The slice
# that lost deleted nothing, so choosing again is safe; the caller's own
# timeout still bounds the whole.
PRUNE_CONFLICT_RETRIES = 8


def is_conflict(exc: BaseException | None) -> bool:
    """Whether `exc` is a deadlock (1213): a transaction rolled back whole because another won."""
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    return isinstance(exc, sa_exc.DBAPIError) and args[:1] == (1213,)


async def prune_slice(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> PruneSlice:
    """Delete at most `limit` lines of terminal runs that ended before `before`.

    A slice that loses a conflict with another pruner (see
    `PRUNE_CONFLICT_RETRIES`) is chosen again rather than failing.
    """
    retries = 0
    while True:
        try:
            return await _prune_slice_once(engine, before=before, limit=limit)
        except sa_exc.DBAPIError as exc:
            if not is_conflict(exc) or retries == PRUNE_CONFLICT_RETRIES:
                raise
        await asyncio.sleep(random.uniform(0.005, 0.02) * 2**retries)  # noqa: S311 (not a secret)
        retries += 1


async def _prune_slice_once(engine: AsyncEngine, *, before: datetime.datetime, limit: int) -> PruneSlice:
    """One try at a slice.

    Three statements, none of which locks a row of `event_runs`: the ids of at
    most `limit` eligible lines (MariaDB refuses the seed's `DELETE ... JOIN
    ... LIMIT`), read in autocommit; then, in a transaction of its own (so a
    cancelled slice is rolled back whole), a fresh read of whether their runs
    are still eligible and a delete by primary key. The transaction's first
    read takes its snapshot then, and a consistent read locks nothing; the
    delete names only `event_run_log` ids, so its locks are on those lines
    alone. The events system's updates of its runs never wait on a prune.

    What remains is the window between that read and the delete, one round
    trip: a run that left its terminal status just then would still lose the
    lines chosen for this slice. That is accepted, because a terminal status
    is final in the events system (a run that completed, failed, was cancelled
    or missed is not run again), so only a hand edit could hit it; closing the
    window would take a lock on the run's row, which is what made the events
    system wait.
    """
    async with _lockless(engine) as conn:
        found = (
            await conn.execute(
                select(_l.c.id, _l.c.run_id).where(_l.c.run_id.in_(_eligible_runs(before))).limit(limit)
            )
        ).all()
    if not found:
        return PruneSlice(deleted=0, run_ids=frozenset())
    chosen = sorted({row.run_id for row in found})
    async with transaction(engine) as conn:
        # A run that left its terminal status while the slice was being
        # chosen keeps its lines.
        still = set((await conn.execute(_eligible_runs(before).where(event_runs.c.id.in_(chosen)))).scalars())
        ids = [row.id for row in found if row.run_id in still]
        if not ids:
            return PruneSlice(deleted=0, run_ids=frozenset())
        # The lines this delete took, as it took them (RETURNING: MariaDB
        # 10.0+, SQLite 3.35+), for event_run_log_pruned: a line another
        # pruner took first is not counted as this slice's. MySQL has no
        # DELETE ... RETURNING: there the lines are read just before.
        at = _sqlite_at if conn.dialect.name == "sqlite" else _l.c.at
        if conn.dialect.delete_returning:
            statement = delete(_l).where(_l.c.id.in_(ids)).returning(_l.c.run_id, at)
            taken = (await conn.execute(statement)).all()
            deleted = len(taken)
        else:
            taken = (await conn.execute(select(_l.c.run_id, at).where(_l.c.id.in_(ids)))).all()
            deleted = int((await conn.execute(delete(_l).where(_l.c.id.in_(ids)))).rowcount)
        await _record_pruned(conn, [(run_id, at) for run_id, at in taken])
    # Fewer deleted than chosen only when another pruner (a pruneTerminal
    # call, the prune command) took some of the same lines first; the runs
    # named are then those whose lines this slice saw go.
    return PruneSlice(deleted=deleted, run_ids=frozenset(row.run_id for row in found if row.run_id in still))


async def _record_pruned(conn: AsyncConnection, lines: Sequence[tuple[int, Any]]) -> None:
    """Add the lines a slice deleted to their runs' `event_run_log_pruned` rows, in its transaction."""
    per_run: dict[int, tuple[int, datetime.datetime | None]] = {}
    for run_id, at in lines:
        if isinstance(at, str):  # SQLite's normalised text; '' holds no time
            try:
                at = datetime.datetime.fromisoformat(at)
            except ValueError:
                at = None
        if not isinstance(at, datetime.datetime):
            at = None  # MariaDB's zero date comes as text, a NULL as None
        count, through = per_run.get(run_id, (0, None))
        if at is not None and (through is None or at > through):
            through = at
        per_run[run_id] = (count + 1, through)
    now = utc_now_millis()
    p = event_run_log_pruned
    for run_id, (count, through) in sorted(per_run.items()):
        values = {"run_id": run_id, "line_count": count, "through": through, "pruned_at": now}
        if conn.dialect.name == "sqlite":
            statement: Any = sqlite_insert(p).values(values)
            statement = statement.on_conflict_do_update(
                index_elements=[p.c.run_id],
                set_={
                    "line_count": p.c.line_count + statement.excluded.line_count,
                    "through": func.max(
                        func.coalesce(p.c.through, statement.excluded.through),
                        func.coalesce(statement.excluded.through, p.c.through),
                    ),
                    "pruned_at": statement.excluded.pruned_at,
                },
            )
        else:
            statement = mysql_insert(p).values(values)
            statement = statement.on_duplicate_key_update(
                line_count=p.c.line_count + statement.inserted.line_count,
                through=func.greatest(
                    func.coalesce(p.c.through, statement.inserted.through),
                    func.coalesce(statement.inserted.through, p.c.through),
                ),
                pruned_at=statement.inserted.pruned_at,
            )
        await conn.execute(statement)


@dataclass(frozen=True, slots=True)
class Pruned:
    """What pruning took from one run's log."""

    lines: int
    through: datetime.datetime | None  # aware UTC
    pruned_at: datetime.datetime | None  # aware UTC


async def find_pruned(engine: AsyncEngine, run_id: int) -> Pruned | None:
    """What pruning took from the run's log, or None if it never took a line."""
    rows = await _read(engine, _pruned_statement(engine.dialect.name == "sqlite"), {"run_id": run_id})
    if not rows:
        return None
    lines, through, pruned_at = rows[0]
    return Pruned(lines=int(lines), through=_time(through), pruned_at=_time(pruned_at))


@functools.cache
def _pruned_statement(sqlite: bool) -> Select[Any]:
    p = event_run_log_pruned
    columns: list[ColumnElement[Any]] = [p.c.through, p.c.pruned_at]
    if sqlite:
        columns = [cast(column, LargeBinary) for column in columns]
    return select(p.c.line_count, *columns).where(p.c.run_id == bindparam("run_id"))


async def count_eligible_runs(engine: AsyncEngine, *, before: datetime.datetime) -> int:
    """How many runs have lines a prune with this horizon would delete."""
    async with _lockless(engine) as conn:
        query = select(func.count(_l.c.run_id.distinct())).where(_l.c.run_id.in_(_eligible_runs(before)))
        return int((await conn.execute(query)).scalar_one())


async def count_eligible(engine: AsyncEngine, *, before: datetime.datetime) -> int:
    """How many lines a prune with this horizon would delete, in all."""
    async with _lockless(engine) as conn:
        query = select(func.count()).select_from(_l).where(_l.c.run_id.in_(_eligible_runs(before)))
        return int((await conn.execute(query)).scalar_one())


@functools.cache
def _runs_statement(sqlite: bool) -> Select[Any]:
    """find_runs' statement, built once (as the page's is: see page_statement)."""
    r = event_runs
    # On SQLite, as bytes: the DateTime type would fail on a value it cannot
    # parse, and the driver on text that is not UTF-8.
    columns: list[ColumnElement[Any]] = [r.c.status, r.c.ended_at, r.c.updated_at]
    if sqlite:
        columns = [cast(column, LargeBinary) for column in columns]
    return select(r.c.id, *columns).where(r.c.id.in_(bindparam("ids", expanding=True)))


async def find_runs(engine: AsyncEngine, ids: Iterable[int]) -> dict[int, Run]:
    """The runs with these ids, as the events system has them now, by id.

    The events system's table may hold what its own columns do not promise
    (a zero date on MariaDB, text that is not a date on SQLite): such a time
    reads as null, and a missing status as '', never failing the lookup.
    """
    wanted = sorted({i for i in ids if 0 < i <= LINE_ID_MAX})
    if not wanted:
        return {}
    rows = await _read(engine, _runs_statement(engine.dialect.name == "sqlite"), {"ids": wanted})
    return {
        run_id: Run(id=run_id, status=_status(status), ended_at=_time(ended), updated_at=_time(updated))
        for run_id, status, ended, updated in rows
    }


def _status(value: Any) -> str:
    return "" if value is None else _text(value)[0]


def _time(value: Any) -> datetime.datetime | None:
    """A stored time as aware UTC, or None where it holds none (NULL, a zero date, not a date)."""
    if type(value) is bytes:
        try:
            value = datetime.datetime.fromisoformat(value.decode())
        except ValueError:  # UnicodeDecodeError too
            return None
    if not isinstance(value, datetime.datetime):
        return None  # MariaDB's driver hands back a zero date as its text
    if value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    try:
        return value.astimezone(datetime.UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00
        return None


async def ping(engine: AsyncEngine) -> None:
    """Raise unless the database answers, with the run log's table in place.

    `LIMIT 0` reads no row, on either backend: the statement only has to find
    the table (a missing one is error 1146, or SQLite's "no such table").
    Only `event_run_log`: without it nothing works, while without the events
    system's `event_runs` lines are still written, which a health check that
    took the service out of its balancer would stop.
    """
    await _read(engine, text("SELECT 1 FROM event_run_log LIMIT 0"))


# MySQL/MariaDB errors that mean "not reachable now, try again", as opposed to
# a fault of this server or its schema: too many connections (1040), shutdown
# in progress (1053), lock wait timeout (1205), deadlock (1213), query
# interrupted (1317), connection killed (1927), a statement past its
# max_statement_time (1969), and the client's own can't connect (2002, 2003),
# server gone away (2006), lost connection (2013, 2055).
_TRANSIENT_MYSQL_ERRORS = frozenset({1040, 1053, 1205, 1213, 1317, 1927, 1969, 2002, 2003, 2006, 2013, 2055})


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database is down, unreachable, slow or busy.

    Anything else (a missing table, a bad statement) is a fault of this server
    or its database's schema, which the caller cannot fix by trying again.
    """
    if isinstance(exc, TimeoutError | OSError | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    original = exc.orig
    args = getattr(original, "args", ())
    if args and isinstance(args[0], int) and args[0] in _TRANSIENT_MYSQL_ERRORS:
        return True
    # SQLite: another process holds the lock past busy_timeout, or the file is
    # gone (deleted while the service ran) or read-only, until someone fixes it.
    name = getattr(original, "sqlite_errorname", None) or ""
    return name in ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN") or name.startswith("SQLITE_READONLY")
