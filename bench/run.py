"""The benchmark: the service against the physical floor, on the operations the clients ship.

    .venv/bin/python -m bench            # the full run: a few minutes
    .venv/bin/python -m bench --quick    # a small version: about a minute
    .venv/bin/python -m bench --big      # also a second database of 10,000,000 lines, read side by side

Method. A database of its own is created on the MariaDB at RUNLOG_BENCH_MARIADB_URL
(default root@127.0.0.1:3306), filled with 10,000 lines, and dropped at the end.
Three servers run at once against it, each under uvicorn as `python -m gql
serve` runs it (one worker unless the case says otherwise):

- the service (`python -m gql serve`);
- the floor (`bench/floor.py`): a plain Starlette endpoint taking the same
  request bytes, answering with aiomysql round trips straight to MariaDB (one
  for a page, one more for its blocking runs; one autocommit INSERT for a
  write) and orjson, in the same JSON shape;
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
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pymysql
import sqlalchemy as sa

from gql import store
from gql.db import metadata
from gql.details import dump_detail
from gql.kinds import Kind

from .mariadb import MARIADB_URL, connect
from .operations import HOT_RUN, RARE_KIND, WRITE_RUN, Operation, Workload

ROOT = Path(__file__).resolve().parent.parent

# 0: let the kernel place everything (as it does where there is no taskset).
PINNED = os.environ.get("RUNLOG_BENCH_PIN", "1") != "0" and shutil.which("taskset") is not None
LOG_DIR = Path(tempfile.gettempdir())  # the servers' output, runlog-bench-<name>-<port>.log
RUN_LINES = 2500  # lines per run: more than the biggest page
BASE_RUNS = 4  # 4 runs of 2,500: the 10,000-line table
BIG_PAGE, SMALL_PAGE = 2000, 50
TARGETS = ("service", "floor", "sa floor")
FLOORS = TARGETS[1:]
# The runs a `run.blocked` line names: most are in `event_runs`, the last two are not.
BLOCKING_RUNS = range(30, 42)
KNOWN_BLOCKING = {run: ("completed", "live", "cancelled")[run % 3] for run in BLOCKING_RUNS[:-2]}
# A position halfway down the hot run's 2,500 lines: where "50 after a cursor" reads from.
MIDDLE = store.Cursor(at=datetime.datetime(2026, 3, 1) + datetime.timedelta(milliseconds=40 * 1200), id=10**9)


# ── the data ─────────────────────────────────────────────────────────────────


def _examples() -> dict[Kind, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.details_examples import EXAMPLES

    return EXAMPLES


def base_rows() -> list[tuple[Any, ...]]:
    """10,000 lines: 4 runs written side by side, every kind, some odd rows."""
    examples = _examples()
    kinds = [k for k in Kind if k is not RARE_KIND]
    rng = random.Random(6)
    start = datetime.datetime(2026, 3, 1)
    rows = []
    for i in range(RUN_LINES):
        for run in range(1, BASE_RUNS + 1):
            at = start + datetime.timedelta(milliseconds=40 * i + run)
            if i % 100 == 7:
                kind = RARE_KIND.value
                detail: str | None = dump_detail(examples[RARE_KIND])
            elif i % 250 == 3:
                kind, detail = "note", None  # no detail
            elif i % 250 == 5:
                kind, detail = "run.status", "not json {"  # unreadable
            elif i % 500 == 9:
                kind, detail = "run.teleported", '{"to": "mars"}'  # a kind from a newer writer
            else:
                chosen = kinds[rng.randrange(len(kinds))]
                example = examples[chosen]
                if chosen is Kind.RUN_BLOCKED:
                    example = {**example, "blockingRunId": BLOCKING_RUNS[i % len(BLOCKING_RUNS)]}
                kind, detail = chosen.value, dump_detail(example)
            rows.append((run, (i % 40) or None, kind, i % 5, detail, at))
    return rows


@contextmanager
def bench_database() -> Iterator[str]:
    name = f"runlog_bench_{uuid.uuid4().hex[:10]}"
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        engine = sa.create_engine(MARIADB_URL.set(drivername="mysql+pymysql", database=name))
        metadata.create_all(engine)
        engine.dispose()
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def fill_base(database: str) -> None:
    conn = connect(database)
    rows = base_rows()
    with conn.cursor() as cur:
        for i in range(0, len(rows), 1000):
            cur.executemany(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                rows[i : i + 1000],
            )
        cur.executemany(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, %s, %s, %s)",
            [
                (
                    run,
                    status,
                    None if status == "live" else datetime.datetime(2026, 2, 1),
                    datetime.datetime(2026, 2, 1),
                )
                for run, status in KNOWN_BLOCKING.items()
            ],
        )
        cur.execute("ANALYZE TABLE event_run_log")
        cur.fetchall()
    conn.close()


def count_lines(database: str, run_id: int) -> int:
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM event_run_log WHERE run_id = %s", (run_id,))
        (count,) = cur.fetchone()
    conn.close()
    return int(count)


def fill_big(database: str, target: int, say: Any) -> int:
    """Double the table with INSERT ... SELECT until it holds `target` lines; runs get new ids.

    Each copy is a new block of runs with higher ids, appended at the end of
    every index, so MariaDB writes sequentially; the hot run keeps its lines.
    """
    conn = connect(database)
    with conn.cursor() as cur:
        cur.execute("SET SESSION unique_checks = 0")
        while True:
            cur.execute("SELECT COUNT(*), MAX(run_id) FROM event_run_log")
            count, max_run = cur.fetchone()
            if count >= target:
                break
            take = min(count, target - count)
            started = time.monotonic()
            cur.execute(
                "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
                "SELECT run_id + %s, step_id, kind, phase, detail, at FROM event_run_log "
                "ORDER BY id LIMIT %s",
                (max_run, take),
            )
            say(f"  filled {count + take:,} lines ({time.monotonic() - started:.0f}s)")
        cur.execute("ANALYZE TABLE event_run_log")
        cur.fetchall()
        cur.execute("SELECT COUNT(*) FROM event_run_log")
        (count,) = cur.fetchone()
    conn.close()
    return int(count)


def explain(database: str, kinds: list[str] | None, after: store.Cursor | None) -> list[dict[str, Any]]:
    from sqlalchemy.dialects import mysql

    query = store.page_query(run_id=HOT_RUN, kinds=kinds, limit=SMALL_PAGE, after=after)
    sql = str(query.compile(dialect=mysql.dialect(), compile_kwargs={"literal_binds": True}))
    conn = connect(database)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"EXPLAIN {sql}")
        plan = list(cur.fetchall())
    conn.close()
    return plan


def settle(database: str, say: Any, timeout: float = 60) -> None:
    """Wait (up to `timeout`) until InnoDB has written out most of the fill's dirty pages.

    Otherwise the first reads after a fill compete with the flushing it left
    behind, which has nothing to do with the table's size.
    """
    conn = connect(database)
    started = time.monotonic()
    with conn.cursor() as cur:
        while True:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_%'")
            pages = {name: int(value) for name, value in cur.fetchall() if value.isdigit()}
            dirty, total = pages["Innodb_buffer_pool_pages_dirty"], pages["Innodb_buffer_pool_pages_total"]
            if dirty <= total // 10 or time.monotonic() - started > timeout:
                break
            time.sleep(1)
    conn.close()
    waited = time.monotonic() - started
    say(f"  waited {waited:.0f}s for InnoDB's flushing: {dirty:,} of {total:,} pages dirty")


# ── servers and load ─────────────────────────────────────────────────────────


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    workers: int

    def rss_kib(self) -> int:
        """Resident memory of the serving process(es), from /proc/<pid>/status."""
        pids = [self.process.pid]
        if self.workers > 1:
            pids = _children(self.process.pid)
        total = 0
        for pid in pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total

    def post(self, body: str) -> Any:
        response = httpx.post(
            f"http://127.0.0.1:{self.port}/graphql",
            content=body.encode(),
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        return response.json()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def start(
    name: str, database: str, workers: int = 1, pin: int | None = 0, server: sa.URL | None = None
) -> Server:
    """Start `name` on `database` of the bench's MariaDB, or of `server` when given."""
    port = free_port()
    url = (server or MARIADB_URL).set(database=database).render_as_string(hide_password=False)
    env = {**os.environ, "RUNLOG_DATABASE_URL": url, "RUNLOG_LOG_LEVEL": "WARNING"}
    common = ["--port", str(port), "--workers", str(workers)]
    if name == "service":
        command = [sys.executable, "-m", "gql", "serve", *common]
    else:
        driver = "sqlalchemy" if name == "sa floor" else "physical"
        command = [sys.executable, "-m", "bench.floor", "--driver", driver, *common]
    if pin is not None and PINNED:
        command = ["taskset", "-c", str(pin), *command]
    with open(LOG_DIR / f"runlog-bench-{name.replace(' ', '-')}-{port}.log", "wb") as log:
        # Our own interpreter and modules, with arguments built here.
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start: see {log.name}")
        time.sleep(0.2)
    return Server(name, port, process, workers)


