"""`retention`, the admin's view of the retention sweeper: its settings, its last sweep, its totals."""

from __future__ import annotations

import asyncio
import datetime
import enum

import strawberry

from .. import store
from ..domain import retention
from ..domain.auth import Action
from .context import Context
from .run_log import answering


@strawberry.enum(description="What one tick of the retention sweeper did.")
class SweepOutcome(enum.Enum):
    SWEPT = strawberry.enum_value(
        "swept", description="It took the sweep lock and pruned a slice (possibly of 0 lines)."
    )
    SKIPPED = strawberry.enum_value(
        "skipped",
        description="Another server process on the same database holds the sweep lock and "
        "sweeps instead: nothing to do here.",
    )
    FAILED = strawberry.enum_value(
        "failed", description="The slice failed; see `error`. The next tick tries again."
    )


@strawberry.type(description="One tick of this server process's retention sweeper.")
class RetentionSweep:
    started_at: datetime.datetime = strawberry.field(description="When the tick began, UTC.")
    finished_at: datetime.datetime = strawberry.field(description="When the tick ended, UTC.")
    horizon: datetime.datetime = strawberry.field(
        description="The horizon it pruned with: lines of terminal runs that ended before this."
    )
    outcome: SweepOutcome = strawberry.field(description="Whether it swept, skipped or failed.")
    lines_deleted: int = strawberry.field(description="Lines the tick deleted.")
    runs_touched: int = strawberry.field(description="Runs the deleted lines belonged to.")
    error: str | None = strawberry.field(
        description="Why the tick failed, in one line; null unless `outcome` is FAILED."
    )


async def _eligible_lines(root: RetentionStatus, info: strawberry.Info[Context, None]) -> int | None:
    if root.horizon is None:
        return None
    context = info.context
    with answering(context, "retention.eligibleLines"):
        async with asyncio.timeout(context.settings.read_timeout):
            return await store.count_eligible(context.engine, before=root.horizon)


@strawberry.type(
    description="Retention as this server process runs it: its settings, what its sweeper "
    "has done since the process started, and what is eligible now. Each process has its own "
    "sweeper; with several on one database, one sweeps at a time and the others skip."
)
class RetentionStatus:
    enabled: bool = strawberry.field(
        description="Whether this process sweeps: true when RUNLOG_RETENTION is set."
    )
    retention: str | None = strawberry.field(
        description="RUNLOG_RETENTION as a duration (`30d`): lines of terminal runs that ended "
        "longer ago than this are pruned. Null when retention is off."
    )
    sweep_interval: str = strawberry.field(
        description="RUNLOG_SWEEP_INTERVAL as a duration (`60s`): the wait between two ticks, "
        "give or take 20% so that processes do not tick in lockstep."
    )
    slice_limit: int = strawberry.field(description="Lines one tick deletes at most.")
    horizon: datetime.datetime | None = strawberry.field(
        description="Now minus the retention: lines of terminal runs that ended before this "
        "are eligible. Null when retention is off."
    )
    last_sweep: RetentionSweep | None = strawberry.field(
        description="This process's last tick; null before its first (or when retention is off)."
    )
    sweeps: int = strawberry.field(description="Ticks of this process since it started.")
    failures: int = strawberry.field(description="Ticks of this process that failed.")
    lines_deleted: int = strawberry.field(
        description="Lines this process's sweeper has deleted since it started."
    )
    eligible_lines: int | None = strawberry.field(
        resolver=_eligible_lines,
        description="How many lines are eligible for pruning now, at `horizon` (counted when "
        "asked, so it may take a moment on a large table). Null when retention is off.",
    )


def retention_status(info: strawberry.Info[Context, None]) -> RetentionStatus:
    context = info.context
    context.require(Action.ADMINISTER, "retention")
    sweeper, settings = context.sweeper, context.settings
    last = None if sweeper is None else sweeper.last
    return RetentionStatus(
        enabled=sweeper is not None,
        retention=None if sweeper is None else retention.format_duration(sweeper.retention),
        sweep_interval=retention.format_duration(settings.sweep_interval),
        slice_limit=store.PRUNE_LIMIT_DEFAULT if sweeper is None else sweeper.limit,
        horizon=None if sweeper is None else sweeper.horizon(),
        last_sweep=None
        if last is None
        else RetentionSweep(
            started_at=last.started_at,
            finished_at=last.finished_at,
            horizon=last.horizon,
            outcome=SweepOutcome(last.outcome.value),
            lines_deleted=last.deleted,
            runs_touched=last.runs,
            error=last.error,
        ),
        sweeps=0 if sweeper is None else sweeper.sweeps,
        failures=0 if sweeper is None else sweeper.failures,
        lines_deleted=0 if sweeper is None else sweeper.deleted,
    )
