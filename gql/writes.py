"""The write path: the checks on a line, its one deadline, the grouping, and the answer.

`true` means the line is stored, once. `false` means it is not, with one
exception that no server can close: the database stopped answering after the
statement was sent, so no one knows whether it committed (logged as "outcome
unknown"). A writer that must not lose or double a line in that case sends an
idempotency key, and retries with the same key until it hears `true`.

How a line keeps that promise:

- **One deadline per line**, RUNLOG_WRITE_TIMEOUT from the moment its caller
  arrives, for the wait in the queue and the INSERT together.
- **No INSERT its caller cannot wait for.** A line goes to the database only
  with time left, and the database is told to end the statement by the
  line's deadline (`store.insert_lines`); its caller then waits for the
  answer, never cancelled mid-commit. A line still queued at its deadline is
  answered `false` and never sent.
- **Grouped.** The event runner writes many small lines at once. A line joins
  a queue; up to `IN_FLIGHT` (two) batches are at the database at once (a commit
  waiting on fsync leaves the process otherwise idle), and the lines that
  arrive meanwhile go together in the next INSERT: one statement and one
  commit, in autocommit, for the lot. A second batch starts once as many
  lines wait as the first holds; until then they wait for the first's
  answer, never for a timer.
- **Retried one by one only when nothing was stored.** A batch the database
  refused for what a line holds (a value out of range) is retried line by
  line, so one bad line cannot take the others with it. After a timeout, a
  lost connection or any other unknown outcome, nothing is retried.
- **Keyed lines** take a slower path of their own: the key and the line in
  one transaction (`store.insert_keyed`).

Nothing here knows about GraphQL.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from . import metrics, store
from .detail_codec import DetailError, canonical_detail, check_detail, dump_detail
from .ids import id_problem, parse_id
from .kinds import BY_WIRE_NAME, Kind
from .settings import Settings

log = logging.getLogger("gql.runlog")

MAX_LINES = 200  # lines in one INSERT
MAX_BYTES = 1024 * 1024  # detail text in one INSERT, well under MySQL's max_allowed_packet
# Batches at the database at once. Two keep the process busy while a commit
# waits on fsync. More split the same lines into more, smaller INSERTs: each
# costs the process a checkout, a statement and its answer, and under load
# the process's CPU, not the database, bounds the rate: fewer in flight made
# bigger batches and cost less CPU per write at the same or a higher rate.
# SQLite has one writer at a time: a second batch would only wait in its busy
# handler. The second batch starts only once as many lines wait as the first
# holds (`_Queue._start`): sent as soon as a slot was free, the first line
# back from each answer went alone; waiting for company makes bigger batches
# again. The figures are in docs/performance.md ("What each piece bought").
IN_FLIGHT = 2
MAX_KEY_CHARS = 256
# A key is kept this long: a retry within a day of the first try is safe.
KEY_TTL = datetime.timedelta(days=1)
# Every this many keyed writes, one bounded slice of expired keys is deleted.
KEY_SWEEP_EVERY = 100
# A refused line is logged whole up to the detail limit plus this much for
# its other fields; past that, a prefix of this many characters, the size and
# a digest.
LOG_SLACK = 1024
LOG_PREFIX_CHARS = 1024


def short_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with its length said when it was cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def short(value: Any, limit: int = 80) -> str:
    """`value`'s repr for a refusal, cut to `limit` characters with its length said."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return short_text(repr(value), limit)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# ── the queue ────────────────────────────────────────────────────────────────


@dataclass(eq=False, slots=True)
class _Entry:
    line: store.NewLine
    deadline: float
    future: asyncio.Future[None]


