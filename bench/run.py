"""The benchmark: the service against the physical floor, on the operations the clients ship.

    .venv/bin/python -m bench            # the full run: a few minutes
    .venv/bin/python -m bench --quick    # a small version: about a minute
    .venv/bin/python -m bench --big      # also a second database of 10,000,000 lines, read side by side
    .venv/bin/python -m bench --only holds   # a run's holds beside a 50-line page (bench/holds.py)
    .venv/bin/python -m bench --only holds --long-run   # and on one run of 1,000,000 lines
    .venv/bin/python -m bench --only find    # runLog's filters beside a 50-line page (bench/find.py)
    .venv/bin/python -m bench --against main~1   # also an older revision, served beside this tree

Method. A database of its own is created on the MariaDB at RUNLOG_BENCH_MARIADB_URL
(default root@127.0.0.1:3306), filled with 10,000 lines, and dropped at the end.
Three servers run at once against it, each under uvicorn as `python -m gql
serve` runs it (one worker unless the case says otherwise):

- the service (`python -m gql serve`);
- the floor (`bench/floor.py`): a plain Starlette endpoint taking the same
  request bytes, answering with aiomysql round trips straight to MariaDB (one
  for a page, one more for its blocking runs; for a write, one transaction
  with the line and its words) and orjson, in the same JSON shape;
- the SQLAlchemy floor: the same endpoint through the service's engine
  (pre-ping on checkout, rollback on return, a transaction per write), to
  show what the engine costs.

The workload is `bench/operations.py`: every operation in `gql/operations/`,
with the fragments it uses, as the TypeScript client sends it, plus a page
query built from the service's introspection that selects every field of every
detail type. Before an operation is timed, each server answers it once and the
answers are compared (same lines, same ids, same page info, same fields), so a
floor that does less cannot look fast. Requests come from `bench/load.py`, a
separate process speaking keep-alive HTTP/1.1 with pre-encoded requests. With
one worker each server is pinned to CPU 0 and the load generator to CPU 1 (the
machine has two; MariaDB floats). Each case runs in alternating rounds
(service, floor, SQLAlchemy floor, service, ...), and every goal is the ratio
of the service to the floor in the same run.

With `--against REV` a fourth server runs beside them: the service as it is at
git revision REV (bench/revision.py), on the same database, in the same
alternating rounds (service, before, floor, SQLAlchemy floor, ...). It is sent
its own shipped operation of each name (`operations.as_at_revision`), with the
same variables filled; on every field that operation selects its answers must
equal this tree's before a case is timed, and an operation it did not ship is
timed without it.
A second table gives, for each case, the revision's ratio to the floor, this
tree's, and this tree's over the revision's: a change's effect measured in one
run on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import orjson

from gql import store

from . import find, holds
from .data import (
    BASE_RUNS,
    BIG_PAGE,
    MIDDLE,
    RUN_LINES,
    SMALL_PAGE,
    bench_database,
    count_lines,
    explain,
    fill_base,
    fill_big,
    settle,
)
from .operations import HOT_RUN, RARE_KIND, WRITE_RUN, Operation, Workload, every_detail_field, shipped_in
from .report import Plan, Report, say
from .revision import Refused, checkout
from .servers import (
    BEFORE,
    FLOORS,
    TARGETS,
    Server,
    alternate,
    load,
    median,
    start_many,
    table_size,
)

# The goals, against the floor: a 2,000-line RunLog page's latency, 50-line
# RunLog pages' and WriteNote's requests/s under 8 clients.
BIG_PAGE_GOAL = "<= 1.3"
SMALL_PAGES_GOAL = ">= 0.8"
WRITES_GOAL = ">= 0.9"


# ── do the floors answer what the service answers? ──────────────────────────


def _pages(data: Any) -> Iterator[tuple[str, Any]]:
    """Every page in an answer's data, by its response key."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(value.get("nodes"), list):
                yield key, value


def _shape(value: Any) -> Any:
    """The keys of a JSON value, all the way down, without the values."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return None


_S = TypeVar("_S")  # a server, or what stands for one


def sent(op: Operation, name: str) -> Operation:
    """The operation server `name` is sent for `op`: `before` gets the revision's own of that name."""
    if name == BEFORE and op.at_revision is not None:
        return op.at_revision
    return op


