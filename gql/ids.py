"""Run and step ids as callers send them: `parse_id(value)`, 1 to MAX_ID in ASCII decimal digits."""

from __future__ import annotations

from typing import Any

MAX_ID = 2**31 - 1  # the id columns are INT
_MAX_DIGITS = len(str(MAX_ID))


def parse_id(value: Any) -> int | None:
    """`value` as a run or step id (1..MAX_ID), or None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        # int() of what is left is bounded: thousands of digits cost time.
        digits = value.lstrip("0")
        if len(digits) > _MAX_DIGITS:
            return None
        number = int(digits or "0")
    else:
        return None
    return number if 0 < number <= MAX_ID else None


def id_problem(name: str, value: Any) -> str:
    """Why `value` is not an id, for a refusal naming the argument `name`."""
    # As sent, but never long (a huge integer's repr costs time).
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        shown = f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    else:
        shown = repr(value)
        if len(shown) > 60:
            shown = f"{shown[:60]}... ({len(shown)} characters)"
    return f"{name} must be a positive integer up to {MAX_ID}, in decimal digits, got {shown}"
