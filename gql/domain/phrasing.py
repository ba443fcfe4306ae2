"""How a sentence says a value: a detail's text cut to an excerpt, a time, a duration, a cap."""

from __future__ import annotations

import datetime
from typing import Any

EXCERPT = 120  # characters of a detail's text a sentence quotes


def cap_words(v: dict[str, Any]) -> str:
    """A cap a step was refused by: "the spawns cap, 40 of 40 used"."""
    cap, limit, used = v.get("cap"), v.get("limit"), v.get("used")
    used_words = f", {used} of {limit} used" if used is not None and limit is not None else ""
    return f"the {cap} cap{used_words}" if cap else "a cap"


def as_time(value: Any) -> datetime.datetime | None:
    """A detail's time (a datetime or ISO text) as an aware UTC time; None when it is not one."""
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, str):
        try:
            return as_time(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def excerpt(text: Any, most: int = EXCERPT) -> str:
    """Text as a sentence (or a label) quotes it: at most `most` characters, cut with an ellipsis."""
    words = " ".join(str(text).split())
    return words if len(words) <= most else words[: most - 1].rstrip() + "…"


def how_long(span: datetime.timedelta) -> str:
    """A duration as an operator reads it: "42 minutes", "3 hours 5 minutes", "2 days"."""
    minutes = int(span.total_seconds() // 60)
    days, hours, minutes = minutes // 1440, minutes // 60 % 24, minutes % 60
    parts = [(days, "day"), (hours, "hour"), (minutes, "minute")]
    said = [f"{n} {unit}{'s' * (n != 1)}" for n, unit in parts if n][:2]
    return " ".join(said) or "less than a minute"


def iso(value: datetime.datetime | None) -> str:
    """A time as a sentence says it: `2026-06-01T19:00:00Z`; "" for none."""
    return (
        ""
        if value is None
        else value.astimezone(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )
