"""The folder: keeps every line's words (`event_run_log_words`) ahead of the searches, in the background.

Each tick probes the highest line id; when lines came since the last look, it finds the first line
with no words kept and folds up to a batch of that line's run, as a search's catch-up would
(`store.words.catch_up`), so the words kept are always ones a search could have kept. A search still
folds what the folder has not reached: its results never depend on the folder, only its speed.
It reads and keeps through the readers' pool, never the writes'; one process folds at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from .retention import lock_name, sweep_lock
from .settings import Settings
from .store.connections import read_rows
from .store.errors import one_line_reason
from .store.statements import first_unfolded_statement, newest_line_statement
from .store.words import catch_up
from .tail import late_window

log = logging.getLogger("gql.folder")

# The ids one tick looks through for a line without words: a restart walks a folded log in steps.
WINDOW_BATCHES = 10
TICK_TIMEOUT = 60.0  # a tick not finished in this long is given up; what it kept stays kept
STOP_GRACE = 5.0  # shutdown waits this long for a tick in flight, then cancels it


class WordsNotKept(RuntimeError):
    """The database refused the words a tick folded."""


class Folder:
    """Fold up to `batch` lines without words per tick, every `interval` seconds, in the background."""

    def __init__(
        self, engine: AsyncEngine, *, batch: int, interval: float, late: float, lock: str = "runlog.fold"
    ) -> None:
        self.engine = engine
        self.batch = batch
        self.interval = interval
        self.late = late
        self.lock = lock
        # Every line with an id up to `seen` had its words kept when the folder last looked.
        self.seen = 0
        self.highest = 0  # the highest line id at the last look
        self.folded = 0
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, engine: AsyncEngine, settings: Settings) -> Folder:
        """The folder `settings` describe; with RUNLOG_FOLD_INTERVAL off, one to `drain` by hand."""
        return cls(
            engine,
            batch=settings.fold_batch,
            interval=settings.fold_interval or 1.0,
            late=late_window(settings),
            lock=lock_name(settings.url, "fold"),
        )

    async def tick(self) -> int:
        """Fold the lines of one batch, if any line has no words; answer how many were folded."""
        if not await self._behind():
            return 0  # nothing new: the one index probe
        async with sweep_lock(self.engine, self.lock) as taken:
            if not taken:
                return 0  # another process folds
            return await self._fold_next(self.batch)

    async def drain(self, *, run_id: int | None = None, on_batch: Callable[[int], None] | None = None) -> int:
        """Fold every line without words (of `run_id`, or all runs) now; answer how many were folded.

        A run at a time, whole: a big run's lines are read once, not from its start again for each
        batch. Waits for a folder of a server to finish its tick; `on_batch` is told the total after
        each run.
        """
        async with sweep_lock(self.engine, self.lock, wait=TICK_TIMEOUT) as taken:
            if not taken:
                raise TimeoutError(f"another process held the lock {self.lock!r} for {TICK_TIMEOUT:g}s")
            while True:
                if run_id is not None:
                    await self._fold_run(run_id, None)
                    done = True
                else:
                    folded_lines = await self._fold_next(None) if await self._behind() else 0
                    done = folded_lines == 0 and self.seen >= self.highest
                if on_batch is not None:
                    on_batch(self.folded)
                if done:
                    return self.folded

    async def _behind(self) -> bool:
        """Whether lines came since the folder last looked (the one index probe)."""
        [(highest,)] = await read_rows(self.engine, newest_line_statement())
        self.highest = highest or 0
        return self.highest > self.seen

    async def _fold_next(self, most: int | None) -> int:
        """Fold up to `most` lines of the run of the first line past `seen` without words (the lock held)."""
        upto = min(self.highest, self.seen + self.batch * WINDOW_BATCHES)
        rows = await read_rows(self.engine, first_unfolded_statement(), {"seen": self.seen, "upto": upto})
        if not rows:
            self.seen = upto
            return 0
        [(line_id, run_id)] = rows
        self.seen = line_id - 1
        folded = await self._fold_run(run_id, most)
        if folded == 0:
            # A search's catch-up would not read this line either (it finds it by its id):
            # go on past it rather than look at it forever.
            self.seen = line_id
        return folded

    async def _fold_run(self, run_id: int, most: int | None) -> int:
        """Fold up to `most` of the run's lines without words (None: all), as its search's catch-up would."""
        folded = await catch_up(
            self.engine, self.engine, run_id=run_id, needle=None, late=self.late, most=most
        )
        if not folded.kept:
            # Logged by keep_words: tried again next tick; a search folds them meanwhile.
            raise WordsNotKept("the database did not keep the words folded (see the warning before)")
        self.folded += folded.lines
        return folded.lines

    # ── running in the background ────────────────────────────────────────────

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        log.info("folder on: the words of up to %d lines per tick, every %gs", self.batch, self.interval)
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="runlog-words-folder")

    async def _run(self) -> None:
        wait = self.interval
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), wait)
                return
            except TimeoutError:
                pass
            started = time.monotonic()
            try:
                async with asyncio.timeout(TICK_TIMEOUT):
                    folded = await self.tick()
            except Exception as exc:
                timed_out = isinstance(exc, TimeoutError)
                reason = f"not done within {TICK_TIMEOUT:g}s" if timed_out else one_line_reason(exc)[:300]
                log.warning("folder: a tick failed: %s; retrying in %gs", reason, self.interval)
                folded = 0
            # A backlog (after a migration, a restart) is worked through tick after tick, resting as
            # long as each took, so the folder takes at most about half of one reader's time.
            behind = folded > 0 or self.seen < self.highest
            wait = min(self.interval, time.monotonic() - started) if behind else self.interval

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop ticking; wait up to `grace` seconds for a tick in flight, then cancel it."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        done, _ = await asyncio.wait({task}, timeout=grace)
        if not done:
            # What it kept stays kept; the rest is the next tick's (or a search's).
            log.warning("folder: a tick was still running after %gs at shutdown; cancelled", grace)
            task.cancel()
            await asyncio.wait({task})
        log.info("folder stopped: the words of %d lines kept since it started", self.folded)
