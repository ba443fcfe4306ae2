"""Search: the words of a line's detail as a reader finds them, folded, and the lines that hold a text.

`fold(text)` is how a search and the words are compared: Unicode's full case folding
(`str.casefold`) of the NFC form, so `É` and `é` are one, and `İ` folds to `i̇` (i and
U+0307, CaseFolding.txt's F mapping, no Turkish rule): `İstanbul` is found by how it
is written. `words_of(detail)` is a detail's string values, numbers and booleans as
JSON writes them (never its keys or escapes), one a line, folded; a detail that is not
JSON is its stored text. Each line's words are kept in `event_run_log_words` by the
search that first meets the line; a line with none there is folded as it is read.
"""

from __future__ import annotations

import functools
import json
import logging
import unicodedata
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Select, bindparam, func, insert, or_
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import event_run_log, event_run_log_words
from .connections import read_rows
from .errors import is_unavailable, one_line_reason

__all__ = ["fold", "matching_ids", "unfolded_matches", "words_of"]

log = logging.getLogger("gql.runlog")

_l, _w = event_run_log, event_run_log_words
# Lines a search folds and keeps in one statement.
FOLD_BATCH = 2000


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


@functools.cache
def candidates_statement(page: Select[Any]) -> Select[Any]:
    """A page statement's lines that hold `search` by their kept words, or have none kept yet.

    Each row: the line's id, its kept words' id (NULL when none are kept) and then its detail.
    """
    detail = next(column for column in page.selected_columns if column.key == "detail")
    return (
        page.with_only_columns(_l.c.id, _w.c.id.label("kept"), detail)
        .outerjoin(_w, _w.c.id == _l.c.id)
        .where(or_(_w.c.id.is_(None), func.instr(_w.c.words, bindparam("search")) > 0))
    )


async def matching_ids(
    engine: AsyncEngine,
    page: Select[Any],
    values: dict[str, Any],
    needle: str,
    want: int,
    keep: AsyncEngine | None = None,
) -> list[int]:
    """The ids of the first `want` lines of `page` (read with its detail) whose words hold `needle`.

    Lines with no words kept yet are folded here and their words kept through `keep` (by default
    `engine`); the read goes on until `want` match or the page's lines run out.
    """
    statement = candidates_statement(page)
    most = want
    while True:
        rows = await read_rows(engine, statement, {**values, "limit": most, "search": needle})
        found: list[int] = []
        fresh: dict[int, str] = {}
        for line_id, kept, detail in rows:
            if kept is None:
                fresh[line_id] = words = words_of(detail)
                if needle not in words:
                    continue
            found.append(line_id)
            if len(found) == want:
                break
        await keep_words(keep or engine, fresh)
        if len(found) == want or len(rows) < most:
            return found
        # Lines that were folded just now and did not match are left out of the next read.
        most *= 2


async def unfolded_matches(
    engine: AsyncEngine, unfolded: Select[Any], values: dict[str, Any], needle: str
) -> dict[str, int]:
    """Fold and keep the lines `unfolded` reads (id, kind, detail of lines with no words kept, by id
    descending, `limit` of them), going on below the last id read until none is left.

    Answers how many of each kind hold `needle` among those whose words could not be kept.
    """
    counts: dict[str, int] = {}
    below: int | None = None
    further = _below(unfolded)
    while True:
        if below is None:
            rows = await read_rows(engine, unfolded, {**values, "limit": FOLD_BATCH})
        else:
            rows = await read_rows(engine, further, {**values, "limit": FOLD_BATCH, "below": below})
        fresh = {line_id: words_of(detail) for line_id, _, detail in rows}
        if not await keep_words(engine, fresh):
            for line_id, kind, _ in rows:
                if needle in fresh[line_id]:
                    name = kind.decode("utf-8", "replace") if isinstance(kind, bytes) else kind
                    counts[name] = counts.get(name, 0) + 1
        if len(rows) < FOLD_BATCH:
            return counts
        below = rows[-1][0]


@functools.cache
def _below(unfolded: Select[Any]) -> Select[Any]:
    return unfolded.where(_l.c.id < bindparam("below"))


async def keep_words(engine: AsyncEngine, words: dict[int, str]) -> bool:
    """Keep lines' folded words; False when the database would not (a replica, a read-only file).

    Words are only a shortcut, so a failure to keep them is logged, never raised.
    """
    if not words:
        return True
    rows = [{"id": line_id, "words": text} for line_id, text in words.items()]
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
        if not is_unavailable(exc) and not _refused_write(exc):
            raise
        log.warning("the words of %d lines were not kept: %s", len(rows), one_line_reason(exc))
        return False
    return True


def _refused_write(exc: Exception) -> bool:
    """A database that will not take writes: a read-only SQLite file or MariaDB replica."""
    text = str(getattr(exc, "orig", exc)).lower()
    return "read-only" in text or "readonly" in text or "read only" in text
