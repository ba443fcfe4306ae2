"""Search: the words of a line's detail as a reader finds them, folded, kept beside the line.

`fold(text)` is how a search and the words are compared: Unicode's full case folding
(`str.casefold`) of the NFC form, so `É` and `é` are one, and `İ` folds to `i̇` (i and
U+0307, CaseFolding.txt's F mapping, no Turkish rule): `İstanbul` is found by how it
is written. `words_of(detail)` is a detail's string values, numbers and booleans as
JSON writes them (never its keys or escapes), one a line, folded; a detail that is not
JSON is its stored text. Each line's words are kept in `event_run_log_words` in the
transaction that writes the line (`keep_words`, from store/writes.py); lines stored
before that (or by hand) get theirs from `fold_log` (`python -m gql fold-words`), so a
search reads one range of words, never a detail.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from .connections import read_rows
from .db import event_run_log_words
from .statements import rows_insert_sql, unfolded_statement
from .values import NewLine

__all__ = ["fold", "fold_log", "keep_words", "words_of"]

_w = event_run_log_words
# Lines fold_log reads, folds and keeps in one statement: their details are in memory together,
# so at most 250 of the detail's 64 KiB each (16 MiB), not 2,000 (125 MiB).
FOLD_BATCH = 250

# Sends one statement (driver SQL, positional values) on a write's connection; answers its rows.
Send = Callable[[str, list[Any]], Awaitable[Sequence[Any]]]


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


_COLUMNS = ("run_id", "line_at", "id", "words")


async def keep_words(
    send: Send, lines: Sequence[NewLine], returned: Sequence[Any], *, mark: str, bound: str | None
) -> None:
    """Store the words of `lines`, just written by an INSERT whose RETURNING answered `returned`.

    `returned` is each line's id and `at` as reads order it, in any order: the ids rise in the
    order of the INSERT's rows, which is `lines`' order. Sent on `send`, in the lines'
    transaction; `mark` and `bound` as for `statements.rows_insert_sql`.
    """
    ids = sorted(returned, key=lambda row: row[0])
    values = [
        value
        for line, (line_id, line_at) in zip(lines, ids, strict=True)
        for value in (line.run_id, line_at, line_id, words_of(line.detail))
    ]
    await send(rows_insert_sql(_w.name, _COLUMNS, len(lines), mark, bound), values)


async def fold_log(engine: AsyncEngine, *, on_batch: Callable[[int], None] | None = None) -> int:
    """Keep the words of every line stored without them; answer how many.

    The upgrade step for lines written before migration 0008 (or by hand): the service keeps a
    line's words as it writes it. Oldest first, `FOLD_BATCH` lines a statement; `on_batch` is told
    the total after each batch. Safe beside a running service and another fold (INSERT IGNORE).
    """
    sqlite = engine.dialect.name == "sqlite"
    statement = unfolded_statement(sqlite)
    # Another fold may keep the same line's words first: the same words, so either stands.
    keep = (
        insert(_w)
        .prefix_with("IGNORE", dialect="mysql")
        .prefix_with("IGNORE", dialect="mariadb")
        .prefix_with("OR IGNORE", dialect="sqlite")
    )
    values: dict[str, Any] = {"past": 0, "limit": FOLD_BATCH}
    folded = 0
    while rows := await read_rows(engine, statement, values):
        fresh = [
            # A lone surrogate (a hand-written `\ud800`) is no text a database stores.
            {"run_id": run, "line_at": at, "id": line_id, "words": _storable(words_of(detail))}
            for line_id, run, detail, at in rows
        ]
        async with engine.begin() as conn:
            await conn.execute(keep, fresh)
        folded += len(rows)
        if on_batch is not None:
            on_batch(folded)
        values["past"] = rows[-1][0]
    return folded


def _storable(words: str) -> str:
    return words if words.isascii() else words.encode("utf-8", "replace").decode("utf-8")
