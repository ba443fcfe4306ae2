"""Cursors: a position in a run's log as the opaque text clients pass back, and what it has delivered.

`encode_cursor(line, scope)` makes one, `decode_cursor(text, argument, scope)` reads it back.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import datetime
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .values import LINE_ID_MAX, NO_FILTERS, Filters, Line, Page, utc_now_millis

RECENT_LINES = 128  # the most recent lines one cursor names; past it a page stops short
_VERSION = 2
# Header and floor (at most 140 bytes) and RECENT_LINES of the widest lines (id step 9, time 7).
_MAX_BYTES = 140 + RECENT_LINES * 16
_MAX_MILLIS = 2**49 - 1
MAX_CURSOR_CHARS = -(-_MAX_BYTES * 4 // 3)
_EPOCH = datetime.datetime(1, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=datetime.UTC)  # for an aware time: no conversion to naive first
_MICROSECOND = datetime.timedelta(microseconds=1)
_MILLISECOND = datetime.timedelta(milliseconds=1)
# A stored `at` that is not a time, as the database prints it (`0000-00-00 ...`), or '' for none.
_POSITION = re.compile(r"[0-9 :.-]{0,40}")


class CursorError(ValueError):
    """A cursor this service did not issue, or issued for another run or other filters."""


class Scope(NamedTuple):
    """What a cursor is for: its run, and a digest of its filters (b'' for none: every line)."""

    run_id: int
    kinds: bytes


def cursor_scope(run_id: int, kinds: Sequence[str] | None, filters: Filters = NO_FILTERS) -> Scope:
    """The scope of a read of `run_id` with this kinds filter (None: every kind) and `filters`."""
    if filters == NO_FILTERS:
        # Digest of the kinds alone, so older kinds-only cursors still read.
        if kinds is None:
            return Scope(run_id, b"")
        return Scope(run_id, hashlib.sha256(",".join(sorted(set(kinds))).encode()).digest()[:8])
    phases, steps, since, until, search = filters
    named = repr(
        (
            None if kinds is None else sorted(set(kinds)),
            None if phases is None else sorted(set(phases)),
            None if steps is None else sorted(set(steps)),
            None if since is None else since.isoformat(),
            None if until is None else until.isoformat(),
            search,
        )
    )
    return Scope(run_id, hashlib.sha256(named.encode()).digest()[:8])


@dataclass(frozen=True, slots=True)
class Cursor:
    """A position in a run's log, (at, id); for a recent line, the `Window` a `before` read delivered."""

    # Naive UTC; or a line's `position` when its stored `at` is not a time.
    # None only on a cursor of a read that found no line (`cursor_now`).
    at: datetime.datetime | str | None
    id: int
    window: Window | None = None


# Before every line: a `before` read from it reads a run's log from its oldest line.
START = Cursor(at="", id=0)


@dataclass(frozen=True, slots=True)
class Window:
    """What a recent line's cursor has behind it: the lines up to `floor`, before `settled`, and `seen`.

    A line is stamped before it commits, so it can land behind lines a reader already has.
    """

    settled: datetime.datetime
    floor: Cursor | None = None
    seen: tuple[tuple[int, datetime.datetime], ...] = ()


def settled_before(late_window: float) -> datetime.datetime:
    """Now less `late_window` seconds, naive UTC to the millisecond: lines stamped earlier have committed."""
    return utc_now_millis() - datetime.timedelta(seconds=late_window)


def naive(at: datetime.datetime) -> datetime.datetime:
    return at.replace(tzinfo=None) if at.tzinfo is not None else at


# ── the text of a cursor ─────────────────────────────────────────────────────
# base64url of: version, scope, position, and the window if any (settled, floor, then
# each line seen as its id step and its `at` in ms past `settled`); integers LEB128.


def _varint(value: int) -> bytes:
    if value <= 0x7F:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes([value]) for value in range(0x80)]


