"""What `runLog` does: read a page (or wait for one), its runs and what was pruned, by one deadline."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .. import metrics, store
from ..domain import tail
from ..domain.admission import Busy
from ..domain.auth import Action
from ..domain.detail_codec import read_values
from ..ids import id_problem, parse_id
from ..kinds import Kind
from ..request_id import note
from . import runs, writes
from .around import read_around
from .context import ClientError, Context
from .filters import FilterError, read_filters
from .limits import served_bytes
from .page import Asked, KindCount, PageInfo, PrunedLines, RunLogPage, kind_of
from .runs import Run

log = logging.getLogger("gql.runlog")

MAX_WAIT_SECONDS = 30  # runLog's `wait`: under the usual 60 s idle timeout of proxies


async def _find_runs(
    context: Context,
    lines: list[store.Line],
    deadline: float,
    page_run: int | None,
    holds: bool,
    phases: bool = False,
    timeline: bool = False,
) -> tuple[dict[int, Run] | Exception, Run | Exception | None]:
    """The runs the page's blocked lines name, and the page's own run, in one query, by `deadline`.

    With `holds`, their holds too (and with `phases` and `timeline`, their steps). A failed lookup
    is returned in their place, for graphql-core to raise.
    """
    blocked = Kind.RUN_BLOCKED.value
    wanted: list[int] = []
    for line in lines:
        if line.kind == blocked and line.detail is not None:
            values = read_values(blocked, line.detail)
            if type(values) is dict:
                number = parse_id(values["blocking_run_id"])
                if number is not None:
                    wanted.append(number)
    if page_run is not None:
        wanted.append(page_run)
    if not wanted:
        return {}, None
    found: dict[int, Run] | Exception
    try:
        async with asyncio.timeout_at(deadline):
            if holds:  # each run's row is read with its lines
                found = await runs.read_runs(
                    context.engine, {}, phases=phases, timeline=timeline, unread=wanted
                )
            else:
                rows = await store.find_runs(context.engine, wanted)
                found = {run_id: runs.as_run(row) for run_id, row in rows.items()}
    except Exception as exc:  # raised at each `blockingRun` (and the page's `run`), not swallowed
        found = failure(context, "run lookup", exc)
    if holds and not isinstance(found, Exception):
        weight = sum(served_bytes(run, runs.MAX_CHAIN) for run in found.values())
        if not context.details_left().spend(weight):
            found = ClientError(
                f"The holds of the runs this page names carry {weight} bytes of sentences and evidence, "
                "more than is left of the request's RUNLOG_MAX_PAGE_BYTES after its lines' details; "
                "ask for a smaller page, or for the runs' holds without the lines' details",
                "PAGE_TOO_LARGE",
            )
    if page_run is None:
        return found, None
    if isinstance(found, Exception):
        return found, found
    return found, found.get(page_run)


# ── operations ───────────────────────────────────────────────────────────────


async def read_run_log(
    context: Context,
    asked: Asked,
    servings: Callable[[], Any],
    *,
    run_id: Any,
    kinds: list[str] | None,
    limit: int | None,
    after: str | None,
    before: str | None,
    wait: int | None,
    fresh: bool | None,
    phase: list[int] | None = None,
    step_id: list[Any] | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    search: str | None = None,
    around: Any = None,
) -> RunLogPage:
    """What `runLog` answers, its arguments as graphql-core coerced them (`kinds` as wire names).

    `asked` is what the field selects; `servings()` how its details are served, called only if read.
    """
    context.require(Action.READ, "runLog")
    number = parse_id(run_id)
    note(run_id=number)
    if number is None:
        raise ClientError(
            id_problem("runId", run_id),
            "BAD_USER_INPUT",
        )
    if after is not None and before is not None:
        raise ClientError(
            "after and before cannot be given together: after reads the lines older than its "
            "cursor, before the lines newer than its cursor; pass one of them",
            "BAD_USER_INPUT",
        )
    if wait is not None and not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ClientError(f"wait must be 0 to {MAX_WAIT_SECONDS} seconds, got {wait}", "BAD_USER_INPUT")
    if wait and before is None:
        raise ClientError(
            "wait needs before: pass a page's pageInfo.startCursor as before, to wait for the "
            "lines written after it",
            "BAD_USER_INPUT",
        )
    try:
        filters = read_filters(phase=phase, step_id=step_id, since=since, until=until, search=search)
    except FilterError as exc:
        raise ClientError(str(exc), "BAD_USER_INPUT") from None
    line_id = None
    if around is not None:
        line_id = _line_id(around)
        if after is not None or before is not None or wait:
            raise ClientError(
                "around cannot be given with after, before or wait: around opens the page at a "
                "line; go on from its endCursor (after) or startCursor (before)",
                "BAD_USER_INPUT",
            )
    wire_kinds = kinds
    scope = store.cursor_scope(number, wire_kinds, filters)
    try:
        cursor = store.decode_cursor(after, "after", scope) if after is not None else None
        newer = store.decode_cursor(before, "before", scope) if before is not None else None
    except store.CursorError as exc:
        raise ClientError(str(exc), "BAD_USER_INPUT") from None
    window = tail.late_window(context.settings)
    loop = asyncio.get_running_loop()

    def read_on(engine: AsyncEngine, max_detail_bytes: int | None) -> Awaitable[store.Page]:
        return store.read_page(
            engine,
            run_id=number,
            kinds=wire_kinds,
            limit=store.clamp_read_limit(limit),
            after=cursor,
            before=newer,
            detail=asked.detail,
            max_detail_bytes=max_detail_bytes,
            largest_detail=context.settings.max_detail_bytes,
            filters=filters,
        )

    # Only pages read newest first may read a replica.
    replica = context.replica if newer is None else None

    async def read_once() -> tuple[store.Page, datetime.datetime, float]:
        # One deadline for the page and, when selected, its runs.
        deadline = loop.time() + context.settings.read_timeout
        # Taken before the read (see tail.late_window), less what a replica may trail by.
        trails = replica.allowance if replica is not None and replica.in_use and not fresh else 0.0
        settled = store.settled_before(window + trails)

        async def read(max_detail_bytes: int | None) -> store.Page:
            if replica is None:
                return await read_on(context.engine, max_detail_bytes)
            source = await replica.source(fresh=bool(fresh), deadline=deadline)
            if source is not context.engine:
                try:
                    # Half the read's time at most, so the primary has the rest.
                    async with asyncio.timeout((deadline - loop.time()) / 2):
                        return await read_on(source, max_detail_bytes)
                except Exception as exc:
                    if not store.is_unavailable(exc):
                        raise
                    metrics.swallowed("replica.read")
                    log.warning(
                        "runLog of run %d: request %s: the replica failed (%s): read from the primary",
                        number,
                        context.request_id,
                        _reason(exc),
                    )
                    replica.failed(exc)
            return await read_on(context.engine, max_detail_bytes)

        async def page_by_deadline() -> store.Page:
            async with asyncio.timeout_at(deadline):
                # A page without details weighs nothing against the budget.
                if asked.detail:
                    return await context.details_left().read(read, servings())
                return await read(None)

        with answering(context, f"runLog of run {number}"), _admitted(context, filters.search):
            page = await page_by_deadline()
        return page, settled, deadline

    def cursors_of(page: store.Page, settled: datetime.datetime) -> store.PageCursors | None:
        if not (asked.cursor or asked.ends):
            return None
        return store.cursors_of(page, before=newer, settled=settled, scope=scope, only_ends=not asked.cursor)

    if line_id is not None:
        with _admitted(context, filters.search):
            around_read = await read_around(
                context,
                asked,
                servings,
                run_id=number,
                line_id=line_id,
                kinds=wire_kinds,
                filters=filters,
                scope=scope,
                limit=limit,
                answering=answering,
            )
        lines, cursors, info_, deadline = around_read
        return await _completed(
            context, asked, number, filters, deadline, info_, lines, cursors, pruned=False
        )
    page, settled, deadline = await read_once()
    made = cursors_of(page, settled)
    if wait and context.watcher is not None and not _delivers(page, made):
        polled = await _long_poll(
            context, number, wait, read_once, cursors_of, 0.0 if made is None else made.settles_in
        )
        if polled is not None:
            page, settled, deadline, made = polled
    lines = page.lines
    cursors = [] if made is None else made.texts
    # Cut where a cursor would name more than store.RECENT_LINES: the rest is the next page's.
    has_more = page.has_next
    if made is not None and len(cursors) < len(lines):
        lines, has_more = lines[: len(cursors)], True
    if newer is not None:
        # Read oldest first; shown newest first, as every page.
        lines = lines[::-1]
        cursors.reverse()
        info_ = PageInfo(
            has_next_page=True,
            end_cursor=cursors[-1] if cursors else None,
            has_previous_page=has_more,
            start_cursor=cursors[0] if cursors else before,
        )
    else:
        start = cursors[0] if cursors else None
        if not lines and cursor is None and (asked.ends or asked.cursor):
            start = store.encode_cursor(store.Cursor(at=None, id=0), scope, store.Window(settled=settled))
        info_ = PageInfo(
            has_next_page=has_more,
            end_cursor=cursors[-1] if cursors else None,
            has_previous_page=cursor is not None and cursor.at is not None,
            start_cursor=start,
        )
    return await _completed(
        context,
        asked,
        number,
        filters,
        deadline,
        info_,
        lines,
        cursors,
        pruned=newer is None and not has_more,
    )


async def _completed(
    context: Context,
    asked: Asked,
    number: int,
    filters: store.Filters,
    deadline: float,
    info_: PageInfo,
    lines: list[store.Line],
    cursors: list[str],
    *,
    pruned: bool,
) -> RunLogPage:
    """The page of `lines`, with what else its field selects (runs, what was pruned, kindCounts)."""
    metrics.lines_read(len(lines))
    found: dict[int, Run] | Exception | None = None
    run: Run | Exception | None = None
    if asked.blocking_run or asked.run:
        found, run = await _find_runs(
            context, lines, deadline, number if asked.run else None, asked.holds, asked.phases, asked.timeline
        )
    pruned_lines: PrunedLines | Exception | None = None
    if asked.pruned and pruned:
        pruned_lines = await _pruned(context, number, deadline)
    return RunLogPage(
        page_info=info_,
        run=run,  # an exception in its place: see _find_runs
        pruned=pruned_lines,  # type: ignore[arg-type]
        kind_counts=await _kind_counts(context, number, filters, deadline) if asked.kind_counts else [],
        lines=lines,
        line_cursors=cursors if asked.cursor else [None] * len(lines),
        runs=found,
    )


def _delivers(page: store.Page, made: store.PageCursors | None) -> bool:
    """Whether a `before` page has something for its caller: lines."""
    if made is None:
        return bool(page.lines)
    return bool(made.texts)


def _line_id(value: Any) -> int:
    """`around` as a line id; refused (BAD_USER_INPUT) when it is not one."""
    text = str(value)
    digits = not isinstance(value, bool) and text.isascii() and text.isdigit() and len(text.lstrip("0")) <= 19
    if not digits or not 1 <= int(text) <= store.LINE_ID_MAX:
        raise ClientError(
            f"around must be a line's id, a positive integer, got {value!r:.60}", "BAD_USER_INPUT"
        )
    return int(text)


async def _kind_counts(
    context: Context, run_id: int, filters: store.Filters, deadline: float
) -> list[KindCount]:
    """The page's kindCounts: one grouped query, by the page's deadline."""
    with answering(context, f"kindCounts of run {run_id}"):
        async with asyncio.timeout_at(deadline):
            counted = await store.count_kinds(context.engine, run_id=run_id, filters=filters)
    return [KindCount(kind=kind_of(kind), kind_name=kind, count=count) for kind, count in counted]


async def _pruned(context: Context, run_id: int, deadline: float) -> PrunedLines | Exception | None:
    """What pruning took from the run's log, by `deadline`; a failure in its place (see _find_runs)."""
    try:
        async with asyncio.timeout_at(deadline):
            found = await store.find_pruned(context.engine, run_id)
    except Exception as exc:  # raised at the page's `pruned`, not swallowed
        return failure(context, "pruned lines", exc)
    if found is None:
        return None
    return PrunedLines(lines=found.lines, through=found.through, pruned_at=found.pruned_at)


