"""The values storage reads and writes: a line as stored, a line to write, a page, a run; their limits."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import NamedTuple

READ_LIMIT_DEFAULT, READ_LIMIT_MAX = 500, 2000
PRUNE_LIMIT_DEFAULT, PRUNE_LIMIT_MAX = 5000, 50_000
LINE_ID_MAX = 2**63 - 1  # BIGINT, and the largest integer SQLite holds
PHASE_MIN, PHASE_MAX = -(2**31), 2**31 - 1  # what GraphQL's Int holds
# `at` of a line whose stored `at` is not a time: such lines sort after every time.
STAND_IN_AT = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


class Line(NamedTuple):
    """One stored line, as stored: `kind` and `detail` are not interpreted here.

    A row holding what no line can (`at` not a time, a NULL kind) has a stand-in, and `problem` says what.
    """

    id: int
    run_id: int
    step_id: int | str | None
    kind: str
    phase: int | None
    detail: str | bytes | None  # bytes: as stored, maybe not UTF-8 (detail_codec.read_detail decodes)
    at: datetime.datetime  # aware, UTC; STAND_IN_AT when `position` is set
    problem: str | None = None
    # When `at` is a stand-in: the text the database orders the line by ('' for none).
    position: str | None = None
    # The line's cursor, when a tail delivered it.
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class NewLine:
    run_id: int
    kind: str
    step_id: int | None = None
    phase: int | None = None
    detail: str | None = None


class Filters(NamedTuple):
    """What a read keeps of a run's lines besides its kinds; each None for no filter, () for none at all.

    `since` (inclusive), `until` (exclusive): naive UTC ms; `search`: folded
    (store.fold), to be found in the detail's words.
    """

    phases: tuple[int, ...] | None = None
    steps: tuple[int, ...] | None = None
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    search: str | None = None

    def without_search(self) -> Filters:
        return self._replace(search=None)


NO_FILTERS = Filters()


@dataclass(frozen=True, slots=True)
class Page:
    lines: list[Line]
    has_next: bool
    detail_bytes: int = 0  # the stored bytes of the lines' details


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    status: str
    ended_at: datetime.datetime | None
    updated_at: datetime.datetime | None


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