def load(jobs: list[dict[str, Any]], pin: int | None = 1) -> list[dict[str, Any]]:
    """Run `jobs` one after the other in one load-generator process; their results, in order."""
    command = [sys.executable, "-m", "bench.load"]
    if pin is not None and PINNED:
        command = ["taskset", "-c", str(pin), *command]
    done = subprocess.run(  # noqa: S603 -- our own interpreter and module
        command, input=json.dumps(jobs).encode(), capture_output=True, cwd=ROOT, check=True
    )
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def alternate(
    servers: dict[str, Server], rounds: int, job: Callable[[str], dict[str, Any]], pin: int | None = 1
) -> dict[str, list[dict[str, Any]]]:
    """Each server's results of `rounds` rounds, the servers taking turns within each round."""
    names = list(servers)
    jobs = [{**job(name), "port": servers[name].port} for _ in range(rounds) for name in names]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for spec, result in zip(jobs, load(jobs, pin), strict=True):
        name = next(n for n in names if servers[n].port == spec["port"])
        if result["errors"]:
            raise RuntimeError(f"{name} answered {result['errors']} request(s) with an error or false")
        results[name].append(result)
    return results


# ── the report ───────────────────────────────────────────────────────────────


@dataclass
class Report:
    rows: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def add(
        self, case: str, unit: str, figures: dict[str, float], ratio: float, goal: str, note: str = ""
    ) -> None:
        """A row: the figure of each server, the service's ratio to the floor, and the goal's verdict."""
        verdict = "(shown)" if not goal else f"{goal} {'met' if _meets(ratio, goal) else 'NOT met'}"
        cells = [f"{figures[t]:,.1f}" if t in figures else "-" for t in TARGETS]
        self.rows.append((case, unit, *cells, f"{ratio:.3f}", verdict, note))

    def unmeasured(self, case: str, goal: str, why: str) -> None:
        self.rows.append((case, "", "-", "-", "-", "-", f"{goal} NOT measured", why))

    def print(self) -> None:
        head = ("case", "unit", *TARGETS, "ratio", "goal", "")
        widths = [max(len(str(r[i])) for r in [head, *self.rows]) for i in range(len(head))]
        line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()
        print(line)
        print("-" * len(line))
        for row in self.rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        for note in self.notes:
            print(note)
        for problem in self.failed:
            print(f"!! {problem}")


