"""Rows as lines: what the drivers hand back, decoded; a row another writer left odd, made a line."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from .values import PHASE_MAX, PHASE_MIN, STAND_IN_AT, Line


def mariadb_lines(rows: Sequence[Any]) -> list[Line]:
    """MariaDB's rows as lines: a row as this service writes it on the fast path."""
    utc, moment = datetime.UTC, datetime.datetime
    low, high = PHASE_MIN, PHASE_MAX
    # Unpacked by position, in the order the page statement selects.
    return [
        Line(line_id, run, step, kind, phase, detail, at.replace(tzinfo=utc))
        if type(at) is moment
        and type(kind) is str
        and type(detail) is not bytes
        and (phase is None or (type(phase) is int and low <= phase <= high))
        else _odd_line(line_id, run, step, kind, phase, detail, at, at)
        for line_id, run, step, kind, phase, detail, at in rows
    ]


def sqlite_lines(rows: Sequence[Any]) -> list[Line]:
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

    `at`: a datetime, or the text the database orders by (or None); `stored_at`: what the row holds.
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
            kind, problem = stored_text(kind)
            if problem:
                problems.append(f"stored kind {problem}")
    if type(step) is bytes:
        step, problem = stored_text(step)
        if problem:
            problems.append(f"stored stepId {problem}")
    if phase is not None and not (type(phase) is int and PHASE_MIN <= phase <= PHASE_MAX):
        problems.append(f"stored phase {_shown(phase)} is not an integer from {PHASE_MIN} to {PHASE_MAX}")
        phase = None
    return Line(line_id, run, step, kind, phase, detail, at, "; ".join(problems) or None, position)


def stored_text(value: Any) -> tuple[str, str | None]:
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


def stored_status(value: Any) -> str:
    return "" if value is None else stored_text(value)[0]


def stored_time(value: Any) -> datetime.datetime | None:
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
