"""`python -m bench --only find`: what each of runLog's filters costs, side by side with a 50-line page.

On the bench's hot run, one client, the shipped operations: RunLog's newest
50 lines unfiltered (the page every filter is set beside), then RunLog under
a phase, a step, a time window, `around` a line and a `search`, RunLines
(the run page's operation) under kinds and a phase together, and
RunKindCounts' counts by kind; every case in every round, in alternating
rounds, on the bench's 10,000 lines; with `--big`, on a second database of
10,000,000 lines too, read side by side. The goal: each a latency at most 1.5
times that of the page on the same table, except the search, which reads lines no
index picks: its time is shown over the lines whose words it read (bench/search.py
times a search of a 1,000,000-line run).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gql.kinds import Kind

from .data import SMALL_PAGE, bench_database, count_lines, fill_base, fill_big, settle
from .mariadb import connect
from .operations import HOT_RUN, Operation, Workload
from .report import Plan, Report, say
from .servers import start_many, table_size

GOAL = "<= 1.5"  # a filtered page's latency over the unfiltered 50-line page's
PER_LINE = "(per line)"  # the search: shown as its time over the stored lines it read
PAGE = f"RunLog, newest {SMALL_PAGE} lines"
SEARCH = "RunLog, search 'mars'"
# A 20-second window in the middle of the hot run's lines (bench/data.py's base_rows: one every 40 ms).
SINCE, UNTIL = "2026-03-01T00:00:40Z", "2026-03-01T00:01:00Z"


def _body(op: Operation, **filters: Any) -> str:
    """`op`'s request for a 50-line page of the hot run under `filters` (its variables by name)."""
    payload = {"query": op.text, "variables": {**op.values(SMALL_PAGE), **filters}}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def _middle_line(database: str) -> int:
    """The id of the line halfway down the hot run's log: the one `around` opens the page on."""
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT id FROM event_run_log WHERE run_id = %s ORDER BY at, id LIMIT 1 OFFSET %s",
            (HOT_RUN, count_lines(database, HOT_RUN) // 2),
        )
        (line,) = cur.fetchone()
    conn.close()
    return int(line)


def _cases(workload: Workload, around: int) -> dict[str, str]:
    runlog, lines = workload.read("RunLog"), workload.read("RunLines")
    counts = next((op for op in workload.counts if op.name == "RunKindCounts"), None)
    assert runlog and lines and counts, "RunLog, RunLines and RunKindCounts must be in gql/operations"
    kinds = [Kind.CONDITION_EVALUATED.name, Kind.NOTE.name]
    return {
        PAGE: _body(runlog),
        "RunLog, phase [2]": _body(runlog, phase=[2]),
        "RunLog, stepId [4]": _body(runlog, stepId=["4"]),
        "RunLog, since/until 20 s": _body(runlog, since=SINCE, until=UNTIL),
        "RunLines, 2 kinds and phase [2]": _body(lines, kinds=kinds, phase=[2]),
        "RunKindCounts, whole run": _body(counts),
        "RunKindCounts, phase [2]": _body(counts, phase=[2]),
        "RunLog, around a line": _body(runlog, around=str(around)),
        SEARCH: _body(runlog, search="mars"),
    }


def _answers(server: Any, cases: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each case's page, asked once; raise unless every one is answered without errors."""
    pages = {}
    for label, body in cases.items():
        answer = server.post(body)
        if "errors" in answer or "data" not in answer:
            raise RuntimeError(f"{label}: {str(answer)[:300]}")
        pages[label] = answer["data"]["runLog"]
    return pages


def _lines_read(database: str, search_page: dict[str, Any]) -> int:
    """How many lines' words the search page read: the run's, as the page is not full."""
    if len(search_page["nodes"]) >= SMALL_PAGE:
        raise RuntimeError(f"{SEARCH} filled its page: how many lines it read is not known")
    return count_lines(database, HOT_RUN)


def _notes(report: Report, size: str, pages: dict[str, dict[str, Any]], read: int) -> None:
    shown = []
    for label, page in pages.items():
        if "kindCounts" in page:
            counted = sum(c["count"] for c in page["kindCounts"])
            shown.append(f"{label} {len(page['kindCounts'])} kinds, {counted:,} lines")
        else:
            shown.append(f"{label} {len(page['nodes'])} lines")
    report.notes.append(f"   {size}: " + "; ".join(shown) + f"; the search read {read:,} stored lines")


def measure(report: Report, args: argparse.Namespace, plan: Plan) -> None:
    """Every filter and the page, at 10,000 lines (and with `--big` at `args.big_lines`), into `report`."""
    read: dict[str, int] = {}
    count = plan.latency_count * plan.latency_rounds
    with bench_database() as database:
        fill_base(database)
        servers = start_many(["service"], database)
        try:
            cases = _cases(Workload.build(servers["service"].port), _middle_line(database))
            pages = _answers(servers["service"], cases)
            read["small"] = _lines_read(database, pages[SEARCH])
            _notes(report, "10,000 lines", pages, read["small"])
            if args.big:
                found = _big(report, args, count, cases, servers, read)
            else:
                found = table_size({"small": servers}, cases, count)
        finally:
            for server in servers.values():
                server.stop()
    for size, lines in (("small", "10,000"), ("big", f"{args.big_lines:,}")):
        if f"{PAGE}|service|{size}" not in found:
            report.unmeasured(f"every filter, {lines} lines", f"{GOAL}, {PER_LINE}", "run with --big")
            continue
        page_ms = found[f"{PAGE}|service|{size}"]
        report.add(
            f"{PAGE}, {lines} lines",
            "ms",
            {"service": page_ms},
            1.0,
            "",
            "the page the filters are set beside",
        )
        for label in cases:
            if label not in (PAGE, SEARCH):
                ms = found[f"{label}|service|{size}"]
                note = "ratio: to the 50-line page, same table"
                report.add(f"{label}, {lines} lines", "ms", {"service": ms}, ms / page_ms, GOAL, note)
        ms, lines_read = found[f"{SEARCH}|service|{size}"], read[size]
        report.add(
            f"{SEARCH}, {lines} lines",
            "ms",
            {"service": ms},
            ms / page_ms,
            PER_LINE,
            f"{1000 * ms / lines_read:.2f} us a stored line read ({lines_read:,} read), "
            f"{1000 * (ms - page_ms) / lines_read:.2f} us a line over the page's; ratio: to the 50-line page",
        )


def _big(
    report: Report,
    args: argparse.Namespace,
    count: int,
    cases: dict[str, str],
    small: Any,
    read: dict[str, int],
) -> dict[str, float]:
    """The cases on a second database of `args.big_lines` lines, side by side with the first's."""
    with bench_database() as database:
        fill_base(database)
        filled = fill_big(database, args.big_lines, say)
        settle(database, say)
        big = start_many(["service"], database)
        try:
            # fill_big leaves the hot run's lines as they were: `around` names the same line there.
            pages = _answers(big["service"], cases)
            read["big"] = _lines_read(database, pages[SEARCH])
            _notes(report, f"{filled:,} lines", pages, read["big"])
            return table_size({"small": small, "big": big}, cases, count)
        finally:
            for server in big.values():
                server.stop()