def _meets(ratio: float, goal: str) -> bool:
    op, _, value = goal.partition(" ")
    return ratio <= float(value) if op == "<=" else ratio >= float(value)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


_STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - _STARTED:5.0f}s] {text}", file=sys.stderr, flush=True)


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


def compare_reads(servers: dict[str, Server], op: Operation, limit: int, after: str | None = None) -> str:
    """Ask each server once; raise Mismatch unless the floors answer the service's lines."""
    body = op.body(limit, after)
    return compare_answers({name: server.post(body) for name, server in servers.items()})


def compare_answers(answers: dict[str, Any]) -> str:
    """Raise Mismatch unless every floor's answer has the service's lines; say how alike they are.

    The lines must be the same in number and ids, with the same page info and
    the same fields all the way down. Values may differ where the floor does
    not check (an unreadable detail's `problem`): how many lines are
    byte-identical is said, not required.
    """
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
    return f"{lines} lines, same ids and fields; " + ", ".join(alike)


def compare_writes(servers: dict[str, Server], op: Operation, database: str) -> None:
    """Each server stores one line for one request, and says so."""
    for name, server in servers.items():
        before = count_lines(database, WRITE_RUN)
        answer = server.post(op.body(SMALL_PAGE))
        stored = count_lines(database, WRITE_RUN) - before
        values = list((answer.get("data") or {}).values())
        if "errors" in answer or values != [True] or stored != 1:
            raise Mismatch(f"{name} answered {str(answer)[:200]} and stored {stored} line(s) for one write")


