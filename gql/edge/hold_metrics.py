"""The holds of the runs in flight, and of finished runs a failed cleanup holds, as Prometheus series:
what `deploy/prometheus/alerts.yml` alerts on.

The app checks `thresholds(settings)` as it is made and keeps one `HoldSeries` in its lifespan
state. A `/metrics` scrape that may read calls `await series.read(engine)`, then hands
`series.collector(visible)` to `metrics.exposition`.
The series are listed in docs/operating.md ("Alerts on holds").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from sqlalchemy.ext.asyncio import AsyncEngine

from .. import metrics, store
from ..api.runs import read_states
from ..domain.holds import Hold, HoldReason
from ..domain.phrasing import excerpt
from ..settings import Settings, SettingsError

__all__ = ["HOLDS_PER_RUN", "HoldSeries", "thresholds"]

_log = logging.getLogger("gql.metrics")

# Series per run at most: a run held more often is counted in runlog_holds_left_out.
HOLDS_PER_RUN = 10
# A label's text at most, in characters: a label is a key of Prometheus' index, not a document.
SENTENCE_CHARS = 200
SUBJECT_CHARS = 100
# Seconds one read serves the scrapes that follow it: two Prometheus servers scraping together read once.
FRESH_FOR = 1.0
# Finished runs with a failed cleanup looked at per read at most (each is a few numbers here).
FINISHED_MAX = 10_000
SCRAPE_WAIT = 1.0  # seconds a scrape waits for the holds' read before it shows the last ones

_KEY = ("run_id", "reason", "subject")


@dataclass(frozen=True)
class Shown:
    """One hold as the series show it."""

    run_id: int
    reason: str
    subject: str  # what it concerns: `step:<id>`, `group:<name>`, `phase:<n>` or `run`
    since: float  # Unix time
    sentence: str
    url: str
    certain: bool


@dataclass(frozen=True)
class Snapshot:
    """What one read found: the holds shown, what was left out, when and how long it took."""

    holds: tuple[Shown, ...]
    runs_left_out: int
    holds_left_out: int
    read_at: float  # Unix time
    took: float  # seconds


def thresholds(settings: Settings) -> dict[str, float]:
    """Each hold reason's seconds before it alerts; raises SettingsError for a reason that is not one."""
    by_reason = dict(settings.hold_alert_after_by_reason)
    unknown = sorted(set(by_reason) - set(HoldReason.__members__))
    if unknown:
        raise SettingsError(
            f"RUNLOG_HOLD_ALERT_AFTER_BY_REASON names {', '.join(unknown)}, not a hold reason: "
            f"expected some of {', '.join(HoldReason.__members__)}"
        )
    return {reason.name: by_reason.get(reason.name, settings.hold_alert_after) for reason in HoldReason}