def serving(servers: dict[str, _S], op: Operation) -> dict[str, _S]:
    """The servers `op` is timed on: without `before` when the revision has no operation to send it."""
    theirs = op.at_revision
    if theirs is not None and theirs.skip is not None:
        return {name: server for name, server in servers.items() if name != BEFORE}
    return servers


def why_not_before(servers: dict[str, Server], op: Operation) -> str | None:
    """Why `before` is not sent `op` when it is served, or None."""
    theirs = op.at_revision
    return theirs.skip if BEFORE in servers and theirs is not None else None


def requests_for(
    names: Iterable[str], op: Operation, limit: int, after: str | None = None
) -> dict[str, list[str]]:
    """Each named server's request for `op`: the same variables, in the operation that server is sent."""
    return {name: ["/graphql", sent(op, name).body(limit, after)] for name in names}


def compare_reads(servers: dict[str, Server], op: Operation, limit: int, after: str | None = None) -> str:
    """Ask each server once; raise Mismatch unless the floors answer the service's lines."""
    bodies = requests_for(servers, op, limit, after)
    return compare_answers({name: server.post(bodies[name][1]) for name, server in servers.items()})


def compare_answers(answers: dict[str, Any]) -> str:
    """Raise Mismatch unless every floor's answer has the service's lines; say how alike they are.

    The lines must be the same in number and ids, with the same page info and
    the same fields all the way down. Values may differ where the floor does
    not check (an unreadable detail's `problem`): how many lines are
    byte-identical is said, not required.

    The service at the revision given to --against (`BEFORE`), sent its own
    operation, must answer what this tree answers on every field that
    operation selects (`same_as_before`): two versions of one service that
    answer differently are not doing the same work.
    """
    answers = dict(answers)
    before = answers.pop(BEFORE, None)
    only_here: list[str] = []
    if before is not None:
        only_here = same_as_before(answers["service"], before)
    for name, answer in answers.items():
        if "errors" in answer or "data" not in answer:
            raise Mismatch(f"{name} answered {str(answer)[:300]}")
    service = dict(_pages(answers["service"]["data"]))
    if not service:
        raise Mismatch(f"the service's answer holds no page: {str(answers['service'])[:300]}")
    alike = []
    for name in sorted(answers.keys() - {"service"}):
        floor = dict(_pages(answers[name]["data"]))
        if floor.keys() != service.keys():
            raise Mismatch(f"{name} answered pages {sorted(floor)}, the service {sorted(service)}")
        for key, page in service.items():
            theirs = floor[key]
            ids = [n.get("id") for n in page["nodes"]]
            their_ids = [n.get("id") for n in theirs["nodes"]]
            if ids != their_ids:
                raise Mismatch(
                    f"{name}: {len(their_ids)} lines where the service has {len(ids)}, "
                    f"or not the same ids (first {their_ids[:3]} against {ids[:3]})"
                )
            if page.get("pageInfo") != theirs.get("pageInfo"):
                raise Mismatch(f"{name}: pageInfo {theirs.get('pageInfo')} against {page.get('pageInfo')}")
            for line, their_line in zip(page["nodes"], theirs["nodes"], strict=True):
                if _shape(line) != _shape(their_line):
                    raise Mismatch(f"{name}: line {line.get('id')} has other fields than the service's")
            same = sum(
                orjson.dumps(a) == orjson.dumps(b)
                for a, b in zip(page["nodes"], theirs["nodes"], strict=True)
            )
            alike.append(f"{name} {same}/{len(ids)} lines byte-identical")
    lines = sum(len(p["nodes"]) for p in service.values())
    if before is not None:
        alike.insert(
            0,
            f"{BEFORE} the same answer on the fields both select (this tree's alone: {', '.join(only_here)})"
            if only_here
            else f"{BEFORE} the same answer",
        )
    return f"{lines} lines, same ids and fields; " + ", ".join(alike)


def same_as_before(now: Any, before: Any) -> list[str]:
    """Raise Mismatch, saying where, unless the revision's answer is this tree's on the fields it has.

    The revision is sent its own operation, which may select fewer fields
    than this tree's (none it added since): every field of its answer must be
    in this tree's, with the same value; the fields only this tree's answer
    has are returned (`data.runLog.pageInfo.scanLimitReached`), not compared.
    """
    if "errors" in before and "errors" not in now:
        messages = "; ".join(str(e.get("message")) for e in before["errors"])[:300]
        raise Mismatch(
            f"{BEFORE} (the revision given to --against) answered with errors where this tree did not: "
            f"{messages} (is the operation, or a field it selects, newer than that revision?)"
        )
    only_here: set[str] = set()
    found = _difference(now, before, "", only_here)
    if found is not None:
        where, ours, theirs = found
        raise Mismatch(
            f"{BEFORE} (the revision given to --against) answers otherwise than this tree at "
            f"{where or 'the top'}: {str(theirs)[:200]} there, {str(ours)[:200]} here; "
            "revisions that answer differently are not compared"
        )
    return sorted(only_here)


