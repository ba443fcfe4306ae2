"""The benchmark: the service against the physical floor, on the operations the clients ship.

    .venv/bin/python -m bench            # the full run: a few minutes
    .venv/bin/python -m bench --quick    # a small version: about a minute
    .venv/bin/python -m bench --big      # also a second database of 10,000,000 lines, read side by side
    .venv/bin/python -m bench --only holds   # a run's holds beside a 50-line page (bench/holds.py)
    .venv/bin/python -m bench --only find    # runLog's filters beside a 50-line page (bench/find.py)
    .venv/bin/python -m bench --against main~1   # also an older revision, served beside this tree

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
import datetime
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import pymysql
import sqlalchemy as sa

from gql import store
from gql.db import metadata
from gql.detail_codec import dump_detail
from gql.kinds import Kind

from .mariadb import MARIADB_URL, connect
from .operations import HOT_RUN, RARE_KIND, WRITE_RUN, Operation, Workload, every_detail_field, shipped_in
from .revision import Refused, Revision, checkout

ROOT = Path(__file__).resolve().parent.parent

# 0: let the kernel place everything (as it does where there is no taskset).
PINNED = os.environ.get("RUNLOG_BENCH_PIN", "1") != "0" and shutil.which("taskset") is not None
LOG_DIR = Path(tempfile.gettempdir())  # the servers' output, runlog-bench-<name>-<port>.log
RUN_LINES = 2500  # lines per run: more than the biggest page
BASE_RUNS = 4  # 4 runs of 2,500: the 10,000-line table
BIG_PAGE, SMALL_PAGE = 2000, 50
TARGETS = ("service", "floor", "sa floor")
FLOORS = TARGETS[1:]
BEFORE = "before"  # the service at the revision given to --against
# The goals, against the floor: a 2,000-line RunLog page's latency, 50-line
# RunLog pages' and WriteNote's requests/s under 8 clients.
BIG_PAGE_GOAL = "<= 1.3"
SMALL_PAGES_GOAL = ">= 0.8"
WRITES_GOAL = ">= 0.9"
NOISE = 0.05  # how far a ratio moves between runs (issue 20): a change worse than this is flagged
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
    name: str,
    database: str,
    workers: int = 1,
    pin: int | None = 0,
    server: sa.URL | None = None,
    revision: Revision | None = None,
) -> Server:
    """Start `name` on `database` of the bench's MariaDB, or of `server` when given."""
    return start_many([name], database, workers, pin, server, revision)[name]