class _Queue:
    """The lines waiting for one engine, and the batches at its database."""

    def __init__(self, engine: AsyncEngine, in_flight: int) -> None:
        self.engine = weakref.ref(engine)
        self.waiting: deque[_Entry] = deque()
        self.in_flight = 0
        self.lines_in_flight = 0
        self.max_in_flight = in_flight
        self.tasks: set[asyncio.Task[None]] = set()
        # One timer for the queue, at the earliest deadline a waiting line
        # may have: a timer per line (its call_at and its cancel) is work on
        # every write, and nearly every line leaves the queue long before it.
        self.timer: asyncio.TimerHandle | None = None

    async def write(self, line: store.NewLine, deadline: float) -> None:
        entry = _Entry(line, deadline, asyncio.get_running_loop().create_future())
        self.waiting.append(entry)
        if self.timer is None or deadline < self.timer.when():
            self._expire_at(deadline)
        self._start()
        await entry.future

    def _expire_at(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_at(when, self._expire, when)

    def _expire(self, now: float) -> None:
        """At the earliest deadline: each line still waiting at its deadline is answered, and never sent."""
        self.timer = None
        soonest = None
        for entry in self.waiting:
            if entry.future.done():  # its caller went away, or it expired already
                continue
            if entry.deadline <= now:
                _answer(entry.future, store.NotStored("its deadline came while it waited for the database"))
            elif soonest is None or entry.deadline < soonest:
                soonest = entry.deadline
        if soonest is not None:
            self._expire_at(soonest)

    def _start(self) -> None:
        while batch := self._claim():
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _claim(self) -> list[_Entry]:
        """The next batch to send now, counted as in flight; empty when none may go yet."""
        while self.waiting and self.in_flight < self.max_in_flight:
            # With a batch at the database, another starts once as many
            # lines wait as a batch there holds: a line that arrives alone
            # goes with the next ones rather than in an INSERT of its own.
            if self.in_flight and len(self.waiting) * self.in_flight < self.lines_in_flight:
                break
            batch = self._take()
            if batch:
                self.in_flight += 1
                self.lines_in_flight += len(batch)
                return batch
        return []

    def _take(self) -> list[_Entry]:
        batch: list[_Entry] = []
        size = 0
        now = asyncio.get_running_loop().time()
        while self.waiting and len(batch) < MAX_LINES:
            entry = self.waiting[0]
            if entry.future.done():  # its caller went away, or its deadline passed
                self.waiting.popleft()
                continue
            if entry.deadline - now < store.MIN_STATEMENT_SECONDS:
                self.waiting.popleft()
                _settle([entry], store.NotStored("its deadline came while it waited for the database"))
                continue
            length = len(entry.line.detail or "")
            if batch and size + length > MAX_BYTES:
                break
            self.waiting.popleft()  # from here on its caller waits for the database's answer
            batch.append(entry)
            size += length
        return batch

    async def _send(self, batch: list[_Entry]) -> None:
        # The batch that may go once this one is answered goes from this task.
        try:
            while batch:
                try:
                    await self._insert(batch)
                finally:
                    self.in_flight -= 1
                    self.lines_in_flight -= len(batch)
                batch = self._claim()
        finally:
            self._start()  # after a failure; otherwise no batch may go yet

    async def _insert(self, batch: list[_Entry]) -> None:
        engine = self.engine()
        if engine is None:
            _settle(batch, store.NotStored("the server is shutting down"))
            return
        try:
            await store.insert_lines(engine, [e.line for e in batch], deadline=min(e.deadline for e in batch))
        except store.NotStored as exc:
            if len(batch) == 1 or not exc.refused_by_database or exc.transient:
                _settle(batch, exc)
                return
            # The database refused the batch for what some line holds, and
            # stored none of it: each line on its own, each by its own deadline.
            for entry in batch:
                if entry.future.done():  # its caller went away: no one waits for this line
                    continue
                try:
                    await store.insert_lines(engine, [entry.line], deadline=entry.deadline)
                except Exception as single:
                    _settle([entry], single)
                else:
                    _settle([entry], None)
        except Exception as exc:
            _settle(batch, exc)
        else:
            _settle(batch, None)


def _settle(batch: list[_Entry], error: BaseException | None) -> None:
    for entry in batch:
        if not entry.future.done():
            if error is None:
                entry.future.set_result(None)
            else:
                _answer(entry.future, error)


def _answer(future: asyncio.Future[None], error: BaseException) -> None:
    future.set_exception(error)
    # A caller that went away meanwhile never reads its answer: keep asyncio
    # from reporting an exception no one retrieved. (Not a done callback: it
    # would be scheduled through the loop on every line.)
    future.exception()


# ── the writer ───────────────────────────────────────────────────────────────

_UNKNOWN = object()


class Writer:
    """What one app holds for its writes: a queue per event loop, the detail column's size, key sweeps.

    Made by the app's lifespan for its engine and handed to each request's
    context, so that two apps in one process share none of it.
    """

    def __init__(self, engine: AsyncEngine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.queues: dict[asyncio.AbstractEventLoop, _Queue] = {}
        self.capacity: Any = _UNKNOWN  # what the detail column holds, once looked up
        self.keyed_writes = 0
        self.sweeps: set[asyncio.Task[None]] = set()

    async def write_run_log(
        self,
        *,
        may_write: bool,
        request_id: str,
        run_id: Any,
        kind: str,
        step_id: Any = None,
        phase: int | None = None,
        detail: Any = None,
        idempotency_key: str | None = None,
        arrived: float | None = None,
    ) -> bool:
        """Store one line; True once it is stored, False (and logged) when it is not.

        The line's deadline runs from `arrived` (the loop's time its request
        came), not from when its field is resolved: the writes of one mutation
        run one after another, and thirty aliased writes against a database
        that does not answer each waited out a deadline of their own.
        """
        settings = self.settings
        start = asyncio.get_running_loop().time() if arrived is None else arrived
        deadline = start + settings.write_timeout
        try:
            problem = await self._write(
                may_write, deadline, run_id, kind, step_id, phase, detail, idempotency_key
            )
        except Exception as exc:  # the one rule: never an error from a write
            problem = f"unexpected failure: {store.one_line_reason(exc)}"
            log.exception("writeRunLog: unexpected failure, request %s", request_id)
        # Every line a resolver or the write plan (gql/engine/write_plan.py) hands over
        # ends here, stored or not and why: the one place to count outcomes. A
        # line refused before it ran (a variable GraphQL cannot coerce) never
        # comes here: unrun_writes.log_unrun_writes logs it.
        metrics.count_write(problem)  # runlog_writes_total{outcome, reason}
        if problem is None:
            return True
        sent: dict[str, Any] = {"runId": run_id, "kind": kind, "stepId": step_id, "phase": phase}
        sent["detail"] = detail
        if idempotency_key is not None:
            sent["idempotencyKey"] = idempotency_key
        log_refused(problem, request_id, sent, settings.max_detail_bytes)
        return False

    async def _write(
        self,
        may_write: bool,
        deadline: float,
        run_id: Any,
        kind: str,
        step_id: Any,
        phase: int | None,
        detail: Any,
        key: str | None,
    ) -> str | None:
        """Store the line, or answer why not."""
        if not may_write:
            return "the caller is not a writer"
        known = BY_WIRE_NAME.get(kind)
        if known is None:
            return f"kind {short(kind)} is not one of the {len(BY_WIRE_NAME)} kinds this server knows"
        run_number = parse_id(run_id)
        if run_number is None:
            return id_problem("runId", run_id)
        step_number = None
        if step_id is not None:
            step_number = parse_id(step_id)
            if step_number is None:
                return id_problem("stepId", step_id)
        if phase is not None and not -(2**31) <= phase < 2**31:
            return f"phase must be a 32-bit integer, got {short(phase)}"
        if key is not None and not 0 < len(key) <= MAX_KEY_CHARS:
            return f"idempotencyKey must be 1 to {MAX_KEY_CHARS} characters, got {len(key)}"
        text = None
        if detail is not None:
            try:
                text = dump_detail(detail)
                # A lone surrogate ("\ud800") is valid JSON but not UTF-8: refuse
                # it here rather than fail in the driver.
                size = len(text.encode())
            except ValueError as exc:
                return f"detail is not storable JSON: {exc}"
            limit, where = await self.detail_limit(deadline)
            if size > limit:
                return f"detail is {size} bytes as JSON, over the limit of {limit} ({where})"
            try:
                check_detail(known, text)
            except DetailError as exc:
                return str(exc)
        line = store.NewLine(run_id=run_number, kind=kind, step_id=step_number, phase=phase, detail=text)
        try:
            if key is None:
                await self.write_line(line, deadline=deadline)
            else:
                await self._write_keyed(line, known, key, deadline)
        except (store.NotStored, store.KeyReused) as exc:
            return str(exc)
        except store.OutcomeUnknown as exc:
            return f"outcome unknown, the line may have been stored: {exc}" + (
                "" if key is not None else "; send an idempotencyKey to retry safely"
            )
        return None

    async def detail_limit(self, deadline: float | None = None) -> tuple[int, str]:
        """The largest detail a write accepts, and where that limit comes from.

        RUNLOG_MAX_DETAIL_BYTES, or less where the `detail` column holds less
        (the events system's existing table has TEXT: 65,535 bytes). The
        column is looked at once; while the database cannot be asked, the
        setting stands alone. A write asks by its own `deadline` (the loop's
        time) at the latest: the lookup is part of the line's one deadline.
        """
        configured = self.settings.max_detail_bytes
        if self.capacity is _UNKNOWN:
            ask_until = asyncio.get_running_loop().time() + self.settings.connect_timeout
            if deadline is not None:
                ask_until = min(ask_until, deadline)
            try:
                async with asyncio.timeout_at(ask_until):
                    self.capacity = await store.detail_capacity(self.engine)
            except Exception as exc:  # asked again by the next write
                metrics.swallowed("writes.detail_limit")
                log.warning(
                    "what the detail column holds could not be looked up (%s); RUNLOG_MAX_DETAIL_BYTES "
                    "stands alone until it can",
                    store.one_line_reason(exc),
                )
                return configured, "RUNLOG_MAX_DETAIL_BYTES"
        if self.capacity is not None and self.capacity < configured:
            return self.capacity, "what the detail column holds"
        return configured, "RUNLOG_MAX_DETAIL_BYTES"

    async def log_detail_limit(self) -> None:
        """At start-up: find the detail limit (one look at the column) and say what it is."""
        found = self.capacity is not _UNKNOWN
        limit, where = await self.detail_limit()
        if self.capacity is not _UNKNOWN and not found:
            log.info("a detail may be at most %d bytes as JSON (%s)", limit, where)

    async def _write_keyed(self, line: store.NewLine, kind: Kind, key: str, deadline: float) -> None:
        # The line as readers will see it: a retry that spells its detail another
        # way (keys in another order, `actor: null` added) is the same line.
        detail = None if line.detail is None else canonical_detail(kind, line.detail)
        what = json.dumps([line.kind, line.step_id, line.phase, detail], ensure_ascii=False)
        # Keys stored before the digest was canonical hold the digest of the
        # detail as it was sent. No migration can redo them (the keys table keeps
        # digests, not lines), so a retry matches either for as long as such a
        # key may live: KEY_TTL after the upgrade, this can go.
        as_sent = json.dumps([line.kind, line.step_id, line.phase, line.detail], ensure_ascii=False)
        await store.insert_keyed(
            self.engine,
            line,
            key_digest=_digest(key),
            line_digest=_digest(what),
            also_matches=_digest(as_sent),
            deadline=deadline,
        )
        self.keyed_writes += 1
        if self.keyed_writes % KEY_SWEEP_EVERY == 0:
            task = asyncio.get_running_loop().create_task(_forget_keys(self.engine))
            self.sweeps.add(task)
            task.add_done_callback(self.sweeps.discard)

    def lines_waiting(self) -> int:
        """The lines this writer's queues hold now, on every event loop."""
        return sum(len(queue.waiting) for queue in self.queues.values())

    async def write_line(self, line: store.NewLine, *, deadline: float) -> None:
        """Store `line`, grouped with the lines written at the same time, by `deadline` (the loop's time).

        Raises store.NotStored when it was not stored, store.OutcomeUnknown when
        the database stopped answering after the line was sent.
        """
        loop = asyncio.get_running_loop()
        queue = self.queues.get(loop)
        if queue is None:
            for old in [old for old in self.queues if old.is_closed()]:
                del self.queues[old]
            engine = self.engine
            in_flight = 1 if engine.dialect.name == "sqlite" else min(IN_FLIGHT, self.settings.pool_size)
            queue = self.queues[loop] = _Queue(engine, in_flight)
        await queue.write(line, deadline)


async def _forget_keys(engine: AsyncEngine) -> None:
    before = store.utc_now_millis() - KEY_TTL
    try:
        async with asyncio.timeout(10):
            await store.forget_keys(engine, before=before, limit=1000)
    except Exception as exc:  # the next sweep tries again
        metrics.swallowed("writes.forget_keys")
        log.warning("forgetting idempotency keys before %s failed: %s", before, store.one_line_reason(exc))


# ── what a refused line leaves in the log ────────────────────────────────────


def log_refused(reason: str, request_id: str, line: dict[str, Any], detail_limit: int) -> None:
    """Log a line that was not stored, at WARNING, with the reason and the line as sent.

    The whole line, up to the detail limit (plus LOG_SLACK for its other
    fields); past that a prefix, its size and its SHA-256, so a caller that
    sends megabytes (of escaped characters, which the log would escape again)
    cannot fill the log, and the line can still be matched to what was sent.
    """
    bounded = bounded_line(line, detail_limit)
    log.warning(
        "run log line not stored: %s; request %s; line %s",
        _one_line(reason),
        request_id,
        bounded,
        # In JSON logs (gql/logs.py), the reason and the line are fields of
        # their own, the line as JSON rather than a string inside a string.
        extra={
            "json_message": "run log line not stored",
            "fields": {"reason": reason, "request_id": request_id, "run_id": line.get("runId")},
            "line_json": bounded,
        },
    )


def bounded_line(line: dict[str, Any], detail_limit: int) -> str:
    """The line as one line of JSON, every character as sent, or its prefix, size and digest."""
    text = _as_json(line)
    data = text.encode("utf-8", "surrogatepass")
    logged = len(data)
    if not text.isprintable():
        # Every character that is not ASCII escaped, by json in C: escaping
        # only those that are not printable, one by one in Python, held the
        # event loop for a second on thirty aliased lines of 32,000 NELs. The
        # escapes count towards the bound: they are what the log holds.
        text = _as_json(line, escape_all=True).replace("\x7f", "\\u007f")
        logged = len(text)
    if logged <= detail_limit + LOG_SLACK:
        return text
    digest = hashlib.sha256(data).hexdigest()
    return (
        f"{text[:LOG_PREFIX_CHARS]}... (cut: {len(data)} bytes as JSON, {logged} as logged, "
        f"over the {detail_limit + LOG_SLACK} logged whole; sha256 {digest})"
    )


def _as_json(line: dict[str, Any], *, escape_all: bool = False) -> str:
    """`line` as JSON; a value nested too deeply to encode is named in its place, never raised."""
    try:
        return json.dumps(line, ensure_ascii=escape_all, default=str)
    except RecursionError:
        pass
    shown: dict[str, Any] = {}
    for name, value in line.items():
        try:
            json.dumps({name: value}, default=str)  # as deep as it sits in the line
        except RecursionError:
            value = f"(not logged: a {type(value).__name__} nested too deeply to write as JSON)"
        shown[name] = value
    return json.dumps(shown, ensure_ascii=escape_all, default=str)


def _one_line(text: str) -> str:
    """`text` with every character that is not printable escaped as in JSON.

    A writer's kind, detail keys and values reach the log: a newline, U+2028
    or NEL in them must not start a forged log line, and a lone surrogate
    cannot be written to a UTF-8 log at all. Inside JSON text the escapes
    are valid JSON, so the logged line still parses to the line as sent.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)