class HoldSeries:
    """The open holds of at most `RUNLOG_HOLD_ALERT_RUNS` runs in flight, and of as many finished runs
    with a failed cleanup, read at most once a `FRESH_FOR`.

    One per app's lifespan (its read task runs on the lifespan's event loop; `close` ends it).
    """

    def __init__(self, settings: Settings, after: dict[str, float]) -> None:
        self.after = after
        self.runs = settings.hold_alert_runs
        self.timeout = settings.read_timeout
        self.base = settings.public_url or ""
        self.snapshot: Snapshot | None = None
        self._task: asyncio.Task[None] | None = None
        self._fresh_until = -math.inf
        # Finished runs read and held by nothing, with what their cleanup lines were then.
        self._clean: dict[int, tuple[int, int]] = {}

    async def read(self, engine: AsyncEngine) -> None:
        """Have the holds read again unless a read has just been made, waiting at most SCRAPE_WAIT.

        The read runs on by itself: a scrape is never held longer by a slow or locked database,
        and shows the holds read last (`runlog_holds_read_at_seconds` says when) until it is done.
        """
        task = self._task
        if (task is None or task.done()) and time.monotonic() >= self._fresh_until:
            task = self._task = asyncio.get_running_loop().create_task(self._refresh(engine))
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), SCRAPE_WAIT)

    async def close(self) -> None:
        """End a read still running (the lifespan's end)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task})  # as Watcher.stop (domain/tail.py)

    async def _refresh(self, engine: AsyncEngine) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                self.snapshot = await self._read(engine)
        except Exception:
            # The last holds stay shown, and runlog_holds_read_at_seconds says how old they are:
            # an alert never resolves because the database did not answer.
            metrics.swallowed("metrics.holds")
            _log.exception("reading the holds for /metrics failed; it shows the holds read before")
        self._fresh_until = time.monotonic() + FRESH_FOR

    async def _read(self, engine: AsyncEngine) -> Snapshot:
        started = time.monotonic()
        found, more = await store.runs_in_flight(engine, limit=self.runs, after=None)
        rows = {row.id: row for row, _ in found}
        runs_left_out = await store.count_in_flight(engine) - len(rows) if more else 0
        # A finished run is held only by a failed cleanup: those with such a line, but for the ones
        # found clean before whose cleanup lines have not changed since.
        ended, all_ended = await store.finished_with_failed_cleanups(engine, limit=FINISHED_MAX)
        self._clean = {run_id: lines for run_id, lines in self._clean.items() if ended.get(run_id) == lines}
        unread = [run_id for run_id in ended if run_id not in self._clean and run_id not in rows]
        runs_left_out += all_ended - len(ended) + max(len(unread) - self.runs, 0)
        unread = unread[: self.runs]
        _, states = await read_states(engine, rows, unread=unread)
        shown: dict[tuple[int, str, str], Shown] = {}
        holds_left_out = 0
        for run_id in unread:
            state = states.get(run_id)
            if state is None or not state.holds:
                self._clean[run_id] = ended[run_id]
        for run_id in [*rows, *unread]:
            state = states.get(run_id)
            held = [] if state is None else state.holds
            holds_left_out += max(len(held) - HOLDS_PER_RUN, 0)
            for hold in held[:HOLDS_PER_RUN]:
                one = self._shown(run_id, hold)
                shown.setdefault((run_id, one.reason, one.subject), one)
        return Snapshot(
            tuple(shown.values()),
            max(runs_left_out, 0),
            holds_left_out,
            time.time(),
            time.monotonic() - started,
        )

    def _shown(self, run_id: int, hold: Hold) -> Shown:
        if hold.step_id is not None:
            subject = f"step:{hold.step_id}"
        elif hold.group is not None:
            subject = f"group:{hold.group}"
        elif hold.phase is not None:
            subject = f"phase:{hold.phase}"
        else:
            subject = "run"
        return Shown(
            run_id=run_id,
            reason=hold.reason.name,
            subject=excerpt(subject, SUBJECT_CHARS),
            since=hold.since.timestamp(),
            sentence=excerpt(hold.sentence, SENTENCE_CHARS),
            url=f"{self.base}/runs/{run_id}",
            certain=hold.certain,
        )

    def collector(self, visible: bool) -> _Collector:
        """The series for one scrape; `visible`: whether its caller may read (else no hold is shown)."""
        return _Collector(self, visible)


@dataclass(frozen=True)
class _Collector:
    series: HoldSeries
    visible: bool

    def collect(self) -> Iterator[Metric]:
        after = GaugeMetricFamily(
            "runlog_hold_alert_after_seconds",
            "Seconds a hold of this reason lasts before it is alerted on (RUNLOG_HOLD_ALERT_AFTER, "
            "RUNLOG_HOLD_ALERT_AFTER_BY_REASON).",
            labels=["reason"],
        )
        for reason, seconds in self.series.after.items():
            after.add_metric([reason], seconds)
        yield after
        yield GaugeMetricFamily(
            "runlog_holds_visible",
            "1 when this scrape may read the holds (reads are open, or it sent a reader's token), else 0: "
            "no hold is shown and none can alert.",
            value=1 if self.visible else 0,
        )
        snapshot = self.series.snapshot
        if not self.visible or snapshot is None:
            return
        since = GaugeMetricFamily(
            "runlog_hold_since_seconds",
            "When each open hold of a run began (Unix time), by run, reason and what it concerns.",
            labels=list(_KEY),
        )
        info = InfoMetricFamily(
            "runlog_hold",
            "Each open hold's sentence (its first characters) and the URL of its run's page.",
            labels=list(_KEY),
        )
        for hold in snapshot.holds:
            key = [str(hold.run_id), hold.reason, hold.subject]
            since.add_metric(key, hold.since)
            told = {"sentence": hold.sentence, "url": hold.url, "certain": str(hold.certain).lower()}
            info.add_metric(key, told)
        yield since
        yield info
        yield GaugeMetricFamily(
            "runlog_hold_runs_left_out",
            "Runs whose holds were not read: in flight, or finished with a failed cleanup, past the "
            "RUNLOG_HOLD_ALERT_RUNS newest of each.",
            value=snapshot.runs_left_out,
        )
        yield GaugeMetricFamily(
            "runlog_holds_left_out",
            f"Holds read but not shown: past the first {HOLDS_PER_RUN} of a run.",
            value=snapshot.holds_left_out,
        )
        yield GaugeMetricFamily(
            "runlog_holds_read_at_seconds",
            "When the holds shown were read (Unix time): older than a scrape ago when the last read failed.",
            value=snapshot.read_at,
        )
        yield GaugeMetricFamily(
            "runlog_holds_read_duration_seconds",
            "How long reading the holds shown took.",
            value=snapshot.took,
        )
