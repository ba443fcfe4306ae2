"""The live side of the log: following a run's new lines, and waiting for them.

For the subscription side (`runLogTail`) and anything else that follows a run:

- Call `tail_lines(context, run_id, kinds, since)` and iterate. It needs
  `context.engine`, `context.settings` and `context.watcher` (the app's
  `Watcher`, which `create_app`'s lifespan starts, puts in `app.state.watcher`
  and in every `Context`, and stops before the pool is disposed). Close the
  iterator (`aclose()`, or leave an `async for`) to stop; it ends by itself
  when the watcher stops (shutdown).
- Each item is a `store.Line`, the object a `runLog` page is read into, with
  its `cursor` set; `schema._line` turns it into the `RunLogLine` a page
  returns, cursor included. Database failures are raised as they come
  (`store.is_unavailable` tells a database that is down from a fault).
- The long poll (`runLog(before:, wait:)`) shares the watcher: `Watcher.watch`.

How a line is found, once: every line is read by a `before` read from the
last cursor delivered (`store.read_page(before=...)`), and a cursor remembers
what it delivered (`store.Window`), so a line whose commit was slow and landed
behind lines already delivered is still read, once. A cursor names at most
store.RECENT_LINES recent lines: a burst larger than that within the late
window is delivered up to it at once, and the rest as its oldest lines settle. Nothing is pushed between
processes: a line written by any process of the service is seen by the
watcher's probe.

The watcher costs one query per interval (RUNLOG_WAIT_INTERVAL) per process,
whatever the number of waiting calls and tails: it counts, for every watched
run at once, the lines stamped in the last few seconds (an index range on
`(run_id, at)`), and wakes the waiters of each run whose count changed. A
count rather than the newest id, because ids are given at INSERT and lines
commit in any order on MariaDB: a late commit has a smaller id than lines
already seen, and only the count moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from . import metrics, store
from .settings import Settings

log = logging.getLogger("gql.tail")

# Lines a tail reads at once while it catches up, and the most their stored
# details may weigh together (the page ends early past it, its first line
# whatever its size): what one tail holds while its client takes them, one
# line at a time. Lines of 64 KiB details read at 500 a page held 32 MiB
# for a subscriber that took nothing.
CATCH_UP_LINES = 500
CATCH_UP_BYTES = 256 * 1024
# Added to a write's deadline to bound how late a commit can land after its
# `at`: the answer's round trip, and clocks of server processes that differ
# by up to a second or so.
LATE_MARGIN = 2.0


def late_window(settings: Settings) -> float:
    """Seconds after its `at` within which a line has committed, or never will.

    A line is stamped when it is sent, and its INSERT is bounded by its
    deadline (RUNLOG_WRITE_TIMEOUT from its request's arrival; gql/writes.py);
    the answer's grace (store.ANSWER_GRACE_SECONDS) and a margin for clocks
    come on top.
    """
    return settings.write_timeout + store.ANSWER_GRACE_SECONDS + LATE_MARGIN


class TooManyWaits(Exception):
    """The process already holds RUNLOG_MAX_WAITS waiting calls."""


class Closed(Exception):
    """The watcher stopped: the server is shutting down."""


class Watch:
    """One waiter on one run: `changed()` returns once the run may have new lines."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.event = asyncio.Event()
        self.closed = False
        self.abandoned = False

    def abandon(self) -> None:
        """The waiter's caller is gone: its wait ends now, as if its time were up."""
        self.abandoned = True
        self.event.set()

    async def changed(self, within: float | None = None) -> bool:
        """Wait for a change (True) or `within` seconds (False, or abandoned); raise Closed on shutdown."""
        try:
            if within is None:
                await self.event.wait()
            else:
                async with asyncio.timeout(within):
                    await self.event.wait()
        except TimeoutError:
            return False
        finally:
            self.event.clear()
        if self.closed:
            raise Closed
        return not self.abandoned


class Watcher:
    """This process's watch on the runs its waiters follow: one probe per interval for them all."""

    def __init__(self, engine: AsyncEngine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.interval = settings.wait_interval
        self.max_waits = settings.max_waits
        self.waits = 0  # counted waiters (long polls) now
        self.probes = 0  # probe queries sent since start
        self._watches: dict[int, set[Watch]] = {}
        # Per run: the count of its lines stamped at or after `_since`.
        self._counts: dict[int, int] = {}
        self._since: datetime.datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        _watchers.add(self)

    def start(self) -> None:
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="runlog-watcher")

    async def stop(self) -> None:
        """End every wait and tail (they see `Closed`), then the probe."""
        self.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def close(self) -> None:
        """Wake every waiter with `Closed`; no new one may start. Safe to call from anywhere on the loop."""
        self._stopped = True
        for watches in self._watches.values():
            for watch in watches:
                watch.closed = True
                watch.event.set()

    @property
    def stopped(self) -> bool:
        return self._stopped

    @contextlib.asynccontextmanager
    async def watch(self, run_id: int, *, counted: bool = False) -> AsyncIterator[Watch]:
        """Watch `run_id` until the block ends; `counted` waits count against RUNLOG_MAX_WAITS.

        The first probe after a run is first watched wakes its waiters once
        (no earlier count to compare with), so a line written between a
        waiter's read and that probe is not missed.
        """
        if self._stopped:
            raise Closed
        if counted:
            if self.waits >= self.max_waits:
                raise TooManyWaits(
                    f"this server process already holds {self.max_waits} waiting runLog calls "
                    "(RUNLOG_MAX_WAITS); try again shortly, or wait with fewer calls"
                )
            self.waits += 1
        watch = Watch(run_id)
        self._watches.setdefault(run_id, set()).add(watch)
        try:
            yield watch
        finally:
            if counted:
                self.waits -= 1
            watches = self._watches.get(run_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[run_id]
                    self._counts.pop(run_id, None)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if not self._watches:
                self._counts.clear()
                self._since = None
                continue
            try:
                async with asyncio.timeout(max(self.settings.read_timeout, self.interval)):
                    await self.probe()
            except Exception as exc:  # the next tick tries again
                metrics.swallowed("tail.probe")
                log.warning("the tail's probe failed: %s", store.one_line_reason(exc))

    async def probe(self) -> None:
        """Count the watched runs' recent lines once, and wake the waiters of each run whose count moved.

        Counted from two times in one query: since the last probe's start
        (to compare with its counts) and since a new start (kept for the
        next): a line that lands late still has its `at` after both, as
        long as its commit lags its `at` by less than `late_window`.
        """
        runs = sorted(self._watches)
        since = store.settled_before(late_window(self.settings))
        earlier = self._since or since
        self.probes += 1
        counts = await store.count_recent(self.engine, run_ids=runs, earlier=earlier, since=since)
        woken: list[Watch] = []
        for run_id in runs:
            before, now = counts.get(run_id, (0, 0))
            known = self._counts.get(run_id)
            if known is None or known != before:
                woken.extend(self._watches.get(run_id, ()))
            self._counts[run_id] = now
        self._since = since
        for watch in woken:
            watch.event.set()


_watchers: weakref.WeakSet[Watcher] = weakref.WeakSet()


def close_all() -> None:
    """The server is shutting down: end this process's waits and tails now, not at their timeouts."""
    for watcher in list(_watchers):
        watcher.close()


class CatchUpTooLong(Exception):
    """A tail's catch-up passed the most it may deliver before it has caught up."""


async def tail_lines(
    context: Any,
    run_id: int,
    kinds: list[str] | None,
    since: str | None,
    most_catch_up: int | None = None,
    filters: store.Filters = store.NO_FILTERS,
) -> AsyncIterator[store.Line]:
    """Every line of `run_id` newer than `since` (a cursor), oldest first, then each new one as it is written.

    Without `since`, from now on. Each line once, late commits included,
    whichever process wrote it, until the caller stops iterating or the
    server shuts down (then it simply ends). `kinds` None means every kind;
    `filters` (phase, step, search) keep only the lines that pass them.
    Each line carries its `cursor`: a tail started again with the last one
    delivered misses nothing and repeats nothing. A cursor this service did
    not issue raises store.CursorError. With `most_catch_up`, the lines
    delivered before the tail first waits (the catch-up from `since`) are at
    most that many: past it, CatchUpTooLong, after the last whole page that
    fits (a tail started again from the last cursor delivered goes on).
    """
    engine: AsyncEngine = context.engine
    settings: Settings = context.settings
    watcher: Watcher = context.watcher
    window = late_window(settings)
    if kinds is not None and not kinds:
        kinds_read: Sequence[str] | None = kinds
    else:
        kinds_read = None if kinds is None else sorted(set(kinds))
    try:
        async with watcher.watch(run_id) as watch:
            if since is None:
                async with asyncio.timeout(settings.read_timeout):
                    since = await store.cursor_now(
                        engine,
                        run_id=run_id,
                        kinds=kinds_read,
                        settled=store.settled_before(window),
                        filters=filters,
                    )
            scope = store.cursor_scope(run_id, kinds_read, filters)
            cursor = store.decode_cursor(since, "since", scope)
            behind: int | None = 0  # lines delivered while catching up; None once caught up
            while True:
                watch.event.clear()  # a change from here on is read by the next round
                settled = store.settled_before(window)
                async with asyncio.timeout(settings.read_timeout):
                    page = await store.read_page(
                        engine,
                        run_id=run_id,
                        kinds=kinds_read,
                        limit=CATCH_UP_LINES,
                        after=None,
                        before=cursor,
                        max_detail_bytes=CATCH_UP_BYTES,
                        largest_detail=settings.max_detail_bytes,
                        filters=filters,
                        most_searched=settings.max_search_lines,
                    )
                made = store.cursors_of(page, before=cursor, settled=settled, scope=scope)
                if made.texts and behind is not None and most_catch_up is not None:
                    if behind + len(made.texts) > most_catch_up:
                        raise CatchUpTooLong(behind)
                    behind += len(made.texts)
                for line, text in zip(page.lines, made.texts, strict=False):
                    yield line._replace(cursor=text)
                if made.texts or made.stop:
                    # A search's stop: the lines up to it were read, and none past it.
                    cursor = store.decode_cursor(made.stop or made.texts[-1], "since", scope)
                    if page.has_next and not made.settles_in:
                        continue
                if made.settles_in:
                    # Lines held back by the cursor's bound: still catching
                    # up, they go once the oldest it names has settled.
                    await watch.changed(made.settles_in)
                    continue
                behind = None  # caught up: what comes from here on is live
                await watch.changed()
    except Closed:
        return