# Fields whose value is opaque: two revisions may encode a cursor differently
# (this tree's name their run and filter, and have a fixed bound).
OPAQUE = frozenset({"cursor", "startCursor", "endCursor"})


def _difference(a: Any, b: Any, where: str, only_in_a: set[str]) -> tuple[str, Any, Any] | None:
    """The first place where `b` differs from `a` (its path, and each value there), or None.

    An object of `b` may leave out keys `a`'s has: their paths (list indices
    as `[]`) go into `only_in_a`. A key `b` has and `a` lacks is a difference.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        if any(key not in a for key in b):
            return where, list(a), list(b)
        only_in_a.update(
            re.sub(r"\[\d+\]", "[]", f"{where}.{key}" if where else key) for key in a if key not in b
        )
        for key in b:
            if key in OPAQUE and type(a[key]) is type(b[key]):
                continue  # a cursor's text is each revision's own; that both give one is what counts
            found = _difference(a[key], b[key], f"{where}.{key}" if where else key, only_in_a)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _difference(x, y, f"{where}[{i}]", only_in_a)
            if found is not None:
                return found
        return None
    return None if a == b and type(a) is type(b) else (where, a, b)


def compare_writes(servers: dict[str, Server], op: Operation, database: str) -> None:
    """Each server stores one line for one request, and says so."""
    for name, server in servers.items():
        before = count_lines(database, WRITE_RUN)
        answer = server.post(sent(op, name).body(SMALL_PAGE))
        stored = count_lines(database, WRITE_RUN) - before
        values = list((answer.get("data") or {}).values())
        if "errors" in answer or values != [True] or stored != 1:
            which = f"{BEFORE} (the revision given to --against)" if name == BEFORE else name
            raise Mismatch(f"{which} answered {str(answer)[:200]} and stored {stored} line(s) for one write")


class Mismatch(Exception):
    """A floor does not answer what the service answers: their figures are not comparable."""


# ── the cases ────────────────────────────────────────────────────────────────


def big_page(report: Report, servers: dict[str, Server], op: Operation, plan: Plan, goal: str) -> bool:
    """Time `op` on 2,000-line pages, one client; False when the floors do not answer what it answers."""
    label = f"{op.name}, {BIG_PAGE:,}-line page, 1 client"
    say(f"{label} ({op.origin})")
    why = why_not_before(servers, op)
    servers = serving(servers, op)
    try:
        report.notes.append(f"   {op.name}, limit {BIG_PAGE:,}: {compare_reads(servers, op, BIG_PAGE)}")
    except Mismatch as exc:
        report.unmeasured(label, goal or "(shown)", "answers differ")
        report.failed.append(f"{label}: {exc}")
        return False
    requests = requests_for(servers, op, BIG_PAGE)
    results = alternate(
        servers,
        plan.latency_rounds,
        lambda name: {
            "mode": "latency",
            "requests": [requests[name]],
            "count": plan.latency_count,
            "warmup": 2,
        },
    )
    figures = {name: median([ms for r in rs for ms in r["latencies_ms"]]) for name, rs in results.items()}
    sizes = ", ".join(f"{name} {rs[-1]['bytes']:,}" for name, rs in results.items())
    note = f"bytes: {sizes}"
    report.add(label, "ms", figures, _to_floor(figures), goal, note, _before_to_floor(figures), why)
    return True


def rate(
    report: Report,
    servers: dict[str, Server],
    label: str,
    requests: dict[str, list[str]],
    plan: Plan,
    goal: str,
    expect_true: bool = False,
    pin: int | None = 1,
    why_not_before: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Requests a second with 8 clients, in alternating rounds; a row in the report.

    `requests` is each server's request, by its name.
    """
    results = alternate(
        servers,
        plan.rate_rounds,
        lambda name: {
            "mode": "throughput",
            "requests": [requests[name]],
            "clients": 8,
            "seconds": plan.rate_seconds,
            "expect_true": expect_true,
        },
        pin=pin,
    )
    figures = {
        name: sum(r["completed"] for r in rs) / sum(r["seconds"] for r in rs) for name, rs in results.items()
    }
    p50 = ", ".join(
        f"{name} {median([ms for r in rs for ms in r['latencies_ms']]):.1f}" for name, rs in results.items()
    )
    report.add(
        label,
        "req/s",
        figures,
        _to_floor(figures),
        goal,
        f"median ms: {p50}",
        _before_to_floor(figures),
        why_not_before,
    )
    return results