async def _long_poll(
    context: Context,
    run_id: int,
    seconds: int,
    read_once: Callable[[], Awaitable[tuple[store.Page, datetime.datetime, float]]],
    cursors_of: Callable[[store.Page, datetime.datetime], store.PageCursors | None],
    settles_in: float,
) -> tuple[store.Page, datetime.datetime, float, store.PageCursors | None] | None:
    """Wait up to `seconds` for the run's next lines, then read them; None when none came.

    Ends early at shutdown, and is cancelled when its client leaves (hangup.py); lines held back
    by the cursor's bound are read again after `settles_in` seconds.
    """
    watcher = context.watcher
    if watcher is None:
        return None
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    try:
        with metrics.long_poll_waiting():  # runlog_long_polls_waiting
            async with watcher.watch(run_id, counted=True) as watch:
                while (left := end - loop.time()) > 0:
                    held_back = 0 < settles_in < left
                    changed = await watch.changed(settles_in if held_back else left)
                    if not changed and not held_back:
                        return None
                    page, settled, deadline = await read_once()
                    made = cursors_of(page, settled)
                    if _delivers(page, made):
                        return page, settled, deadline, made
                    settles_in = 0.0 if made is None else made.settles_in
    except tail.TooManyWaits as exc:
        raise ClientError(str(exc), "TOO_MANY_WAITS") from None
    except tail.Closed:
        return None
    return None