class Mismatch(Exception):
    """A floor does not answer what the service answers: their figures are not comparable."""


# ── the cases ────────────────────────────────────────────────────────────────


@dataclass
class Plan:
    """How long each case runs."""

    latency_rounds: int
    latency_count: int  # requests per server per round
    rate_rounds: int
    rate_seconds: float  # per server per round


def big_page(report: Report, servers: dict[str, Server], op: Operation, plan: Plan, goal: str) -> bool:
    """Time `op` on 2,000-line pages, one client; False when the floors do not answer what it answers."""
    label = f"{op.name}, {BIG_PAGE:,}-line page, 1 client"
    say(f"{label} ({op.origin})")
    try:
        report.notes.append(f"   {op.name}, limit {BIG_PAGE:,}: {compare_reads(servers, op, BIG_PAGE)}")
    except Mismatch as exc:
        report.unmeasured(label, goal or "(shown)", "answers differ")
        report.failed.append(f"{label}: {exc}")
        return False
    request = ["/graphql", op.body(BIG_PAGE)]
    results = alternate(
        servers,
        plan.latency_rounds,
        lambda _name: {"mode": "latency", "requests": [request], "count": plan.latency_count, "warmup": 2},
    )
    figures = {name: median([ms for r in rs for ms in r["latencies_ms"]]) for name, rs in results.items()}
    sizes = ", ".join(f"{name} {rs[-1]['bytes']:,}" for name, rs in results.items())
    report.add(label, "ms", figures, figures["service"] / figures["floor"], goal, f"bytes: {sizes}")
    return True