def _to_floor(figures: dict[str, float]) -> float:
    return figures["service"] / figures["floor"]


def _before_to_floor(figures: dict[str, float]) -> float | None:
    """The revision's figure over the floor's, when one was served (--against)."""
    return figures[BEFORE] / figures["floor"] if BEFORE in figures else None


def small_pages(report: Report, servers: dict[str, Server], op: Operation, plan: Plan, goal: str) -> bool:
    """Time `op` on 50-line pages, 8 clients; False when the floors do not answer what it answers."""
    label = f"{op.name}, {SMALL_PAGE}-line pages, 8 clients"
    say(f"{label} ({op.origin})")
    why = why_not_before(servers, op)
    servers = serving(servers, op)
    try:
        report.notes.append(f"   {op.name}, limit {SMALL_PAGE}: {compare_reads(servers, op, SMALL_PAGE)}")
        if op.has_variable("after"):
            # The next page too, each server given the cursor it issued: the
            # floors must read a cursor as the service does (and a revision
            # may encode one otherwise).
            answers = {}
            for name, server in servers.items():
                theirs = sent(op, name)
                first = dict(_pages(server.post(theirs.body(SMALL_PAGE))["data"]))
                cursor = next(iter(first.values()), {}).get("pageInfo", {}).get("endCursor")
                if cursor is not None:
                    answers[name] = server.post(theirs.body(SMALL_PAGE, cursor))
            if answers:
                found = compare_answers(answers)
                report.notes.append(f"   {op.name}, limit {SMALL_PAGE}, the next page: {found}")
    except Mismatch as exc:
        report.unmeasured(label, goal or "(shown)", "answers differ")
        report.failed.append(f"{label}: {exc}")
        return False
    rate(report, servers, label, requests_for(servers, op, SMALL_PAGE), plan, goal, why_not_before=why)
    return True


def writes(
    report: Report, servers: dict[str, Server], op: Operation, plan: Plan, goal: str, database: str
) -> None:
    label = f"{op.name}, 8 clients"
    say(f"{label} ({op.origin})")
    why = why_not_before(servers, op)
    servers = serving(servers, op)
    try:
        compare_writes(servers, op, database)
    except Mismatch as exc:
        report.unmeasured(label, goal or "(shown)", "answers differ")
        report.failed.append(f"{label}: {exc}")
        return
    before = count_lines(database, WRITE_RUN)
    requests = requests_for(servers, op, SMALL_PAGE)
    results = rate(report, servers, label, requests, plan, goal, expect_true=True, why_not_before=why)
    sent = sum(r["sent"] for rs in results.values() for r in rs)
    stored = count_lines(database, WRITE_RUN) - before
    if stored != sent:
        report.failed.append(f"{label}: {sent:,} writes answered true but {stored:,} lines stored")


