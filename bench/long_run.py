"""One long run for `python -m bench --only holds --long-run`: 1,000,000 lines, 10,000 steps.

`long_run_database(say)` is a context manager giving the name of a MariaDB database that
holds only that run (bench/operations.py's HOT_RUN, live), built the first time and
kept for the next bench (`runlog_bench_long_run`); it is built again when this
module's data or the tables it is built on change, or with `rebuild=True`.

The run, as the events system would write it: ten phases of 1,000 steps each, every
phase entered, most gated, evaluated and advanced; steps pending, running and done,
one in ten retried, their lines interleaved with the resources they record, notes,
health changes and gate evaluations. Phases 2 to 9 completed. Still open at the end:
from its first minutes, a step of phase 1 parked on a human (so phase 1 never
completed) and a cleanup group that did not come back; in phase 10, three steps
parked, two refused, and its gate. An early block was ended by the run's start.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.schema import CreateTable

from gql.store.db import metadata

from .mariadb import MARIADB_URL, connect
from .operations import HOT_RUN

__all__ = ["LINES", "STEPS", "long_run_database"]

DATABASE = "runlog_bench_long_run"
LINES, STEPS, PHASES = 1_000_000, 10_000, 10
# Changed whenever what `_lines` writes changes, so that a kept database is built again.
VERSION = "1"
START = datetime.datetime(2026, 4, 1, 9, 0)
TICK = datetime.timedelta(milliseconds=10)
BATCH = 5000  # rows an INSERT

Row = tuple[int | None, str, int | None, str, datetime.datetime]  # step, kind, phase, detail, at


def _d(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


STATUS = {(a, b): _d({"from": a, "to": b}) for a, b in (("pending", "running"), ("running", "done"))}
PENDING = _d({"to": "pending"})
FILLERS = [
    (
        "resource.recorded",
        _d({"resourceId": 5, "resourceType": "npc", "externalId": "0x4001", "ownership": "CREATED"}),
    ),
    (
        "resource.recorded",
        _d({"resourceId": 6, "resourceType": "item", "externalId": "0x77", "ownership": "BORROWED"}),
    ),
    ("note", _d({"text": "checked the spawn points by hand", "actor": "gm.alice"})),
    (
        "condition.evaluated",
        _d({"matched": False, "condition": "boss.spawned", "mismatch": "spawned in Britain"}),
    ),
    ("run.health", _d({"from": "ok", "to": "degraded", "reason": "module timeouts"})),
    ("resource.orphaned", _d({"resourceId": 5, "resourceType": "npc", "externalId": "0x4001"})),
]
PARKED = _d({"waitingFor": "a GM to confirm the reward"})
REFUSED = _d({"refusal": "OVER_CAP", "cap": "spawns", "limit": 40, "used": 40})
GATE = _d({"condition": "boss.spawned", "parameters": {"region": "Yew"}})
ADVANCED = _d({"via": "FIRING", "firing": "boss.spawned"})


def _step_lines(rng: random.Random, step: int, fill: int) -> list[tuple[int | None, str, str]]:
    """One step's lines, oldest first: pending, running, perhaps a retry, what it did, done."""
    lines: list[tuple[int | None, str, str]] = [(step, "step.status", PENDING)]
    lines.append((step, "step.status", STATUS["pending", "running"]))
    if rng.random() < 0.1:
        lines.append((step, "step.retry", _d({"attempt": 1, "maxAttempts": 3, "error": "timeout"})))
        lines.append((step, "step.status", STATUS["pending", "running"]))
    for _ in range(fill):
        kind, detail = FILLERS[rng.randrange(len(FILLERS))]
        lines.append((step if kind != "condition.evaluated" else None, kind, detail))
    lines.append((step, "step.status", STATUS["running", "done"]))
    return lines


