"""Search: the words of a line's detail as a reader finds them, folded, and the lines that hold a text.

`fold(text)` is how a search and the words are compared: Unicode's full case folding
(`str.casefold`) of the NFC form, so `É` and `é` are one, and `İ` folds to `i̇` (i and
U+0307, CaseFolding.txt's F mapping, no Turkish rule): `İstanbul` is found by how it
is written. `words_of(detail)` is a detail's string values, numbers and booleans as
JSON writes them (never its keys or escapes), one a line, folded; a detail that is not
JSON is its stored text. Each line's words are kept in `event_run_log_words` by the
folder (gql/folder.py) ahead of any search, or else by the search that first finds the
line without them (`catch_up`), so a search reads one range of words, never a detail.
"""

from __future__ import annotations

import datetime
import json
import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import event_run_log_words
from .connections import read_rows
from .errors import is_unavailable, one_line_reason
from .statements import as_compared, newest_line_statement, newest_words_statement, unfolded_statement
from .values import utc_now_millis

__all__ = ["Folded", "catch_up", "fold", "keep_words", "words_of"]

log = logging.getLogger("gql.runlog")

_w = event_run_log_words
# Lines a search (or the folder) reads, folds and keeps in one statement: their details are in
# memory together, so at most 250 of the detail's 64 KiB each (16 MiB), not 2,000 (125 MiB).
FOLD_BATCH = 250
# The most lines stored since a run's newest kept words that a catch-up reads by id range.
FOLD_SPLIT_MOST = 50_000


def fold(text: str) -> str:
    """`text` as a search compares it: NFC, then Unicode's full case folding, then NFC again."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())


def words_of(detail: str | bytes | None) -> str:
    """The folded words of a stored detail: its values (not keys), one a line; its text when not JSON."""
    if detail is None:
        return ""
    text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else detail
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return fold(text)
    return fold("\n".join(_values(value)))


def _values(value: Any) -> Iterable[str]:
    """The scalars of a JSON value, depth first, as text (JSON's `true`, `1.5`; nothing for null)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif item is not None:
            yield json.dumps(item)


@dataclass(frozen=True, slots=True)
class Folded:
    """What a catch-up folded: the matches of its search (id: kind), whether all were kept, how many."""

    matches: dict[int, str]
    kept: bool
    lines: int = 0


async def catch_up(
    engine: AsyncEngine,
    keep: AsyncEngine,
    *,
    run_id: int,
    needle: str | None,
    late: float,
    most: int | None = None,
) -> Folded:
    """Fold the run's lines read from `engine` with no words kept, and keep their words through `keep`.

    Lines stamped more than `late` seconds before the newest line with words kept, with an id below
    the highest kept, were folded by an earlier catch-up (they had committed by then): only the
    other lines are read. A run with no words kept yet is read whole. Oldest first, each batch kept
    as it is folded, so that a catch-up cut short (by its deadline, or after `most` lines) leaves no
    gap behind the newest. With no `needle`, nothing is matched: the lines are only folded.
    """
    sqlite = engine.dialect.name == "sqlite"
    values: dict[str, Any] = {"run_id": run_id, "limit": FOLD_BATCH}
    [(newest, above)] = await read_rows(engine, newest_words_statement(), values)
    reads: tuple[str | None, ...] = (None,)
    if newest is not None:
        # Lines stored since (by hand too, whatever their `at`) have higher ids; a late commit has
        # a lower one, but is stamped within `late` of the newest kept.
        values["above"] = above
        newest = datetime.datetime.fromisoformat(newest) if isinstance(newest, str) else newest
        # Not past now: a line stamped in the future (by hand) must not hide the lines before it.
        recent = min(newest, utc_now_millis()) - datetime.timedelta(seconds=late)
        values["recent"] = as_compared(recent, sqlite)
        [(highest,)] = await read_rows(engine, newest_line_statement())
        # Few lines stored since (in any run): two index ranges; else one read of the run's index.
        few = highest is not None and highest - above <= FOLD_SPLIT_MOST
        reads = ("older above", "recent") if few else ("recent or above",)
    folded = Folded({}, kept=True)
    for since in reads:
        values.pop("past_id", None)
        # The lines stamped before `recent` are all folded first: a recent line kept raises the
        # highest id kept past theirs, and a catch-up cut short after it would never read them.
        cap = None if since == "older above" else most
        while cap is None or folded.lines < cap:
            values["limit"] = FOLD_BATCH if cap is None else min(FOLD_BATCH, cap - folded.lines)
            statement = unfolded_statement(sqlite, since, "past_id" in values)
            rows = await read_rows(engine, statement, values)
            fresh = [
                {"run_id": run_id, "line_at": at, "id": line_id, "words": words_of(detail)}
                for line_id, _, detail, at in rows
            ]
            for (line_id, kind, _, _), row in zip(rows, fresh, strict=True):
                if needle is not None and needle in row["words"]:
                    name = kind.decode("utf-8", "replace") if isinstance(kind, bytes) else kind
                    folded.matches[line_id] = name
            kept = await keep_words(keep, fresh)
            folded = Folded(folded.matches, kept=folded.kept and kept, lines=folded.lines + len(rows))
            if len(rows) < values["limit"]:
                break
            values.update(past_id=rows[-1][0], past_at=rows[-1][3])
    return folded


async def keep_words(engine: AsyncEngine, rows: list[dict[str, Any]]) -> bool:
    """Keep lines' folded words; False when the database would not (a replica, a read-only file).

    Words are only a shortcut, so a failure to keep them is logged, never raised.
    """
    if not rows:
        return True
    # Another search may keep the same line's words first: the same words, so either stands.
    statement = (
        insert(_w)
        .prefix_with("IGNORE", dialect="mysql")
        .prefix_with("IGNORE", dialect="mariadb")
        .prefix_with("OR IGNORE", dialect="sqlite")
    )
    try:
        async with engine.begin() as conn:
            await conn.execute(statement, rows)
    except Exception as exc:
        # Any refusal of the database's (read-only, a replica, a row it will not take): the
        # lines are folded again by the next search, and found meanwhile by their ids.
        if not is_unavailable(exc) and not isinstance(exc, DBAPIError):
            raise
        log.warning("the words of %d lines were not kept: %s", len(rows), one_line_reason(exc))
        return False
    return True
