"""A MariaDB read replica (RUNLOG_READ_DATABASE_URL) for runLog's newest-first pages: `Replica`.

`await replica.source(fresh=..., deadline=...)` says where a page reads: the replica while it
is fit, else the primary. Its user needs REPLICA MONITOR (REPLICATION CLIENT before MariaDB 10.5.9).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .. import metrics, store
from ..settings import Settings
from .db import create_engine

log = logging.getLogger("gql.store.replica")

NOT_CHECKED = "not looked at yet"


class Replica:
    """The read replica's engine, whether pages read from it now, and the task that decides."""

    def __init__(self, engine: AsyncEngine, primary: AsyncEngine, settings: Settings) -> None:
        self.engine = engine
        self.primary = primary
        self.settings = settings
        self.in_use = False  # until a look finds it fit
        self.reason: str | None = NOT_CHECKED  # why it is not in use
        self.lag: float | None = None  # Seconds_Behind_Master at the last look
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @classmethod
    def from_settings(cls, primary: AsyncEngine, settings: Settings) -> Replica | None:
        url = settings.read_url
        if url is None:
            return None
        return cls(create_engine(settings, url), primary, settings)

    @property
    def allowance(self) -> float:
        """How far behind the primary a page read on the replica may be: the lag and one interval, seconds."""
        return self.settings.read_max_lag + self.settings.read_check_interval

    def start(self) -> None:
        self._stopped = False
        self._task = asyncio.create_task(self._watch(), name="runlog-replica-monitor")

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})  # as Watcher.stop
            self._task = None
        await self.engine.dispose()

    async def _watch(self) -> None:
        # Ends on the flag too: a cancel that comes while aiomysql opens a connection can be
        # lost on Python 3.11 (see Watcher._run in domain/tail.py).
        while not self._stopped:
            await asyncio.sleep(self.settings.read_check_interval)
            await self.check()

    async def check(self) -> None:
        """Look at the replica once, and switch the pages to or from it."""
        try:
            async with asyncio.timeout(self.settings.connect_timeout + 1):
                async with self.engine.connect() as conn:
                    result = await conn.exec_driver_sql("SHOW ALL SLAVES STATUS")
                    rows = [dict(row._mapping) for row in result]
        except Exception as exc:  # pages read from the primary; logged when that changes
            metrics.swallowed("replica.check")
            self._switch(_unreachable(exc), None)
            return
        reason, lag = judge(rows, self.settings.read_max_lag)
        self._switch(reason, lag)

    def failed(self, exc: BaseException) -> None:
        """A page's read on the replica found it down: set it aside until the next look."""
        self._switch(f"failed a read ({store.one_line_reason(exc)})", self.lag)

    def _switch(self, reason: str | None, lag: float | None) -> None:
        self.lag = lag
        usable = reason is None
        if usable and self.reason == NOT_CHECKED:
            log.info("read replica: runLog pages read from the replica (%s s behind)", _shown_lag(lag))
        elif usable and not self.in_use:
            log.warning("read replica: runLog pages read from it again (%s s behind)", _shown_lag(lag))
        elif not usable and (self.in_use or self.reason == NOT_CHECKED):
            log.warning("read replica: runLog pages read from the primary: the replica %s", reason)
        self.in_use = usable
        self.reason = reason

    async def source(self, *, fresh: bool, deadline: float) -> AsyncEngine:
        """Where a page reads: the replica while it answers and is at most RUNLOG_READ_MAX_LAG behind.

        With `fresh`, only once it has applied every transaction the primary had logged when called.
        """
        if not self.in_use:
            return self.primary
        if not fresh:
            return self.engine
        async with self.primary.connect() as conn:
            position = (await conn.exec_driver_sql("SELECT @@gtid_binlog_pos")).scalar()
        if not position:
            return self.engine  # the primary has logged nothing yet
        left = deadline - asyncio.get_running_loop().time()
        wait = min(self.settings.read_max_lag, left / 2)
        try:
            # The server's own wait, and a connection's worth, at most.
            async with asyncio.timeout(wait + self.settings.connect_timeout), self.engine.connect() as conn:
                reached = (
                    await conn.exec_driver_sql("SELECT MASTER_GTID_WAIT(%s, %s)", (position, wait))
                ).scalar()
        except Exception as exc:
            if not store.is_unavailable(exc):
                raise
            self.failed(exc)
            return self.primary
        if reached != 0:
            log.info("read replica: not at the primary's %s after %.2f s: read the primary", position, wait)
            return self.primary
        return self.engine

    def status(self) -> dict[str, Any]:
        """What /healthz says about the replica."""
        return {
            "state": "in use" if self.in_use else "fallen back",
            "lagSeconds": self.lag,
            "reason": self.reason,
        }


# Each replication thread: its status column, its error's, the error when none is given, and what it does.
_THREADS = (
    ("Slave_SQL_Running", "Last_SQL_Error", "stopped", "does not apply changes"),
    ("Slave_IO_Running", "Last_IO_Error", "not connected", "does not receive changes from its primary"),
)


def judge(rows: list[dict[str, Any]], max_lag: float) -> tuple[str | None, float | None]:
    """Why a replica whose `SHOW ALL SLAVES STATUS` is `rows` may not serve pages (None: it may), its lag."""
    if not rows:
        return "replicates from no primary (SHOW ALL SLAVES STATUS is empty)", None
    lags: list[float] = []
    for row in rows:
        name = row.get("Connection_name") or "default"
        for running, last_error, otherwise, what in _THREADS:
            if row.get(running) != "Yes":
                error = row.get(last_error) or otherwise
                return f"{what} (connection {name!r}, {running}: {row.get(running)}; {error})", None
        behind = row.get("Seconds_Behind_Master")
        if behind is None:
            return f"does not say how far behind it is (connection {name!r})", None
        lags.append(float(behind))
    lag = max(lags)
    if lag > max_lag:
        return f"is {lag:g} s behind its primary, more than RUNLOG_READ_MAX_LAG ({max_lag:g} s)", lag
    return None, lag


def _unreachable(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "did not answer in time"
    original = getattr(exc, "orig", None) or exc
    args = getattr(original, "args", ())
    if args and args[0] in (1227, 1044, 1045, 1142):
        return (
            "refused to show its replication status to this user: grant it REPLICA MONITOR "
            f"(REPLICATION CLIENT before MariaDB 10.5.9) ({store.one_line_reason(exc)})"
        )
    return f"is unreachable ({store.one_line_reason(exc)})"


def _shown_lag(lag: float | None) -> str:
    return "?" if lag is None else f"{lag:g}"
