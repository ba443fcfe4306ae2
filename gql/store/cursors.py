"""Cursors: a position in a run's log as the opaque text clients pass back, and what it has delivered."""

from __future__ import annotations

import base64
import binascii
import bisect
import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .values import LINE_ID_MAX, Line, as_naive_utc, utc_now_millis


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


class CursorError(ValueError):
    """An `after` value this service did not issue."""


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


def naive(at: datetime.datetime) -> datetime.datetime:
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
        at: datetime.datetime | str = last.position if last.position is not None else naive(last.at)
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
            at >= settled_utc if at.tzinfo is datetime.UTC else naive(at) >= settled
        )
        if recent:
            text.add(line.id, naive(line.at))
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
        at_j = None if line.position is not None else naive(line.at)
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
            (other.id, naive(other.at))
            for other in lines[: j + 1]
            if other.position is None and naive(other.at) >= settled_j
        ]
        cursors.append(encode_cursor(line, Window(settled=settled_j, floor=floor, seen=tuple(seen))))
    return cursors
