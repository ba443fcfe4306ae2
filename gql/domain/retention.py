"""Retention: draining a backlog (`drain`, the `prune` command) and the `Sweeper` that runs in the server.

Both prune one slice at a time (`store.prune_slice`); one process sweeps at a time (`sweep_lock`).
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import hashlib
import logging
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .. import metrics, store
from ..setting_parsers import parse_duration
from ..settings import Settings

log = logging.getLogger("gql.domain.retention")

# The interval times a factor in 1 ± JITTER, so servers started together do not sweep in lockstep.
JITTER = 0.2
SLICE_TIMEOUT = 60.0  # a slice not finished in this long is rolled back, and retried next tick
STOP_GRACE = 5.0  # shutdown waits this long for a slice in flight, then abandons it


def format_duration(seconds: float) -> str:
    """`2592000` as `30d`: the largest unit that divides it, as the settings accept it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def horizon_for(older_than: float, now: datetime.datetime | None = None) -> datetime.datetime:
    """The horizon `older_than` seconds before now, aware UTC; ValueError when it is not in the past."""
    now = datetime.datetime.now(datetime.UTC) if now is None else now
    if not older_than > 0:
        raise ValueError("the horizon would not be in the past: give a positive duration")
    try:
        return now - datetime.timedelta(seconds=older_than)
    except OverflowError:
        raise ValueError("the horizon would be before the year 1: give a shorter duration") from None


def horizon_from(older_than: str, now: datetime.datetime | None = None) -> datetime.datetime:
    """The horizon for a duration as a person types it (`30d`), or a ValueError saying why not."""
    if older_than.strip().startswith("-"):
        raise ValueError(
            f"{older_than!r} is negative: the horizon would be in the future, so every "
            "terminal run's lines would go; give a positive duration such as 30d"
        )
    return horizon_for(parse_duration(older_than), now)


# ── draining a backlog: the `prune` command ──────────────────────────────────


@dataclass(frozen=True, slots=True)
class Drained:
    deleted: int
    runs: int
    slices: int
    elapsed: float


@dataclass(frozen=True, slots=True)
class Progress(Drained):
    """Where a drain stands after a slice."""

    last: store.PruneSlice


async def drain(
    engine: AsyncEngine,
    *,
    before: datetime.datetime,
    limit: int,
    on_slice: Callable[[Progress], None] | None = None,
    slice_timeout: float | None = None,
) -> Drained:
    """Prune slice after slice until a slice finds nothing left to delete (`slices` counts the others)."""
    started = time.monotonic()
    deleted, slices = 0, 0
    runs: set[int] = set()
    while True:
        piece = await store.prune_slice(engine, before=before, limit=limit, deadline=_deadline(slice_timeout))
        # The mutation's rule: call again until it answers 0.
        if piece.deleted == 0:
            break
        slices += 1
        deleted += piece.deleted
        runs |= piece.run_ids
        if on_slice is not None:
            on_slice(
                Progress(
                    deleted=deleted,
                    runs=len(runs),
                    slices=slices,
                    elapsed=time.monotonic() - started,
                    last=piece,
                )
            )
    elapsed = time.monotonic() - started
    return Drained(deleted=deleted, runs=len(runs), slices=slices, elapsed=elapsed)


# ── one sweeper at a time ────────────────────────────────────────────────────


def lock_name(url: URL) -> str:
    """The sweep's `GET_LOCK` name on this database (names are server-wide), at most 64 chars."""
    name = f"runlog.sweep.{url.database or ''}"
    if len(name) > 64:
        name = "runlog.sweep." + hashlib.sha256(name.encode()).hexdigest()[:40]
    return name


# A lease outlives its holder's slice by this much, so a dead holder blocks no longer.
LEASE_MARGIN = 30.0
_LEASE_FREE = "1970-01-02 00:00:00"
_RELEASE_LEASE = text("UPDATE runlog_leases SET expires_at = :free WHERE name = :name AND holder = :holder")


