"""Run and step ids as callers send them: the one rule every operation reads them by.

An id is a positive whole number that fits the INT columns (1 to
2,147,483,647). GraphQL's `ID` arrives as a string (or a JSON number, which
GraphQL turns into one), so the rule is about spellings:

- decimal digits, leading zeros allowed: `"7"`, `"007"` and `"00000000007"`
  are run 7, as zero-padded ids in file names and logs are;
- nothing else: no sign (`"+7"`, `"-1"`), no space (`" 7"`), no decimal point
  or exponent (`"7.0"`, `"1e3"`), no digits of other scripts (Arabic-Indic 7), not empty.

`runLog` (its pages and long polls), `runLogTail`, `writeRunLog` (its
`runId` and `stepId`) and a detail's run ids (`blockingRunId`) all read ids
through `parse_id`, so an id one of them accepts names the same run in all.
"""

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
        # Leading zeros cost nothing to strip; int() of what is left is
        # bounded (Python refuses past 4,300 digits, and thousands cost time).
        digits = value.lstrip("0")
        if len(digits) > _MAX_DIGITS:
            return None
        number = int(digits or "0")
    else:
        return None
    return number if 0 < number <= MAX_ID else None


def id_problem(name: str, value: Any) -> str:
    """Why `value` is not an id, for a refusal naming the argument `name`."""
    return f"{name} must be a positive integer up to {MAX_ID}, in decimal digits, got {_shown(value)}"


def _shown(value: Any) -> str:
    # A caller's value as they sent it, but never long: an integer of
    # thousands of digits would cost its repr's time and the log's room.
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    shown = repr(value)
    return shown if len(shown) <= 60 else f"{shown[:60]}... ({len(shown)} characters)"
