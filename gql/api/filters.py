"""A read's filters (phase, step, time, search) from a caller's values, checked once for every path."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from .. import store
from ..ids import id_problem, parse_id

MOST_VALUES = 100  # phases or steps one filter lists
MOST_SEARCH_CHARS = 256


class FilterError(ValueError):
    """A filter a caller sent that cannot be read: the message names the argument."""


def read_filters(
    *,
    phase: Sequence[int] | None = None,
    step_id: Sequence[Any] | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    search: str | None = None,
) -> store.Filters:
    """The filters of these arguments (GraphQL's names in the refusals); FilterError says what is wrong."""
    phases = None
    if phase is not None:
        if len(phase) > MOST_VALUES:
            raise FilterError(f"phase lists at most {MOST_VALUES} phases, got {len(phase)}")
        for value in phase:
            if value < 0:
                raise FilterError(f"phase must be 0 or more, got {value}")
        phases = tuple(sorted(set(phase)))
    steps = None
    if step_id is not None:
        if len(step_id) > MOST_VALUES:
            raise FilterError(f"stepId lists at most {MOST_VALUES} steps, got {len(step_id)}")
        numbers = []
        for value in step_id:
            number = parse_id(value)
            if number is None:
                raise FilterError(id_problem("stepId", value))
            numbers.append(number)
        steps = tuple(sorted(set(numbers)))
    since_utc = None if since is None else _millis(since, "since")
    until_utc = None if until is None else _millis(until, "until")
    if since_utc is not None and until_utc is not None and since_utc > until_utc:
        raise FilterError(
            f"since={since_utc.isoformat()}Z is after until={until_utc.isoformat()}Z (in UTC): since is "
            "the earliest `at` kept (inclusive), until the first left out"
        )
    if search is not None:
        if not search:
            raise FilterError("search must not be empty: pass null to read every line")
        if len(search) > MOST_SEARCH_CHARS:
            raise FilterError(f"search is at most {MOST_SEARCH_CHARS} characters, got {len(search)}")
        search = store.fold(search)
    return store.Filters(phases=phases, steps=steps, since=since_utc, until=until_utc, search=search)


def _millis(value: datetime.datetime, name: str) -> datetime.datetime:
    """`value` as naive UTC, rounded up to the millisecond `at` is stored to (so the bound stays exact)."""
    try:
        utc = store.as_naive_utc(value)
        rounded = utc - datetime.timedelta(microseconds=utc.microsecond % 1000)
        return rounded + datetime.timedelta(milliseconds=1) if rounded != utc else rounded
    except OverflowError:
        raise FilterError(
            f"{name}={value.isoformat()} is outside the years 1 to 9999 once read as UTC"
        ) from None