def _time_bytes(at: datetime.datetime) -> bytes:
    # Microseconds since year 1, UTC: the same for an aware time as for it made naive UTC.
    return _varint((at - (_EPOCH if at.tzinfo is None else _EPOCH_UTC)) // _MICROSECOND)


def _position_bytes(at: datetime.datetime | str | None, line_id: int) -> bytes:
    if at is None:
        return b"\x00"
    if isinstance(at, str):
        text = at.encode()
        return b"\x02" + _varint(len(text)) + text + _varint(line_id)
    return b"\x01" + _time_bytes(at) + _varint(line_id)


def _line_at(line: Line | Cursor) -> datetime.datetime | str | None:
    if isinstance(line, Line):
        return line.position if line.position is not None else naive(line.at)
    return line.at


def position_of(line: Line) -> Cursor:
    """A line's position as a plain cursor (no window): what is older than it, or newer."""
    return Cursor(at=_line_at(line), id=line.id)


def _scope_bytes(scope: Scope) -> bytes:
    kinds = b"\x01" + scope.kinds if scope.kinds else b"\x00"
    return bytes([_VERSION]) + _varint(scope.run_id) + kinds


def _header(scope: Scope, line: Line | Cursor) -> bytes:
    return _scope_bytes(scope) + _position_bytes(_line_at(line), line.id)


def _line_position(line: Line) -> bytes:
    """`_position_bytes` of a stored line, as `_header` writes it."""
    if line.position is not None:
        return _position_bytes(line.position, line.id)
    return b"\x01" + _time_bytes(line.at) + _varint(line.id)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _text(raw: bytes) -> str:
    # base64.urlsafe_b64encode without its Python calls: this runs once per line of a page.
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).rstrip(b"=").decode()