def _admitted(context: Context, search: str | None) -> contextlib.AbstractContextManager[None]:
    """Count a search among RUNLOG_MAX_SEARCHES while it reads; refused with TOO_MANY_SEARCHES past it."""
    if search is None or context.admissions is None:  # None: an export's page, admitted as the export
        return contextlib.nullcontext()
    try:
        return context.admissions.searches.enter()
    except Busy as exc:
        log.warning("runLog search refused: request %s: %s", context.request_id, exc.message)
        raise ClientError(exc.message, exc.code, retryAfter=exc.retry_after, limit=exc.most) from None


@contextlib.contextmanager
def answering(context: Context, what: str) -> Iterator[None]:
    """Around `what`'s reads: a database down, slow or busy is DATABASE_UNAVAILABLE (logged)."""
    try:
        yield
    except Exception as exc:
        if not store.is_unavailable(exc):
            raise  # a fault of this server: masked, and logged with its stack
        raise unavailable(context, what, exc) from None


def failure(context: Context, what: str, exc: Exception) -> Exception:
    """`exc` as the client sees it: DATABASE_UNAVAILABLE (logged) for a database that failed."""
    return unavailable(context, what, exc) if store.is_unavailable(exc) else exc


def unavailable(context: Context, what: str, exc: Exception) -> ClientError:
    """The `ClientError` (DATABASE_UNAVAILABLE) for a database that is down, slow or busy; logged here."""
    log.error("%s failed: request %s: %s", what, context.request_id, _reason(exc))
    return ClientError(
        f"The run log's database is not answering; try again shortly (request id {context.request_id}).",
        "DATABASE_UNAVAILABLE",
        requestId=context.request_id,
    )


def _reason(exc: BaseException) -> str:
    """A one-line account of a failure for the server's log."""
    if isinstance(exc, TimeoutError):
        return "the database did not answer in time"
    return store.one_line_reason(exc)


async def write_line(context: Context, path: Sequence[str | int], **arguments: Any) -> bool:
    """What `writeRunLog` does (for the resolver and the write plan): writes.py's write path.

    A line not stored is noted in `context` under its field's response `path` (api/writes.py).
    """
    problem = await context.writer.write_run_log(
        may_write=context.policy.allows(context.caller, Action.WRITE),
        request_id=context.request_id,
        arrived=context.arrived,
        **arguments,
    )
    if problem is not None:
        writes.note(context, path, problem)
    return problem is None