def start_many(
    names: list[str],
    database: str,
    workers: int = 1,
    pin: int | None = 0,
    server: sa.URL | None = None,
    revision: Revision | None = None,
) -> dict[str, Server]:
    """Start each of `names` (`BEFORE` from `revision`'s files), all at once; each, once it answers.

    They start together so that one server's imports overlap another's; a
    server that does not start stops the others.
    """
    if BEFORE in names and revision is None:
        raise ValueError(f"{BEFORE} needs the revision to serve")
    url = (server or MARIADB_URL).set(database=database).render_as_string(hide_password=False)
    env = {**os.environ, "RUNLOG_DATABASE_URL": url, "RUNLOG_LOG_LEVEL": "WARNING"}
    started: dict[str, tuple[subprocess.Popen[bytes], int, str]] = {}
    for name in names:
        port = free_port()
        common = ["--port", str(port), "--workers", str(workers)]
        cwd, server_env = ROOT, env
        if name in ("service", BEFORE):
            command = [sys.executable, "-m", "gql", "serve", *common]
            if name == BEFORE and revision is not None:
                cwd, server_env = revision.tree, revision.env(env)
        else:
            driver = "sqlalchemy" if name == "sa floor" else "physical"
            command = [sys.executable, "-m", "bench.floor", "--driver", driver, *common]
        if pin is not None and PINNED:
            command = ["taskset", "-c", str(pin), *command]
        log_path = LOG_DIR / f"runlog-bench-{name.replace(' ', '-')}-{port}.log"
        with open(log_path, "wb") as log:
            # Our own interpreter and modules, with arguments built here.
            process = subprocess.Popen(  # noqa: S603
                command, env=server_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT
            )
        started[name] = (process, port, str(log_path))
    servers = {name: Server(name, port, process, workers) for name, (process, port, _) in started.items()}
    try:
        for name, (process, port, log_name) in started.items():
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start: see {log_name}")
                time.sleep(0.2)
    except BaseException:
        for each in servers.values():
            each.stop()
        raise
    return servers


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
    targets: tuple[str, ...] = TARGETS
    against: Revision | None = None  # with --against: the revision served as `before`
    rows: list[tuple[str, ...]] = field(default_factory=list)
    changes: list[tuple[str, ...]] = field(default_factory=list)  # with --against: before and now
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def add(
        self,
        case: str,
        unit: str,
        figures: dict[str, float],
        ratio: float,
        goal: str,
        note: str = "",
        before: float | None = None,
        why_not_before: str | None = None,
    ) -> None:
        """A row: the figure of each server, the service's ratio to the floor, and the goal's verdict.

        `before` is the same ratio for the revision given to --against, when it was measured;
        `why_not_before` says why it was not, when it is known.
        """
        if not goal or goal.startswith("("):  # shown, not judged: "(shown)", or what it is, "(per line)"
            verdict = goal or "(shown)"
        else:
            verdict = f"{goal} {'met' if _meets(ratio, goal) else 'NOT met'}"
        cells = [f"{figures[t]:,.1f}" if t in figures else "-" for t in self.targets]
        self.rows.append((case, unit, *cells, f"{ratio:.3f}", verdict, note))
        if self.against is None:
            return
        if before is None:
            why = f": {why_not_before}" if why_not_before else ""
            self.changes.append((case, "-", f"{ratio:.3f}", "-", f"not measured at the revision{why}"))
            return
        now_over = ratio / before
        # Ratios of requests a second are better higher; of times and memory, lower.
        better = now_over > 1 if unit == "req/s" else now_over < 1
        moved = abs(now_over - 1)
        if moved < 0.0005:
            change = "same"
        else:
            change = f"{moved:.1%} {'better' if better else 'worse'}"
            if not better and moved > NOISE:
                change += f" (more than {NOISE:.0%})"
        self.changes.append((case, f"{before:.3f}", f"{ratio:.3f}", f"{now_over:.3f}", change))

    def unmeasured(self, case: str, goal: str, why: str) -> None:
        self.rows.append((case, "", *("-" for _ in self.targets), "-", f"{goal} NOT measured", why))
        if self.against is not None:
            self.changes.append((case, "-", "-", "-", f"NOT measured: {why}"))

    def print(self) -> None:
        head = ("case", "unit", *self.targets, "ratio", "goal", "")
        _table(head, self.rows)
        if self.against is not None:
            print()
            print(f"{BEFORE} = {self.against.label}; now = this tree, as it is on disk")
            _table(("case", f"{BEFORE} ratio", "now ratio", "now/before", "change"), self.changes)
        for note in self.notes:
            print(note)
        for problem in self.failed:
            print(f"!! {problem}")


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


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


def table_size(
    sizes: dict[str, dict[str, Server]],
    cases: dict[str, str] | dict[str, dict[str, str]],
    count: int,
    rounds: int = 5,
) -> dict[str, float]:
    """Median latency of each case's request, per server and table size ("case|name|size").

    `sizes` maps a table size ("small", "big") to its servers; `cases` a
    label to its request body, or to each server's by name. Each of
    `rounds` alternating rounds reads every case, each on every server of
    every size in turn, so cases and sizes are compared at the same moments
    of a noisy machine.
    """
    latencies: dict[str, list[float]] = {}
    jobs, keys = [], []
    for _ in range(rounds):
        for label, body in cases.items():
            for size, servers in sizes.items():
                for name, server in servers.items():
                    jobs.append(
                        {
                            "port": server.port,
                            "mode": "latency",
                            "requests": [["/graphql", body if isinstance(body, str) else body[name]]],
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
                from .holds import measure  # bench/holds.py imports this module

                measure(report, args, plan)
            elif args.only == "find":
                from .find import measure as measure_find  # bench/find.py imports this module

                measure_find(report, args, plan)
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