class _Seen:
    """A window's lines seen, by id, each with its bytes ready to write."""

    __slots__ = ("ats", "ids", "items", "settled")

    def __init__(self, settled: datetime.datetime) -> None:
        self.settled = settled
        self.ids: list[int] = []
        self.ats: list[datetime.datetime] = []
        self.items: list[bytes] = []

    def __len__(self) -> int:
        return len(self.ids)

    def _item(self, i: int) -> bytes:
        step = self.ids[i] - (self.ids[i - 1] if i else 0)
        # Rounded up: a line is at worst named again, never delivered twice.
        millis = -(-((self.ats[i] - self.settled) // _MICROSECOND) // 1000)
        return _varint(step) + _varint(max(0, millis))

    def add(self, line_id: int, at: datetime.datetime) -> None:
        i = bisect.bisect_left(self.ids, line_id)
        if i < len(self.ids) and self.ids[i] == line_id:
            return
        self.ids.insert(i, line_id)
        self.ats.insert(i, at)
        self.items.insert(i, self._item(i))
        if i + 1 < len(self.ids):  # the next one's step is from this one now
            self.items[i + 1] = self._item(i + 1)

    def keep(self, wanted: list[bool]) -> None:
        """Keep the lines whose flag is set (in id order)."""
        self.ids = [x for x, w in zip(self.ids, wanted, strict=True) if w]
        self.ats = [x for x, w in zip(self.ats, wanted, strict=True) if w]
        self.items = [self._item(i) for i in range(len(self.ids))]

    def settle(self, settled: datetime.datetime) -> None:
        """Move `settled` on: the lines stamped before it need no naming."""
        self.settled = settled
        self.keep([at >= settled for at in self.ats])

    def oldest(self) -> tuple[datetime.datetime, int] | None:
        """The oldest line named, by (at, id)."""
        return min(zip(self.ats, self.ids, strict=True)) if self.ids else None

    def window_bytes(self, floor: Cursor | None) -> bytes:
        floor_bytes = b"\x00" if floor is None else _position_bytes(floor.at, floor.id)
        return (
            b"\x01" + _time_bytes(self.settled) + floor_bytes + _varint(len(self.ids)) + b"".join(self.items)
        )


def encode_cursor(line: Line | Cursor, scope: Scope, window: Window | None = None) -> str:
    """A line's (or a position's) cursor for `scope`; with `window`, one that also says what it delivered."""
    if window is None and isinstance(line, Cursor):
        window = line.window
    if window is None:
        if isinstance(line, Line):  # as a page's cursors write it: no naive copy of its time
            return _text(_scope_bytes(scope) + _line_position(line) + b"\x00")
        return _text(_header(scope, line) + b"\x00")
    if len(window.seen) > RECENT_LINES:
        raise ValueError(f"a window names at most {RECENT_LINES} lines, not {len(window.seen)}")
    seen = _Seen(window.settled)
    for line_id, at in window.seen:
        seen.add(line_id, at)
    return _text(_header(scope, line) + seen.window_bytes(window.floor))


# ── reading a cursor ─────────────────────────────────────────────────────────


class _Wrong(ValueError):
    """What is wrong with a cursor, in words its caller can act on."""


class _Reader:
    __slots__ = ("at", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.raw):
            raise ValueError("short")
        self.at += 1
        return self.raw[self.at - 1]

    def varint(self, most: int = LINE_ID_MAX) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise ValueError("long")
        if value > most:
            raise ValueError("large")
        return value

    def take(self, count: int) -> bytes:
        if self.at + count > len(self.raw):
            raise ValueError("short")
        self.at += count
        return self.raw[self.at - count : self.at]

    def time(self) -> datetime.datetime:
        try:
            return _EPOCH + self.varint() * _MICROSECOND
        except OverflowError:
            raise _Wrong("its time is outside the years 1 to 9999 in UTC") from None

    def position(self, *, lowest_id: int = 1) -> Cursor | None:
        tag = self.byte()
        if tag == 0:
            return None
        if tag == 1:
            at: datetime.datetime | str = self.time()
        elif tag == 2:
            at = self.take(self.varint(40)).decode("ascii")
            if _POSITION.fullmatch(at) is None:
                raise ValueError("position")
        else:
            raise ValueError("tag")
        try:
            line_id = self.varint()
        except ValueError:
            line_id = -1
        if at == "":
            lowest_id = 0  # START: before every line
        if not lowest_id <= line_id <= LINE_ID_MAX:
            raise _Wrong(f"its line id is not an integer from {lowest_id} to {LINE_ID_MAX}")
        return Cursor(at=at, id=line_id)


def decode_cursor(value: str, argument: str, scope: Scope) -> Cursor:
    """The cursor `value`, checked to be for `scope`; CursorError says what was wrong."""
    shown = value if len(value) <= 60 else f"{value[:60]}... ({len(value)} characters)"
    issued = (
        f"{argument}={shown!r} is not a cursor this service issued: "
        "pass a line's cursor, or a page's pageInfo.endCursor or startCursor"
    )
    if len(value) > MAX_CURSOR_CHARS:
        raise CursorError(f"{issued} (a cursor is at most {MAX_CURSOR_CHARS} characters)")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, binascii.Error):
        raise CursorError(issued) from None
    if raw[:1] != bytes([_VERSION]):
        # Cursors of earlier versions named no run: they are refused too.
        raise CursorError(f"{issued} (nor by its current version: read again without a cursor for one)")
    try:
        cursor, run_id, kinds = _decode(raw)
    except _Wrong as exc:
        raise CursorError(f"{issued} ({exc})") from None
    except (ValueError, OverflowError, UnicodeDecodeError):
        raise CursorError(issued) from None
    if run_id != scope.run_id:
        raise CursorError(
            f"{argument} is a cursor of run {run_id}, not of run {scope.run_id}: "
            "a cursor is used with the run it was issued for"
        )
    if kinds != scope.kinds:
        raise CursorError(
            f"{argument} was issued under other filters than this call's (kinds, phase, stepId, "
            "since, until, search): pass the same filters as the page or tail it came from"
        )
    return cursor


def _decode(raw: bytes) -> tuple[Cursor, int, bytes]:
    read = _Reader(raw)
    read.byte()  # the version, checked by the caller
    run_id = read.varint()
    kinds_tag = read.byte()
    if kinds_tag not in (0, 1):
        raise ValueError("kinds")
    kinds = read.take(8) if kinds_tag else b""
    position = read.position()
    window = None
    window_tag = read.byte()
    if window_tag == 1:
        settled = read.time()
        floor = read.position(lowest_id=0)
        count = read.varint()
        if count > RECENT_LINES:
            raise _Wrong(f"it names more than the {RECENT_LINES} lines a cursor holds")
        seen: list[tuple[int, datetime.datetime]] = []
        last = 0
        for _ in range(count):
            step = read.varint()
            if step == 0:
                raise _Wrong("it names a line twice")
            last += step
            if last > LINE_ID_MAX:
                raise _Wrong(f"its line id is not an integer from 1 to {LINE_ID_MAX}")
            seen.append((last, settled + read.varint(_MAX_MILLIS) * _MILLISECOND))
        window = Window(settled=settled, floor=floor, seen=tuple(seen))
    elif window_tag != 0:
        raise ValueError("window")
    if read.at != len(raw):
        raise ValueError("trailing")
    if position is None:
        if window is None:
            raise ValueError("empty")
        return Cursor(at=None, id=0, window=window), run_id, kinds
    return Cursor(at=position.at, id=position.id, window=window), run_id, kinds


# ── the cursors of a page ────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class PageCursors:
    """The cursors of a page's first `len(texts)` lines; `settles_in`: seconds until more can be read."""

    texts: list[str]
    settles_in: float = 0.0


def cursors_of(
    page: Page, *, before: Cursor | None, settled: datetime.datetime, scope: Scope, only_ends: bool = False
) -> PageCursors:
    """The cursors of a page read with `before` (`newer_cursors`) or not (`page_cursors`)."""
    if before is not None:
        return newer_cursors(page.lines, before=before, settled=settled, scope=scope)
    return page_cursors(page.lines, has_next=page.has_next, settled=settled, scope=scope, only_ends=only_ends)


def page_cursors(
    lines: Sequence[Line],
    *,
    has_next: bool,
    settled: datetime.datetime,
    scope: Scope,
    only_ends: bool = False,
) -> PageCursors:
    """The cursors of a page read newest first, cut after RECENT_LINES recent lines.

    With `only_ends`, the lines between the first and the last get ''.
    """
    # Lines read from the database hold aware times: compared as they are.
    settled_utc = settled.replace(tzinfo=datetime.UTC)

    def recent(line: Line) -> bool:
        at = line.at
        return line.position is None and (at >= settled_utc if at.tzinfo is not None else at >= settled)

    is_recent = [recent(line) for line in lines]
    kept, count = len(lines), 0
    for i, line_is_recent in enumerate(is_recent):
        if line_is_recent:
            count += 1
            if count > RECENT_LINES:
                kept, has_next = i, True
                break
    floor = None
    if has_next and kept:
        last = lines[kept - 1]
        floor = Cursor(at=_line_at(last), id=last.id - 1)
    wanted = set(range(kept)) if not only_ends else ({0, kept - 1} if kept else set())
    texts = [""] * kept
    seen = _Seen(settled)
    prefix = _scope_bytes(scope)
    # From the page's end up: line i's window is the recent lines from it to the end.
    for i in range(kept - 1, -1, -1):
        line = lines[i]
        if is_recent[i]:
            seen.add(line.id, naive(line.at))
        if i in wanted:
            window = seen.window_bytes(floor) if is_recent[i] else b"\x00"
            texts[i] = _text(prefix + _line_position(line) + window)
    return PageCursors(texts)


def newer_cursors(
    lines: Sequence[Line], *, before: Cursor, settled: datetime.datetime, scope: Scope
) -> PageCursors:
    """The cursors of a `before` page (read oldest first), stopping before a window would overflow."""
    window = before.window
    floor: Cursor | None
    window_settled: datetime.datetime | None
    carried: tuple[tuple[int, datetime.datetime], ...]
    if window is None:
        floor, window_settled, carried = before, None, ()
    else:
        floor, window_settled, carried = window.floor, window.settled, window.seen
    seen = _Seen(window_settled or settled)
    for line_id, at in carried:
        seen.add(line_id, at)
    # Kept up to date as lines come and go, not recomputed per line.
    oldest = seen.oldest()
    texts: list[str] = []
    settles_in = 0.0
    prefix = _scope_bytes(scope)
    for line in lines:
        if line.position is not None:
            # An `at` that is not a time: older than every time, never late.
            texts.append(_text(prefix + _line_position(line) + b"\x00"))
            continue
        at = naive(line.at)
        if at < settled:
            # Settled: every line at or before it has committed and is delivered.
            floor = Cursor(at=at, id=line.id)
            if oldest is not None and oldest <= (at, line.id):
                seen.keep([(a, i) > (at, line.id) for i, a in zip(seen.ids, seen.ats, strict=True)])
                oldest = seen.oldest()
        else:
            if window_settled is None or window_settled < settled:
                window_settled = settled
                seen.settle(settled)
                oldest = seen.oldest()
            if len(seen) >= RECENT_LINES:
                # Full: the rest waits until the oldest named has settled.
                settles_in = max((min(seen.ats) - settled).total_seconds(), 0.0) + 0.001
                break
            seen.add(line.id, at)
            oldest = min(oldest, (at, line.id)) if oldest is not None else (at, line.id)
        if window_settled is None or (not len(seen) and at < settled):
            texts.append(_text(prefix + _line_position(line) + b"\x00"))
        else:
            texts.append(_text(prefix + _line_position(line) + seen.window_bytes(floor)))
    return PageCursors(texts, settles_in)


def fresh_window(settled: datetime.datetime, seen: Sequence[tuple[int, datetime.datetime]]) -> Window:
    """The window of a cursor with every line so far behind it, given the recent ones (newest first)."""
    return Window(settled=settled, seen=tuple(sorted(seen[:RECENT_LINES])))
