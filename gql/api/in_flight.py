"""`runsInFlight`: the runs not finished, newest activity first, filtered by what holds them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .. import store
from ..domain.auth import Action
from . import runs
from .context import ClientError, Context
from .limits import served_bytes
from .run_log import answering
from .runs import Run, RunsPage, RunsPageInfo


@dataclass(frozen=True)
class HoldFilter:
    """`runsInFlight`'s filters on what holds a run: all given must hold (None: not asked)."""

    reasons: frozenset[str] | None = None  # HoldReason names: a hold of one of them
    blocking_run_id: int | None = None  # a BLOCKED_BY_RUN hold on this run
    concurrency_key: str | None = None  # a BLOCKED_BY_RUN hold on this key

    @property
    def asked(self) -> bool:
        return (self.reasons, self.blocking_run_id, self.concurrency_key) != (None, None, None)

    def keeps(self, run: Run) -> bool:
        blocks = [hold for hold in run.holds if hold.reason.name == "BLOCKED_BY_RUN"]
        return (
            (self.reasons is None or any(hold.reason.name in self.reasons for hold in run.holds))
            and (
                self.blocking_run_id is None
                or any(hold.blocking_run_id == str(self.blocking_run_id) for hold in blocks)
            )
            and (
                self.concurrency_key is None
                or any(hold.concurrency_key == self.concurrency_key for hold in blocks)
            )
        )


# Runs in flight whose holds one filtered runsInFlight reads at most: a page that examined them
# all ends early (hasNextPage true, its cursor after the last run examined).
FILTERED_RUNS_MAX = 1000


async def read_runs_in_flight(
    context: Context,
    holds: bool,
    limit: int | None,
    after: str | None,
    phases: bool = False,
    only: HoldFilter = HoldFilter(),
    timeline: bool = False,
) -> RunsPage:
    """What `runsInFlight` answers: the runs not terminal, newest activity first (holds if asked),
    those `only` keeps."""
    context.require(Action.READ, "runsInFlight")
    most = store.RUNS_IN_FLIGHT_DEFAULT if not limit else min(max(limit, 1), store.RUNS_IN_FLIGHT_MAX)
    position = None if after is None else runs.decode_cursor(after)
    if after is not None and position is None:
        raise ClientError(
            "after is not a runsInFlight cursor: pass a runsInFlight page's pageInfo.endCursor",
            "BAD_USER_INPUT",
        )
    kept: list[tuple[store.Run, str | None]] = []
    made: dict[int, Run] = {}
    examined = 0
    with answering(context, "runsInFlight"):
        async with asyncio.timeout(context.settings.read_timeout):
            while True:
                found, more = await store.runs_in_flight(context.engine, limit=most, after=position)
                rows = {row.id: row for row, _ in found}
                if holds or only.asked:
                    made.update(await runs.read_runs(context.engine, rows, phases=phases, timeline=timeline))
                examined += len(found)
                for row, activity in found:
                    if len(kept) < most and (not only.asked or only.keeps(made[row.id])):
                        kept.append((row, activity))
                        position = (activity, row.id)
                    elif len(kept) >= most:
                        more = True
                        break
                    else:
                        position = (activity, row.id)
                if len(kept) >= most or not more or examined >= FILTERED_RUNS_MAX:
                    break
    if made:
        # Holds' sentences and evidence count against RUNLOG_MAX_PAGE_BYTES: the page ends where
        # they would pass it (its first run always comes).
        budget = context.details_left()
        fits = 0
        for row, _ in kept:
            run = made.get(row.id)
            if run is not None and not budget.spend(served_bytes(run, runs.MAX_CHAIN), first=fits == 0):
                break
            fits += 1
        if fits < len(kept):
            kept, more = kept[:fits], True
            position = (kept[-1][1], kept[-1][0].id)
    end = None if position is None else runs.encode_cursor(*position)
    return RunsPage(
        nodes=[made.get(row.id) or runs.as_run(row) for row, _ in kept],
        page_info=RunsPageInfo(has_next_page=more, end_cursor=end if kept or more else None),
    )
