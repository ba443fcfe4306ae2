"""`python -m bench --only holds`: what a run's holds cost, side by side with a 50-line page.

The hot run's holds (RunHolds, gql/operations: the run, its holds with their
evidence, the holds of the runs blocking it; its phases are RunHead's) and the RunLog
operation's newest 50 lines of the same run, one client, in alternating
rounds, on the bench's 10,000 lines; with `--big`, on a second database of
10,000,000 lines too, read side by side; with `--long-run`, on one run of
1,000,000 lines and 10,000 steps too (bench/long_run.py, kept between benches):

    .venv/bin/python -m bench --only holds --long-run

The goal: the holds take no more than twice the page's latency, on every table,
and as long at 10,000,000 lines as at 10,000. The floors serve no holds, so only
the service is timed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
from typing import Any

from .data import BLOCKING_RUNS, SMALL_PAGE, bench_database, fill_base, fill_big, settle
from .long_run import LINES, STEPS, long_run_database
from .mariadb import connect
from .operations import HOT_RUN, Workload
from .report import Plan, Report, say
from .servers import start_many, table_size

GOAL = "<= 2"  # the holds' latency over the 50-line page's
FLAT_GOAL = "<= 1.2"  # at 10,000,000 lines over at 10,000


def _hot_run_in_flight(database: str) -> None:
    """The hot run as the events system would have it: live, so its holds are read."""
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, 'live', NULL, %s)",
            (HOT_RUN, datetime.datetime(2026, 2, 1)),
        )
    conn.commit()
    conn.close()


def _without_blocking_runs_lines(database: str) -> int:
    """Delete the lines the table's copies gave the runs the hot run's blocks name; how many.

    At 10,000 lines those runs have none: with them, the holds at 10,000,000
    would read their logs too, and the sizes would not be compared on the same work.
    """
    conn = connect(database)
    with conn.cursor() as cur:
        deleted = cur.execute(
            "DELETE FROM event_run_log WHERE run_id BETWEEN %s AND %s",
            (BLOCKING_RUNS[0], BLOCKING_RUNS[-1]),
        )
    conn.commit()
    conn.close()
    return int(deleted)


def measure(report: Report, args: argparse.Namespace, plan: Plan) -> None:
    """The holds and the page, at 10,000 lines (with `--big` at `args.big_lines`, with `--long-run`
    on the long run), into `report`."""
    found: dict[str, float] = {}
    with bench_database() as database:
        fill_base(database)
        _hot_run_in_flight(database)
        servers = start_many(["service"], database)
        try:
            workload = Workload.build(servers["service"].port)
            page, held = workload.read("RunLog"), next(op for op in workload.holds if op.name == "RunHolds")
            assert page is not None, "no RunLog operation in gql/operations"
            cases = {
                f"RunLog, newest {SMALL_PAGE} lines": page.body(SMALL_PAGE),
                "RunHolds": held.body(SMALL_PAGE),
            }
            answer = servers["service"].post(cases["RunHolds"])
            run = answer["data"]["runLog"]["run"]
            report.notes.append(
                f"   RunHolds of run {HOT_RUN}: {len(run['holds'])} holds; headline: {run['headline'][:120]}"
            )
            with contextlib.ExitStack() as others:
                sizes = {"small": servers}
                if args.big:
                    sizes["big"] = others.enter_context(_big(report, args, cases))
                if args.long_run:
                    sizes["long"] = others.enter_context(_long(report, cases))
                found = table_size(sizes, cases, plan.latency_count * plan.latency_rounds)
        finally:
            for server in servers.values():
                server.stop()
    label = "RunHolds"
    page_label = f"RunLog, newest {SMALL_PAGE} lines"
    for size, lines, flag, goals in (
        ("small", "10,000", "", GOAL),
        ("big", f"{args.big_lines:,}", "--big", f"{GOAL}, {FLAT_GOAL}"),
        ("long", f"one run's {LINES:,} ({STEPS:,} steps)", "--long-run", GOAL),
    ):
        if f"{label}|service|{size}" not in found:
            report.unmeasured(f"{label}, {lines} lines", goals, f"run with {flag}")
            continue
        holds_ms, page_ms = found[f"{label}|service|{size}"], found[f"{page_label}|service|{size}"]
        report.add(
            f"{page_label}, {lines} lines",
            "ms",
            {"service": page_ms},
            1.0,
            "",
            "the page the holds are set beside",
        )
        report.add(
            f"{label}, {lines} lines",
            "ms",
            {"service": holds_ms},
            holds_ms / page_ms,
            GOAL,
            "ratio: to the 50-line page, same table",
        )
        if size == "big":
            small = found[f"{label}|service|small"]
            report.add(
                f"{label}, {lines} over 10,000 lines",
                "ms",
                {"service": holds_ms},
                holds_ms / small,
                FLAT_GOAL,
                f"ratio: to the holds at 10,000 lines ({small:.2f} ms)",
            )


@contextlib.contextmanager
def _big(report: Report, args: argparse.Namespace, cases: dict[str, str]) -> Any:
    """The service on a second database of `args.big_lines` lines, for as long as the block runs."""
    with bench_database() as database:
        fill_base(database)
        filled = fill_big(database, args.big_lines, say) - _without_blocking_runs_lines(database)
        _hot_run_in_flight(database)
        settle(database, say)
        big = start_many(["service"], database)
        try:
            run = big["service"].post(cases["RunHolds"])["data"]["runLog"]["run"]
            report.notes.append(f"   filled {filled:,} lines; RunHolds there: {run['headline'][:120]}")
            yield big
        finally:
            for server in big.values():
                server.stop()


@contextlib.contextmanager
def _long(report: Report, cases: dict[str, str]) -> Any:
    """The service on the long run's database (bench/long_run.py), for as long as the block runs."""
    with long_run_database(say) as database:
        settle(database, say)
        long = start_many(["service"], database)
        try:
            run = long["service"].post(cases["RunHolds"])["data"]["runLog"]["run"]
            held = ", ".join(f"{hold['reason']} {hold.get('stepId') or ''}".strip() for hold in run["holds"])
            report.notes.append(f"   the long run's holds: {held}; headline: {run['headline'][:120]}")
            yield long
        finally:
            for server in long.values():
                server.stop()