def rate(
    report: Report,
    servers: dict[str, Server],
    label: str,
    request: list[str],
    plan: Plan,
    goal: str,
    expect_true: bool = False,
    pin: int | None = 1,
) -> dict[str, list[dict[str, Any]]]:
    """Requests a second with 8 clients, in alternating rounds; a row in the report."""
    results = alternate(
        servers,
        plan.rate_rounds,
        lambda _name: {
            "mode": "throughput",
            "requests": [request],
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
    report.add(label, "req/s", figures, figures["service"] / figures["floor"], goal, f"median ms: {p50}")
    return results


def small_pages(report: Report, servers: dict[str, Server], op: Operation, plan: Plan, goal: str) -> bool:
    """Time `op` on 50-line pages, 8 clients; False when the floors do not answer what it answers."""
    label = f"{op.name}, {SMALL_PAGE}-line pages, 8 clients"
    say(f"{label} ({op.origin})")
    try:
        report.notes.append(f"   {op.name}, limit {SMALL_PAGE}: {compare_reads(servers, op, SMALL_PAGE)}")
        if op.has_variable("after"):
            # The next page too: the floors must read a cursor as the service does.
            first = dict(_pages(servers["service"].post(op.body(SMALL_PAGE))["data"]))
            cursor = next(iter(first.values()), {}).get("pageInfo", {}).get("endCursor")
            if cursor is not None:
                found = compare_reads(servers, op, SMALL_PAGE, after=cursor)
                report.notes.append(f"   {op.name}, limit {SMALL_PAGE}, the next page: {found}")
    except Mismatch as exc:
        report.unmeasured(label, goal or "(shown)", "answers differ")
        report.failed.append(f"{label}: {exc}")
        return False
    rate(report, servers, label, ["/graphql", op.body(SMALL_PAGE)], plan, goal)
    return True


def writes(
    report: Report, servers: dict[str, Server], op: Operation, plan: Plan, goal: str, database: str
) -> None:
    label = f"{op.name}, 8 clients"
    say(f"{label} ({op.origin})")
    try:
        compare_writes(servers, op, database)
    except Mismatch as exc:
        report.unmeasured(label, goal or "(shown)", "answers differ")
        report.failed.append(f"{label}: {exc}")
        return
    before = count_lines(database, WRITE_RUN)
    results = rate(report, servers, label, ["/graphql", op.body(SMALL_PAGE)], plan, goal, expect_true=True)
    sent = sum(r["sent"] for rs in results.values() for r in rs)
    stored = count_lines(database, WRITE_RUN) - before
    if stored != sent:
        report.failed.append(f"{label}: {sent:,} writes answered true but {stored:,} lines stored")


def memory(report: Report, server: Server, workload: Workload, first: int, total: int) -> None:
    say(f"service RSS after {first:,} and {total:,} mixed requests")
    mixed = []
    for i in range(100):
        if i % 10 in (1, 2, 3) and workload.writes:
            mixed.append(["/graphql", workload.writes[i % len(workload.writes)].body(SMALL_PAGE)])
        else:
            op = workload.reads[i % len(workload.reads)]
            mixed.append(["/graphql", op.body(BIG_PAGE if i % 20 == 0 else SMALL_PAGE)])

    def batch(begin: int, n: int) -> None:
        requests = []
        for j in range(begin, begin + n):
            if j % 10 == 9:
                # A query text never seen before: the caches must stay bounded.
                text = f"query Unique{j} {{ runLog(runId: {HOT_RUN}, limit: 5) {{ nodes {{ id }} }} }}"
                requests.append(["/graphql", json.dumps({"query": text})])
            else:
                requests.append(mixed[j % len(mixed)])
        (result,) = load([{"port": server.port, "mode": "latency", "requests": requests, "count": n}])
        errors: int = result["errors"]
        return errors

    label = f"service RSS after {total:,} mixed requests"
    errors = batch(0, first)
    after_first = server.rss_kib()
    errors += batch(first, total - first)
    after_total = server.rss_kib()
    if errors:
        report.unmeasured(label, "<= 1.1", "errors")
        report.failed.append(
            f"{label}: {errors:,} of the mixed requests were answered with an error or false"
        )
        return
    report.add(
        label,
        "MiB",
        {"service": after_total / 1024},
        after_total / after_first,
        "<= 1.1",
        f"ratio: growth since {after_first / 1024:.1f} MiB after the first {first:,}",
    )


def workers(report: Report, database: str, op: Operation, plan: Plan) -> None:
    say(f"1 and 2 uvicorn workers, {op.name} {SMALL_PAGE}-line pages, 8 clients, nothing pinned")
    for count in (1, 2):
        servers = {name: start(name, database, workers=count, pin=None) for name in ("service", "floor")}
        try:
            for server in servers.values():
                server.workers = max(server.workers, 2)  # RSS of the children; unpinned load generator
            label = f"{op.name}, {count} worker{'s' if count > 1 else ''}, 8 clients"
            rate(report, servers, label, ["/graphql", op.body(SMALL_PAGE)], plan, "", pin=None)
        finally:
            for server in servers.values():
                server.stop()


def table_size(
    sizes: dict[str, dict[str, Server]], cases: dict[str, str], count: int, rounds: int = 5
) -> dict[str, float]:
    """Median latency of each case's request, per server and table size ("case|name|size").

    `sizes` maps a table size ("small", "big") to its servers. Each case is
    read in `rounds` alternating rounds, every server of every size in turn,
    so the sizes are compared at the same moments of a noisy machine.
    """
    latencies: dict[str, list[float]] = {}
    for label, body in cases.items():
        jobs, keys = [], []
        for _ in range(rounds):
            for size, servers in sizes.items():
                for name, server in servers.items():
                    jobs.append(
                        {
                            "port": server.port,
                            "mode": "latency",
                            "requests": [["/graphql", body]],
                            "count": max(1, count // rounds),
                            "warmup": 3,
                        }
                    )
                    keys.append(f"{label}|{name}|{size}")
        for key, result in zip(keys, load(jobs), strict=True):
            if result["errors"]:
                raise RuntimeError(f"{key}: {result['errors']} error(s)")
            latencies.setdefault(key, []).extend(result["latencies_ms"])
    return {key: median(values) for key, values in latencies.items()}


def size_cases(workload: Workload) -> dict[str, tuple[str, list[str] | None, store.Cursor | None]]:
    """The three reads that must not slow down as the table grows: body, and the statement to EXPLAIN."""
    newest = workload.read("RunLog") or workload.reads[0]
    by_kind = next((op for op in workload.reads if op.has_variable("kinds")), None)
    paged = next((op for op in workload.reads if op.has_variable("after")), newest)
    after = store.encode_cursor(
        store.Line(id=MIDDLE.id, run_id=HOT_RUN, step_id=None, kind="", phase=None, detail=None, at=MIDDLE.at)
    )
    cases: dict[str, tuple[str, list[str] | None, store.Cursor | None]] = {
        f"newest {SMALL_PAGE} ({newest.name})": (newest.body(SMALL_PAGE), None, None)
    }
    if by_kind is not None:
        cases[f"rare kind {RARE_KIND.name} ({by_kind.name})"] = (
            by_kind.body(SMALL_PAGE),
            [RARE_KIND.value],
            None,
        )
    cases[f"{SMALL_PAGE} after a cursor ({paged.name})"] = (paged.body(SMALL_PAGE, after), None, MIDDLE)
    return cases


def big_table(
    report: Report, small: dict[str, Server], workload: Workload, lines: int, count: int
) -> dict[str, list[dict[str, Any]]]:
    """The same reads on a second database of `lines` lines, side by side with the first."""
    say(f"filling {lines:,} lines in a second database")
    cases = size_cases(workload)
    bodies = {label: body for label, (body, _, _) in cases.items()}
    pair = {name: small[name] for name in ("service", "floor")}
    with bench_database() as database:
        fill_base(database)
        fill_started = time.monotonic()
        filled = fill_big(database, lines, say)
        report.notes.append(f"   filled {filled:,} lines in {time.monotonic() - fill_started:.0f}s")
        settle(database, say)
        big = {name: start(name, database) for name in pair}
        try:
            for label, body in bodies.items():
                agreed = compare_answers({name: server.post(body) for name, server in big.items()})
                report.notes.append(f"   {label}, {filled:,} lines: {agreed}")
            found = table_size({"small": pair, "big": big}, bodies, count)
        finally:
            for server in big.values():
                server.stop()
        plans = {label: explain(database, kinds, after) for label, (_, kinds, after) in cases.items()}
    for key, value in found.items():
        label, name, size = key.split("|")
        if size != "big":
            continue
        base = found[f"{label}|{name}|small"]
        if name == "service":
            floor_big, floor_small = found[f"{label}|floor|big"], found[f"{label}|floor|small"]
            report.add(
                f"{label}, {filled:,} lines",
                "ms",
                {"service": value, "floor": floor_big},
                value / base,
                "<= 1.2",
                f"ratio: to the service at 10,000 lines ({base:.2f} ms); "
                f"the floor's is {floor_big / floor_small:.3f}",
            )
    return plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small version, about a minute")
    parser.add_argument("--big", action="store_true", help="also fill 10,000,000 lines and compare")
    parser.add_argument("--big-lines", type=int, default=10_000_000, help=argparse.SUPPRESS)
    parser.add_argument(
        "--only", choices=("reads", "writes"), help="only the read cases, or only the write cases"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    plan = Plan(3, 3, 3, 0.5) if quick else Plan(5, 20, 5, 2.0)
    report = Report()
    started = time.monotonic()
    plans_small: dict[str, list[dict[str, Any]]] = {}
    plans_big: dict[str, list[dict[str, Any]]] = {}
    with bench_database() as database:
        fill_base(database)
        say(f"database {database}: {BASE_RUNS * RUN_LINES:,} lines")
        servers = {name: start(name, database) for name in TARGETS}
        try:
            workload = Workload.build(servers["service"].port)
            for op in workload.skipped:
                report.failed.append(f"{op.name} ({op.origin}) is NOT benchmarked: {op.skip}")
            for op in workload.live:
                say(f"{op.name} ({op.origin}) waits for lines by design: see bench/idle_tails.py, not here")
            if args.only == "writes":
                workload.reads = []
            elif args.only == "reads":
                workload.writes = []
            say(
                "operations: "
                + ", ".join(f"{op.name} ({op.origin})" for op in [*workload.reads, *workload.writes])
            )
            measured = [
                big_page(report, servers, op, plan, "<= 1.5" if op.name == "RunLog" else "")
                and small_pages(report, servers, op, plan, ">= 0.75" if op.name == "RunLog" else "")
                for op in workload.reads
            ]
            # What follows mixes the reads: only those the floors answer alike.
            workload.reads = [op for op, ok in zip(workload.reads, measured, strict=True) if ok]
            if args.only == "writes":
                report.unmeasured("reads", "<= 1.5, >= 0.75, <= 1.2, <= 1.1", "run with --only writes")
            elif workload.read("RunLog") is None:
                report.unmeasured("RunLog pages", "<= 1.5, >= 0.75", "no operation RunLog in gql/operations")
            if workload.reads:
                cases = size_cases(workload)
                plans_small = {
                    label: explain(database, kinds, after) for label, (_, kinds, after) in cases.items()
                }
                if args.big:
                    plans_big = big_table(report, servers, workload, args.big_lines, 10 if quick else 200)
                else:
                    report.unmeasured(f"flat at {args.big_lines:,} lines", "<= 1.2", "run with --big")
                memory(report, servers["service"], workload, *((200, 1000) if quick else (1000, 10_000)))
            elif args.only != "writes":
                report.unmeasured("flat, RSS", "<= 1.2, <= 1.1", "no read the floors answer alike")
            for op in workload.writes:
                writes(report, servers, op, plan, ">= 0.8" if op.name == "WriteNote" else "", database)
            if args.only == "reads":
                report.unmeasured("writes", ">= 0.8", "run with --only reads")
            elif workload.write("WriteNote") is None:
                report.unmeasured("WriteNote", ">= 0.8", "no operation WriteNote in gql/operations")
        finally:
            for server in servers.values():
                server.stop()
        runlog = workload.read("RunLog")
        if not quick and runlog is not None:
            workers(report, database, runlog, plan)
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