@asynccontextmanager
async def sweep_lock(
    engine: AsyncEngine,
    name: str,
    *,
    wait: float = 0,
    on_wait: Callable[[], None] | None = None,
) -> AsyncIterator[bool]:
    """Hold the sweep lock while the block runs; yield whether it was taken, within `wait` seconds.

    `on_wait` is called once before waiting. On Galera, a lease in `runlog_leases` is held too.
    """
    if engine.dialect.name == "sqlite":
        yield True
        return
    deadline = time.monotonic() + wait
    async with engine.connect() as conn:
        taken = (await conn.execute(text("SELECT GET_LOCK(:name, 0)"), {"name": name})).scalar() == 1
        if not taken and wait > 0:
            if on_wait is not None:
                on_wait()
                on_wait = None
            taken = (
                await conn.execute(text("SELECT GET_LOCK(:name, :wait)"), {"name": name, "wait": wait})
            ).scalar() == 1
        await conn.commit()
        if not taken:
            yield False
            return
        holder: str | None = None
        try:
            if await _on_galera(conn):
                holder = f"{socket.gethostname()[:32]}:{os.getpid()}:{random.getrandbits(48):012x}"
                while not await _claim_lease(conn, name, holder, SLICE_TIMEOUT + LEASE_MARGIN):
                    if time.monotonic() >= deadline:
                        holder = None
                        break
                    if on_wait is not None:
                        on_wait()
                        on_wait = None
                    await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                taken = holder is not None
            yield taken
        finally:
            try:
                if holder is not None:
                    await conn.execute(_RELEASE_LEASE, {"free": _LEASE_FREE, "name": name, "holder": holder})
                await conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": name})
                await conn.commit()
            except BaseException:
                # Closing it releases the lock; it must not go back to the pool holding it.
                await conn.invalidate()
                raise


async def _on_galera(conn: AsyncConnection) -> bool:
    """Whether this server is a node of a Galera cluster (wsrep on)."""
    row = (await conn.execute(text("SHOW VARIABLES LIKE 'wsrep_on'"))).first()
    return row is not None and str(row[1]).upper() == "ON"


async def _claim_lease(conn: AsyncConnection, name: str, holder: str, ttl: float) -> bool:
    """Claim the lease `name` for `ttl` seconds if it is free or expired; answer whether it was."""
    # Of two nodes claiming at once, Galera fails one at commit (1213).
    try:
        await conn.execute(
            text("INSERT IGNORE INTO runlog_leases (name, holder, expires_at) VALUES (:name, '', :free)"),
            {"name": name, "free": _LEASE_FREE},
        )
        await conn.commit()
        claimed = await conn.execute(
            text(
                "UPDATE runlog_leases SET holder = :holder, "
                "expires_at = UTC_TIMESTAMP(3) + INTERVAL :ttl SECOND "
                "WHERE name = :name AND expires_at < UTC_TIMESTAMP(3)"
            ),
            {"holder": holder, "ttl": int(ttl), "name": name},
        )
        await conn.commit()
    except sa_exc.DBAPIError as exc:
        if not store.is_conflict(exc):
            raise
        await conn.rollback()
        return False
    return claimed.rowcount == 1


# ── the sweeper ──────────────────────────────────────────────────────────────


class Outcome(enum.Enum):
    SWEPT = "swept"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Sweep:
    """One tick of the sweeper, as its status shows it."""

    started_at: datetime.datetime  # aware UTC
    finished_at: datetime.datetime
    horizon: datetime.datetime
    outcome: Outcome
    deleted: int
    runs: int
    error: str | None


