"""The write path: a line's checks, its one deadline (queue wait and INSERT together), grouping, and answer.

`Writer(engine, settings).write_run_log(...)` answers None once the line is stored, else why not (logged).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
import weakref
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .. import metrics, store
from ..ids import id_problem, parse_id
from ..kinds import BY_WIRE_NAME, Kind
from ..settings import Settings
from .detail_codec import DetailError, canonical_detail, check_detail, dump_detail
from .refusals import reason_of

log = logging.getLogger("gql.runlog")

MAX_LINES = 200  # lines in one INSERT
MAX_BYTES = 1024 * 1024  # detail text in one INSERT, well under MySQL's max_allowed_packet
# Batches at the database at once: two keep the process busy while a commit waits on fsync;
# more make smaller INSERTs that cost more CPU per line. SQLite gets one.
IN_FLIGHT = 2
MAX_KEY_CHARS = 256
KEY_TTL = datetime.timedelta(days=1)  # a retry within a day of the first try is safe
KEY_SWEEP_EVERY = 100  # keyed writes between two bounded slices of expired keys deleted
# A refused line is logged whole up to the detail limit plus LOG_SLACK, past it cut (`bounded_line`).
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
        # One timer at the earliest deadline: a timer per line is work on every write.
        self.timer: asyncio.TimerHandle | None = None
        # Kept by a batch that ended while another was at the database (`_send`).
        self.spare: store.HeldConnection | None = None

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
            # With a batch at the database, another starts once as many lines wait as it
            # holds: a lone line goes with the next ones, not in an INSERT of its own.
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
        # The next batch goes from this task, on this connection (store.HeldConnection).
        held, self.spare = self.spare or store.HeldConnection(), None
        try:
            while batch:
                try:
                    await self._insert(batch, held)
                finally:
                    self.in_flight -= 1
                    self.lines_in_flight -= len(batch)
                batch = self._claim()
        finally:
            self._start()  # after a failure; otherwise no batch may go yet
            if self.in_flight and self.spare is None and held.holds():
                # Another batch is out: the next to start takes this connection.
                self.spare = held
            else:
                await held.release()
                if not self.in_flight and self.spare is not None:
                    spare, self.spare = self.spare, None
                    await spare.release()

    async def _insert(self, batch: list[_Entry], held: store.HeldConnection) -> None:
        engine = self.engine()
        if engine is None:
            _settle(batch, store.NotStored("the server is shutting down"))
            return
        try:
            await store.insert_lines(
                engine, [e.line for e in batch], deadline=min(e.deadline for e in batch), held=held
            )
        except store.NotStored as exc:
            if len(batch) == 1 or not exc.refused_by_database or exc.transient:
                _settle(batch, exc)
                return
            # Refused for what some line holds, none stored: each line alone, by its deadline.
            for entry in batch:
                if entry.future.done():  # its caller went away: no one waits for this line
                    continue
                try:
                    await store.insert_lines(engine, [entry.line], deadline=entry.deadline, held=held)
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
    # Marks it retrieved: a caller that went away never reads it, and asyncio would report it.
    future.exception()


# ── the writer ───────────────────────────────────────────────────────────────

_UNKNOWN = object()


class Writer:
    """One app's writes: a queue per event loop, the detail column's size, key sweeps."""

    def __init__(self, engine: AsyncEngine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.queues: dict[asyncio.AbstractEventLoop, _Queue] = {}
        self.capacity: Any = _UNKNOWN  # what the detail column holds, once looked up
        self.keyed_writes = 0
        self.background: set[asyncio.Task[Any]] = set()  # writes whose client left, key sweeps

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
    ) -> str | None:
        """Store one line; None once it is stored, else why not (a sentence, logged with the line).

        The deadline runs from `arrived` (loop time), so that the writes of one mutation share it.
        """
        loop = asyncio.get_running_loop()
        deadline = (loop.time() if arrived is None else arrived) + self.settings.write_timeout
        sent = {"runId": run_id, "kind": kind, "stepId": step_id, "phase": phase, "detail": detail}
        if idempotency_key is not None:
            sent["idempotencyKey"] = idempotency_key
        writing = self._write(may_write, deadline, run_id, kind, step_id, phase, detail, idempotency_key)
        # A line is the runner's record: it is stored (or refused, and logged) by its deadline
        # even when its client leaves (hangup.py cancels the request), never dropped unsaid.
        answered = loop.create_task(self._answer(request_id, sent, writing))
        self.background.add(answered)
        answered.add_done_callback(self.background.discard)
        return await asyncio.shield(answered)

    async def _answer(
        self, request_id: str, sent: dict[str, Any], writing: Coroutine[Any, Any, str | None]
    ) -> str | None:
        """What `writing` answers, counted, and logged with the line `sent` when it was not stored."""
        try:
            problem = await writing
        except Exception as exc:  # the one rule: never an error from a write
            problem = f"unexpected failure: {store.one_line_reason(exc)}"
            log.exception("writeRunLog: unexpected failure, request %s", request_id)
        # Lines refused before they ran are counted by unrun_writes.log_unrun_writes.
        metrics.count_write(None if problem is None else reason_of(problem))
        if problem is not None:
            log_refused(problem, request_id, sent, self.settings.max_detail_bytes)
        return problem

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
                # A lone surrogate is valid JSON but not UTF-8: refused here, not in the driver.
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
        """The largest detail a write accepts: RUNLOG_MAX_DETAIL_BYTES, or what the column holds if less.

        Answers where the limit comes from too. The column is looked up once, by `deadline` (loop time).
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
        # As readers see it: a retry spelling its detail another way is the same line.
        detail = None if line.detail is None else canonical_detail(kind, line.detail)
        what = json.dumps([line.kind, line.step_id, line.phase, detail], ensure_ascii=False)
        # Older keys hold the digest of the detail as sent; matched too until KEY_TTL has passed.
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
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    def lines_waiting(self) -> int:
        """The lines this writer's queues hold now, on every event loop."""
        return sum(len(queue.waiting) for queue in self.queues.values())

    async def write_line(self, line: store.NewLine, *, deadline: float) -> None:
        """Store `line`, grouped with others written at once, by `deadline` (loop time).

        Raises store.NotStored, or store.OutcomeUnknown.
        """
        loop = asyncio.get_running_loop()
        queue = self.queues.get(loop)
        if queue is None:
            for old in [old for old in self.queues if old.is_closed()]:
                del self.queues[old]
            engine = self.engine
            sqlite = engine.dialect.name == "sqlite"
            in_flight = 1 if sqlite else min(IN_FLIGHT, self.settings.write_pool_size)
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
    """Log a line that was not stored, at WARNING, with the reason and the line as sent (`bounded_line`)."""
    bounded = bounded_line(line, detail_limit)
    log.warning(
        "run log line not stored: %s; request %s; line %s",
        _one_line(reason),
        request_id,
        bounded,
        # JSON logs (gql/logs.py) carry these as fields, the line as JSON.
        extra={
            "json_message": "run log line not stored",
            "fields": {"reason": reason, "request_id": request_id, "run_id": line.get("runId")},
            "line_json": bounded,
        },
    )


def bounded_line(line: dict[str, Any], detail_limit: int) -> str:
    """The line as one line of JSON, or past detail_limit + LOG_SLACK its prefix, size and SHA-256."""
    text = _as_json(line)
    data = text.encode("utf-8", "surrogatepass")
    logged = len(data)
    if not text.isprintable():
        # All non-ASCII escaped by json in C (escaping in Python held the loop);
        # the escapes count towards the bound.
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
    """`text` with every unprintable character escaped as in JSON, so it cannot forge a log line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)
