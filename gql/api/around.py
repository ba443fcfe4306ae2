"""`runLog(around:)`: the page that holds one line, with lines on both sides and cursors both ways."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from .. import store
from ..domain import tail
from .context import ClientError, Context
from .page import Asked, PageInfo


async def read_around(
    context: Context,
    asked: Asked,
    servings: Callable[[], Any],
    *,
    run_id: int,
    line_id: int,
    kinds: list[str] | None,
    filters: store.Filters,
    scope: store.Scope,
    limit: int | None,
    answering: Callable[[Context, str], AbstractContextManager[None]],
) -> tuple[list[store.Line], list[str], PageInfo, float]:
    """The lines (newest first), their cursors and the page's info around `line_id`, and the deadline."""
    size = store.clamp_read_limit(limit)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + context.settings.read_timeout
    settled = store.settled_before(tail.late_window(context.settings))
    engine = context.engine
    parts: dict[str, Any] = {}

    async def read(max_detail_bytes: int | None) -> store.Page:
        line = await store.find_line(engine, run_id=run_id, line_id=line_id, kinds=kinds, filters=filters)
        if line is None:
            owner = await store.run_of_line(engine, line_id)
            if owner is None:
                problem = f"around={line_id}: there is no line {line_id}"
            elif owner != run_id:
                problem = f"around={line_id} is a line of run {owner}, not of run {run_id}"
            else:
                problem = (
                    f"around={line_id} is outside this page's filters "
                    "(kinds, phase, stepId, since, until, search)"
                )
            raise ClientError(problem, "BAD_USER_INPUT")
        position = store.position_of(line)
        share = None if max_detail_bytes is None else max_detail_bytes // 2
        common: dict[str, Any] = {
            "run_id": run_id,
            "kinds": kinds,
            "detail": asked.detail,
            "largest_detail": context.settings.max_detail_bytes,
            "filters": filters,
            "max_detail_bytes": share,
        }
        wanted_newer = (size - 1) // 2
        newer = await store.read_page(
            engine, limit=max(wanted_newer, 1), after=None, before=position, **common
        )
        wanted_older = size - 1 - min(len(newer.lines), wanted_newer)
        older = await store.read_page(engine, limit=max(wanted_older, 1), after=position, **common)
        parts.update(line=line, newer=_cut(newer, wanted_newer), older=_cut(older, wanted_older))
        lines = [line, *parts["newer"].lines, *parts["older"].lines]
        return store.Page(lines=lines, has_next=False, detail_bytes=newer.detail_bytes + older.detail_bytes)

    with answering(context, f"runLog of run {run_id} around line {line_id}"):
        async with asyncio.timeout_at(deadline):
            if asked.detail:
                await context.details_left().read(read, servings())
            else:
                await read(None)
    line, newer, older = parts["line"], parts["newer"], parts["older"]
    position = store.position_of(line)
    made_newer = store.cursors_of(newer, before=position, settled=settled, scope=scope)
    down = store.Page(lines=[line, *older.lines], has_next=older.has_next)
    made_older = store.cursors_of(down, before=None, settled=settled, scope=scope)
    newer_lines = newer.lines[: len(made_newer.texts)]
    older_lines = down.lines[: len(made_older.texts)]
    has_newer = newer.has_next or len(newer_lines) < len(newer.lines)
    has_older = older.has_next or len(older_lines) < len(down.lines)
    cursors = [*reversed(made_newer.texts), *made_older.texts]
    info = PageInfo(
        has_next_page=has_older,
        end_cursor=made_older.texts[-1] if made_older.texts else None,
        has_previous_page=has_newer,
        start_cursor=cursors[0] if cursors else None,
    )
    return [*reversed(newer_lines), *older_lines], cursors, info, deadline


def _cut(page: store.Page, wanted: int) -> store.Page:
    """`page` with at most `wanted` lines (a side with none wanted was read for whether it has any)."""
    if len(page.lines) <= wanted:
        return page
    return store.Page(lines=page.lines[:wanted], has_next=True)