class Sweeper:
    """Prune one slice per tick, every `interval` seconds (with jitter), in the background."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        retention: float,
        interval: float,
        limit: int = store.PRUNE_LIMIT_DEFAULT,
        lock: str = "runlog.sweep",
        slice_timeout: float = SLICE_TIMEOUT,
    ) -> None:
        if not (retention > 0 and interval > 0):
            raise ValueError(f"retention ({retention}) and interval ({interval}) must be positive seconds")
        self.engine = engine
        self.retention = retention
        self.interval = interval
        self.limit = store.clamp_prune_limit(limit)
        self.lock = lock
        self.slice_timeout = slice_timeout
        self.last: Sweep | None = None
        self.sweeps = 0
        self.failures = 0
        self.deleted = 0
        self._ticking = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, engine: AsyncEngine, settings: Settings) -> Sweeper | None:
        """The sweeper `settings` asks for, or None when retention is off."""
        if settings.retention is None:
            return None
        return cls(
            engine,
            retention=settings.retention,
            interval=settings.sweep_interval,
            lock=lock_name(settings.url),
        )

    def horizon(self) -> datetime.datetime:
        return horizon_for(self.retention)

    async def tick(self) -> Sweep:
        """Take one slice if no other process is sweeping; record and log what happened."""
        async with self._ticking:
            started = datetime.datetime.now(datetime.UTC)
            horizon = horizon_for(self.retention, started)
            clock = time.monotonic()
            outcome, deleted, runs, error = Outcome.SKIPPED, 0, 0, None
            try:
                deadline = _deadline(self.slice_timeout)
                # Bounds the lock's round trips too, past the slice's grace for its COMMIT.
                bound = None if deadline is None else deadline + store.ANSWER_GRACE_SECONDS
                async with asyncio.timeout_at(bound):
                    async with sweep_lock(self.engine, self.lock) as taken:
                        if taken:
                            piece = await store.prune_slice(
                                self.engine, before=horizon, limit=self.limit, deadline=deadline
                            )
                            outcome, deleted = Outcome.SWEPT, piece.deleted
                            runs = len(piece.run_ids)
            except Exception as exc:
                outcome, error = Outcome.FAILED, describe_failure(exc, self.slice_timeout)
            sweep = Sweep(
                started_at=started,
                finished_at=datetime.datetime.now(datetime.UTC),
                horizon=horizon,
                outcome=outcome,
                deleted=deleted,
                runs=runs,
                error=error,
            )
            self._record(sweep, time.monotonic() - clock)
            return sweep

    def _record(self, sweep: Sweep, took: float) -> None:
        self.last = sweep
        self.sweeps += 1
        self.deleted += sweep.deleted
        metrics.sweeper_tick(sweep.outcome.value)
        if sweep.deleted:
            metrics.lines_pruned(sweep.deleted, "sweeper")
        horizon = sweep.horizon.isoformat(timespec="seconds")
        if sweep.outcome is Outcome.SWEPT:
            log.info(
                "retention sweep: %d lines deleted from %d runs, horizon %s, slice of %d, %.2fs",
                sweep.deleted,
                sweep.runs,
                horizon,
                self.limit,
                took,
            )
        elif sweep.outcome is Outcome.SKIPPED:
            log.info(
                "retention sweep: skipped, another process holds the sweep lock %r, horizon %s",
                self.lock,
                horizon,
            )
        else:
            self.failures += 1
            log.warning(
                "retention sweep failed: %s; horizon %s; retrying in about %s",
                sweep.error,
                horizon,
                format_duration(self.interval),
            )

    # ── running in the background ────────────────────────────────────────────

    def start(self) -> None:
        log.info(
            "retention on: a slice of up to %d lines of terminal runs older than %s, every %s",
            self.limit,
            format_duration(self.retention),
            format_duration(self.interval),
        )
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="runlog-retention-sweeper")

    async def _run(self) -> None:
        while not self._stopping.is_set():
            wait = self.interval * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311 (not a secret)
            try:
                await asyncio.wait_for(self._stopping.wait(), wait)
                return
            except TimeoutError:
                pass
            try:
                await self.tick()
            except Exception:  # tick records its own failures; this is a bug
                metrics.swallowed("retention.sweeper")
                log.exception("retention sweeper: unexpected failure, retrying next tick")

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop ticking; wait up to `grace` seconds for a slice in flight, then abandon it."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        done, _ = await asyncio.wait({task}, timeout=grace)
        if not done:
            # Cancelling rolls the slice's transaction back: nothing is half done.
            log.warning(
                "retention sweeper: a slice was still running after %gs at shutdown; "
                "abandoned (rolled back), the next start takes it again",
                grace,
            )
            task.cancel()
            await asyncio.wait({task})


def _deadline(timeout: float | None) -> float | None:
    """The event loop's time `timeout` seconds from now, or None for no deadline."""
    return None if timeout is None else asyncio.get_running_loop().time() + timeout


def describe_failure(exc: BaseException, timeout: float | None = None) -> str:
    """A one-line account of a failed slice, with no SQL and no connection string."""
    if isinstance(exc, TimeoutError):
        within = "" if timeout is None else f" within {timeout:g}s"
        return f"the database did not finish a slice{within}"
    return store.one_line_reason(exc)[:300]