def memory(report: Report, servers: dict[str, Server], workload: Workload, first: int, total: int) -> None:
    """Resident memory of the service (and of the revision's, with --against) after mixed requests."""
    say(f"service RSS after {first:,} and {total:,} mixed requests")
    # The revision takes the same mix in its own operations, or none: a mix of fewer would not compare.
    unsent = [why for op in [*workload.reads, *workload.writes] if (why := why_not_before(servers, op))]
    if unsent:
        servers = {name: server for name, server in servers.items() if name != BEFORE}

    def mixed(name: str) -> list[list[str]]:
        requests = []
        for i in range(100):
            if i % 10 in (1, 2, 3) and workload.writes:
                op = workload.writes[i % len(workload.writes)]
                requests.append(["/graphql", sent(op, name).body(SMALL_PAGE)])
            else:
                op = workload.reads[i % len(workload.reads)]
                requests.append(["/graphql", sent(op, name).body(BIG_PAGE if i % 20 == 0 else SMALL_PAGE)])
        return requests

    def batch(server: Server, begin: int, n: int) -> int:
        requests = []
        mix = mixed(server.name)
        for j in range(begin, begin + n):
            if j % 10 == 9:
                # A query text never seen before: the caches must stay bounded.
                text = f"query Unique{j} {{ runLog(runId: {HOT_RUN}, limit: 5) {{ nodes {{ id }} }} }}"
                requests.append(["/graphql", json.dumps({"query": text})])
            else:
                requests.append(mix[j % len(mix)])
        (result,) = load([{"port": server.port, "mode": "latency", "requests": requests, "count": n}])
        errors: int = result["errors"]
        return errors

    label = f"service RSS after {total:,} mixed requests"
    rss: dict[str, tuple[int, int]] = {}
    for name, server in servers.items():
        errors = batch(server, 0, first)
        after_first = server.rss_kib()
        errors += batch(server, first, total - first)
        if errors:
            report.unmeasured(label, "<= 1.1", "errors")
            report.failed.append(
                f"{label}: {errors:,} of the mixed requests were answered by {name} with an error or false"
            )
            return
        rss[name] = after_first, server.rss_kib()
    after_first, after_total = rss["service"]
    report.add(
        label,
        "MiB",
        {name: total_kib / 1024 for name, (_, total_kib) in rss.items()},
        after_total / after_first,
        "<= 1.1",
        f"ratio: growth since {after_first / 1024:.1f} MiB after the first {first:,}",
        rss[BEFORE][1] / rss[BEFORE][0] if BEFORE in rss else None,
        "; ".join(unsent) or None,
    )


def workers(report: Report, database: str, op: Operation, plan: Plan) -> None:
    say(f"1 and 2 uvicorn workers, {op.name} {SMALL_PAGE}-line pages, 8 clients, nothing pinned")
    why = op.at_revision.skip if report.against and op.at_revision is not None else None
    names = ["service", BEFORE, "floor"] if report.against and why is None else ["service", "floor"]
    for count in (1, 2):
        servers = start_many(names, database, workers=count, pin=None, revision=report.against)
        try:
            for server in servers.values():
                server.workers = max(server.workers, 2)  # RSS of the children; unpinned load generator
            label = f"{op.name}, {count} worker{'s' if count > 1 else ''}, 8 clients"
            requests = requests_for(servers, op, SMALL_PAGE)
            rate(report, servers, label, requests, plan, "", pin=None, why_not_before=why)
        finally:
            for server in servers.values():
                server.stop()


SizeCase = tuple[Operation, str | None, list[str] | None, store.Cursor | None]


def size_cases(workload: Workload) -> dict[str, SizeCase]:
    """The three reads that must not slow down as the table grows.

    Each is its operation and the cursor it reads after (or None), and the
    kinds and cursor of the statement to EXPLAIN.
    """
    newest = workload.read("RunLog") or workload.reads[0]
    by_kind = next((op for op in workload.reads if op.has_variable("kinds")), None)
    paged = next((op for op in workload.reads if op.has_variable("after")), newest)
    after = store.encode_cursor(
        store.Line(
            id=MIDDLE.id, run_id=HOT_RUN, step_id=None, kind="", phase=None, detail=None, at=MIDDLE.at
        ),
        store.cursor_scope(HOT_RUN, None),
    )
    cases: dict[str, SizeCase] = {f"newest {SMALL_PAGE} ({newest.name})": (newest, None, None, None)}
    if by_kind is not None:
        cases[f"rare kind {RARE_KIND.name} ({by_kind.name})"] = (by_kind, None, [RARE_KIND.value], None)
    cases[f"{SMALL_PAGE} after a cursor ({paged.name})"] = (paged, after, None, MIDDLE)
    return cases