def _phase_rows(rng: random.Random, phase: int, clock: Iterator[datetime.datetime]) -> Iterator[Row]:
    """A phase's lines in the order they are written: its steps' lines interleaved."""
    steps = range((phase - 1) * (STEPS // PHASES) + 1, phase * (STEPS // PHASES) + 1)
    per_step = LINES // STEPS - 1  # the steps' own lines and the phases' come to about LINES
    yield None, "phase.entered", phase, _d({"stepIds": list(steps)}), next(clock)
    if phase % 3:
        yield None, "phase.gate", phase, GATE, next(clock)
        for _ in range(3):
            yield None, "condition.evaluated", phase, FILLERS[3][1], next(clock)
        yield None, "phase.advanced", phase, ADVANCED, next(clock)
    pending = {step: _step_lines(rng, step, rng.randrange(2 * per_step)) for step in steps}
    if phase == 1:  # parked in the run's first minutes, never released
        del pending[1]
        yield 1, "step.status", phase, PENDING, next(clock)
        yield 1, "step.parked", phase, PARKED, next(clock)
    if phase == PHASES:  # still going: three parked, two refused, the rest partway
        for step in list(steps)[:3]:
            pending[step] = [(step, "step.status", PENDING), (step, "step.parked", PARKED)]
        for step in list(steps)[3:5]:
            pending[step] = [(step, "step.status", PENDING), (step, "step.refused", REFUSED)]
        for step in list(steps)[500:]:
            pending[step] = pending[step][: len(pending[step]) // 2]
    # Interleaved: each line from a step picked at random among those with lines left.
    order = [step for step, lines in pending.items() for _ in lines]
    rng.shuffle(order)
    taken = dict.fromkeys(pending, 0)
    for step in order:
        step_id, kind, detail = pending[step][taken[step]]
        taken[step] += 1
        yield step_id, kind, phase, detail, next(clock)
    if phase == PHASES:
        yield None, "phase.gate", phase, GATE, next(clock)
        yield None, "condition.evaluated", phase, FILLERS[3][1], next(clock)
    elif phase != 1:
        by_status = [{"status": "done", "count": len(steps)}]
        yield (
            None,
            "phase.completed",
            phase,
            _d({"stepCount": len(steps), "byStatus": by_status}),
            next(clock),
        )


def _rows() -> Iterator[Row]:
    """Exactly LINES lines: the run's, topped up with notes where its steps wrote fewer."""
    written = 0
    for row in itertools.islice(_written(), LINES):
        written += 1
        yield row
    clock = (START + TICK * (10 * LINES + i) for i in range(LINES))
    for _ in range(LINES - written):
        yield None, "note", None, FILLERS[2][1], next(clock)


def _written() -> Iterator[Row]:
    rng = random.Random(45)
    clock = (START + TICK * i for i in range(10 * LINES))
    yield None, "run.created", None, _d({"eventId": 12, "eventVersion": "3"}), next(clock)
    yield None, "run.blocked", None, _d({"blockingRunId": 37, "concurrencyKey": "invasion:Yew"}), next(clock)
    yield None, "run.status", None, _d({"from": "scheduled", "to": "live"}), next(clock)
    failed = {
        "group": "warmup",
        "resourceIds": [1],
        "error": "in a backpack",
        "leftAs": "untouched",
        "attempt": 1,
    }
    yield None, "cleanup.failed", None, _d(failed), next(clock)
    for phase in range(1, PHASES + 1):
        yield from _phase_rows(rng, phase, clock)


def _fingerprint() -> str:
    """What the kept database was built from: this data's version and the tables' DDL."""
    ddl = "".join(
        str(CreateTable(table).compile(dialect=mysql.dialect())) for table in metadata.sorted_tables
    )
    return hashlib.sha256(f"{VERSION}|{LINES}|{STEPS}|{ddl}".encode()).hexdigest()[:32]


def _kept(fingerprint: str) -> bool:
    conn = connect()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = 'bench_built'",
                (DATABASE,),
            )
            if not cur.fetchone()[0]:
                return False
            conn.select_db(DATABASE)
            cur.execute("SELECT fingerprint FROM bench_built")
            row = cur.fetchone()
            return row is not None and row[0] == fingerprint
    finally:
        conn.close()


def _build(fingerprint: str, say: Callable[[str], None]) -> int:
    conn = connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
        cur.execute(f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4")
    conn.close()
    engine = sa.create_engine(MARIADB_URL.set(drivername="mysql+pymysql", database=DATABASE))
    metadata.create_all(engine)
    engine.dispose()
    conn = connect(DATABASE)
    started, written = time.monotonic(), 0
    with conn.cursor() as cur:
        cur.execute("SET SESSION unique_checks = 0")
        batch: list[tuple[Any, ...]] = []
        for step, kind, phase, detail, at in _rows():
            batch.append((HOT_RUN, step, kind, phase, detail, at))
            if len(batch) == BATCH:
                written += _insert(cur, batch)
                batch = []
                if written % 100_000 == 0:
                    say(f"  long run: {written:,} lines ({time.monotonic() - started:.0f}s)")
        written += _insert(cur, batch)
        cur.execute(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, 'live', NULL, %s)",
            (HOT_RUN, START),
        )
        cur.execute("ANALYZE TABLE event_run_log")
        cur.fetchall()
        # Written last: a build stopped partway is not taken for a whole one.
        cur.execute("CREATE TABLE bench_built (fingerprint VARCHAR(64) NOT NULL)")
        cur.execute("INSERT INTO bench_built VALUES (%s)", (fingerprint,))
    conn.close()
    say(f"  long run: {written:,} lines, {STEPS:,} steps, built in {time.monotonic() - started:.0f}s")
    return written


def _insert(cur: Any, rows: list[tuple[Any, ...]]) -> int:
    if rows:
        cur.executemany(
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )
    return len(rows)


@contextmanager
def long_run_database(say: Callable[[str], None], rebuild: bool = False) -> Iterator[str]:
    """The kept database of the long run, built first if it is missing, stale or `rebuild`; its name."""
    fingerprint = _fingerprint()
    if rebuild or not _kept(fingerprint):
        say(f"building the long run in {DATABASE} (kept for the next bench; a few minutes)")
        _build(fingerprint, say)
    else:
        say(f"the long run is kept in {DATABASE}: not built again")
    yield DATABASE
