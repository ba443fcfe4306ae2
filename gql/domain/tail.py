"""The live side of the log: following a run's new lines (`tail_lines`), and waiting for them (`Watcher`).

The app's one `Watcher` sends one query per RUNLOG_WAIT_INTERVAL, however many wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .. import metrics, store
from ..settings import Settings

log = logging.getLogger("gql.domain.tail")

# A catch-up page's lines and detail bytes: what one tail holds while a slow client takes them.
CATCH_UP_LINES = 500
CATCH_UP_BYTES = 256 * 1024
LATE_MARGIN = 2.0  # for the answer's round trip, and clocks that differ between processes


def late_window(settings: Settings) -> float:
    """Seconds after its `at` within which a line has committed, or never will."""
    return settings.write_timeout + store.ANSWER_GRACE_SECONDS + LATE_MARGIN


class TooManyWaits(Exception):
    """The process already holds RUNLOG_MAX_WAITS waiting calls."""


class Closed(Exception):
    """The watcher stopped: the server is shutting down."""


class Watch:
    """One waiter on one run: `changed()` returns once the run may have new lines."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.closed = False

    async def changed(self, within: float | None = None) -> bool:
        """Wait for a change (True) or `within` seconds (False); raise Closed on shutdown."""
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
        return True


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

    def start(self) -> None:
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="runlog-watcher")

    async def stop(self) -> None:
        """End every wait and tail (they see `Closed`), then the probe."""
        self.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})  # not `await self._task`: a cancel of the caller is the caller's
            self._task = None

    def close(self) -> None:
        """Wake every waiter with `Closed`; no new one may start. Safe to call from anywhere on the loop."""
        self._stopped = True
        for watches in self._watches.values():
            for watch in watches:
                watch.closed = True
                watch.event.set()

    @contextlib.asynccontextmanager
    async def watch(self, run_id: int, *, counted: bool = False) -> AsyncIterator[Watch]:
        """Watch `run_id` until the block ends; `counted` waits count against RUNLOG_MAX_WAITS."""
        if self._stopped:
            raise Closed
        if counted:
            if self.waits >= self.max_waits:
                raise TooManyWaits(
                    f"this server process already holds {self.max_waits} waiting runLog calls "
                    "(RUNLOG_MAX_WAITS); try again shortly, or wait with fewer calls"
                )
            self.waits += 1
        watch = Watch()
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
        # Ends on the flag too: on Python 3.11 a cancel that comes while aiomysql opens a
        # connection can be lost (its asyncio.wait_for, CPython gh-86296), and stop() would wait forever.
        while not self._stopped:
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

        A count, not the newest id: on MariaDB a late commit has a smaller id than lines seen.
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
    """Every line of `run_id` newer than `since` (a cursor; None: from now), oldest first, then each new one.

    Needs `context.engine`, `.settings` and `.watcher`; ends at shutdown. Raises store.CursorError,
    and CatchUpTooLong past `most_catch_up` lines before it first waits.
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
                    )
                made = store.cursors_of(page, before=cursor, settled=settled, scope=scope)
                if made.texts and behind is not None and most_catch_up is not None:
                    if behind + len(made.texts) > most_catch_up:
                        raise CatchUpTooLong(behind)
                    behind += len(made.texts)
                for line, text in zip(page.lines, made.texts, strict=False):
                    yield line._replace(cursor=text)
                if made.texts:
                    cursor = store.decode_cursor(made.texts[-1], "since", scope)
                    if page.has_next and not made.settles_in:
                        continue
                if made.settles_in:
                    # Held back by the cursor's bound until its oldest line settles.
                    await watch.changed(made.settles_in)
                    continue
                behind = None  # caught up: what comes from here on is live
                await watch.changed()
    except Closed:
        return