def big_table(
    report: Report, small: dict[str, Server], workload: Workload, lines: int, count: int
) -> dict[str, list[dict[str, Any]]]:
    """The same reads on a second database of `lines` lines, side by side with the first."""
    say(f"filling {lines:,} lines in a second database")
    cases = size_cases(workload)
    pair = {name: server for name, server in small.items() if name in ("service", BEFORE, "floor")}
    unsent = [why for op, _, _, _ in cases.values() if (why := why_not_before(pair, op))]
    if unsent:
        pair.pop(BEFORE)
    bodies = {
        label: {name: body for name, (_, body) in requests_for(pair, op, SMALL_PAGE, after).items()}
        for label, (op, after, _, _) in cases.items()
    }
    with bench_database() as database:
        fill_base(database)
        fill_started = time.monotonic()
        filled = fill_big(database, lines, say)
        report.notes.append(f"   filled {filled:,} lines in {time.monotonic() - fill_started:.0f}s")
        settle(database, say)
        big = start_many(list(pair), database, revision=report.against)
        try:
            for label, body in bodies.items():
                agreed = compare_answers({name: server.post(body[name]) for name, server in big.items()})
                report.notes.append(f"   {label}, {filled:,} lines: {agreed}")
            found = table_size({"small": pair, "big": big}, bodies, count)
        finally:
            for server in big.values():
                server.stop()
        plans = {label: explain(database, kinds, after) for label, (_, _, kinds, after) in cases.items()}
    for key, value in found.items():
        label, name, size = key.split("|")
        if size != "big":
            continue
        base = found[f"{label}|{name}|small"]
        if name == "service":
            floor_big, floor_small = found[f"{label}|floor|big"], found[f"{label}|floor|small"]
            before_big = found.get(f"{label}|{BEFORE}|big")
            figures = {"service": value, "floor": floor_big}
            if before_big is not None:
                figures[BEFORE] = before_big
            report.add(
                f"{label}, {filled:,} lines",
                "ms",
                figures,
                value / base,
                "<= 1.2",
                f"ratio: to the service at 10,000 lines ({base:.2f} ms); "
                f"the floor's is {floor_big / floor_small:.3f}",
                None if before_big is None else before_big / found[f"{label}|{BEFORE}|small"],
                "; ".join(unsent) or None,
            )
    return plans


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    sys.exit(128 + signum)


def _measure(
    report: Report, args: argparse.Namespace, plan: Plan
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Run the cases into `report`; the EXPLAIN of the size cases on the 10,000 lines and the big table."""
    quick = args.quick
    plans_small: dict[str, list[dict[str, Any]]] = {}
    plans_big: dict[str, list[dict[str, Any]]] = {}
    with bench_database() as database:
        fill_base(database)
        say(f"database {database}: {BASE_RUNS * RUN_LINES:,} lines")
        servers = start_many(list(report.targets), database, revision=report.against)
        try:
            workload = Workload.build(servers["service"].port)
            if report.against is not None:
                # The revision is sent what it shipped, and its own page of every detail field.
                label = report.against.label
                theirs = shipped_in(report.against.operation_files(), f"{label}:")
                workload.against([*theirs, every_detail_field(servers[BEFORE].port)], label)
                for op in [*workload.reads, *workload.writes]:
                    if op.at_revision is not None and op.at_revision.skip is not None:
                        say(f"{op.name}: NOT measured for {BEFORE}: {op.at_revision.skip}")
            for op in workload.skipped:
                report.failed.append(f"{op.name} ({op.origin}) is NOT benchmarked: {op.skip}")
            for op in workload.live:
                say(f"{op.name} ({op.origin}) waits for lines by design: see bench/idle_tails.py, not here")
            for op in workload.holds:
                say(f"{op.name} ({op.origin}) reads what holds runs, which no floor serves: see --only holds")
            for op in workload.counts:
                say(f"{op.name} ({op.origin}) counts lines by kind, which no floor serves: see --only find")
            if args.only == "writes":
                workload.reads = []
            elif args.only == "reads":
                workload.writes = []
            say(
                "operations: "
                + ", ".join(f"{op.name} ({op.origin})" for op in [*workload.reads, *workload.writes])
            )
            measured = [
                big_page(report, servers, op, plan, BIG_PAGE_GOAL if op.name == "RunLog" else "")
                and small_pages(report, servers, op, plan, SMALL_PAGES_GOAL if op.name == "RunLog" else "")
                for op in workload.reads
            ]
            # What follows mixes the reads: only those the floors answer alike.
            workload.reads = [op for op, ok in zip(workload.reads, measured, strict=True) if ok]
            if args.only == "writes":
                report.unmeasured(
                    "reads", f"{BIG_PAGE_GOAL}, {SMALL_PAGES_GOAL}, <= 1.2, <= 1.1", "run with --only writes"
                )
            elif workload.read("RunLog") is None:
                report.unmeasured(
                    "RunLog pages",
                    f"{BIG_PAGE_GOAL}, {SMALL_PAGES_GOAL}",
                    "no operation RunLog in gql/operations the floors answer alike",
                )
            if workload.reads:
                cases = size_cases(workload)
                plans_small = {
                    label: explain(database, kinds, after) for label, (_, _, kinds, after) in cases.items()
                }
                if args.big:
                    plans_big = big_table(report, servers, workload, args.big_lines, 10 if quick else 200)
                else:
                    report.unmeasured(f"flat at {args.big_lines:,} lines", "<= 1.2", "run with --big")
                services = {name: servers[name] for name in ("service", BEFORE) if name in servers}
                memory(report, services, workload, *((200, 1000) if quick else (1000, 10_000)))
            elif args.only != "writes":
                report.unmeasured("flat, RSS", "<= 1.2, <= 1.1", "no read the floors answer alike")
            for op in workload.writes:
                writes(report, servers, op, plan, WRITES_GOAL if op.name == "WriteNote" else "", database)
            if args.only == "reads":
                report.unmeasured("writes", WRITES_GOAL, "run with --only reads")
            elif workload.write("WriteNote") is None:
                report.unmeasured("WriteNote", WRITES_GOAL, "no operation WriteNote in gql/operations")
        finally:
            for server in servers.values():
                server.stop()
        runlog = workload.read("RunLog")
        if not quick and runlog is not None:
            workers(report, database, runlog, plan)
    return plans_small, plans_big


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small version, about a minute")
    parser.add_argument("--big", action="store_true", help="also fill 10,000,000 lines and compare")
    parser.add_argument("--big-lines", type=int, default=10_000_000, help=argparse.SUPPRESS)
    parser.add_argument(
        "--long-run",
        action="store_true",
        help="with --only holds: also one run of 1,000,000 lines and 10,000 steps (built once, then kept)",
    )
    parser.add_argument(
        "--only",
        choices=("reads", "writes", "holds", "find"),
        help="only the read cases, only the write cases, only a run's holds beside a page, or only "
        "runLog's filters beside a page",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also serve the service as it is at git revision REV (main~1, a hash...) in the same "
        "rounds, and print each case's ratio at REV, now, and now over REV; REV's requirements.lock "
        "must pin what this tree's does",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="alternating rounds per case (default 3 with --quick, else 5); more make a small change "
        "easier to tell from noise",
    )
    args = parser.parse_args(argv)
    if args.long_run and args.only != "holds":
        parser.error("--long-run times a run's holds: use it with --only holds")
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least 1 round is needed")
    quick = args.quick
    plan = Plan(3, 3, 3, 0.5) if quick else Plan(5, 20, 5, 2.0)
    if args.rounds is not None:
        plan = dataclasses.replace(plan, latency_rounds=args.rounds, rate_rounds=args.rounds)
    started = time.monotonic()
    # A bench stopped with SIGTERM drops its database, stops its servers and removes the
    # revision's files, as one stopped with Ctrl-C does.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main_thread else None
    try:
        with contextlib.ExitStack() as stack:
            revision = None
            if args.against is not None:
                try:
                    revision = stack.enter_context(checkout(args.against))
                except Refused as exc:
                    print(f"python -m bench: {exc}", file=sys.stderr)
                    return 2
                say(f"{BEFORE} = {revision.label}, served from {revision.tree}")
            report = Report(
                targets=TARGETS if revision is None else ("service", BEFORE, *FLOORS), against=revision
            )
            plans_small: dict[str, list[dict[str, Any]]] = {}
            plans_big: dict[str, list[dict[str, Any]]] = {}
            if args.only == "holds":
                holds.measure(report, args, plan)
            elif args.only == "find":
                find.measure(report, args, plan)
            else:
                plans_small, plans_big = _measure(report, args, plan)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    print()
    report.print()
    print()
    for label in plans_small:
        for size, found in (("10,000 lines", plans_small), ("big table", plans_big)):
            if label in found:
                print(f"EXPLAIN {label}, {size}:")
                for row in found[label]:
                    print(
                        "   ",
                        {k: row[k] for k in ("table", "type", "key", "key_len", "ref", "rows", "Extra")},
                    )
    load1, load5, _ = os.getloadavg()
    print(
        f"\n(bench took {time.monotonic() - started:.0f}s; "
        f"load average {load1:.2f} now, {load5:.2f} over 5 minutes)"
    )
    return 1 if report.failed else 0
