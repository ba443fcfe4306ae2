"""Concurrent writes grouped into one multi-row INSERT, each caller answered after its commit.

The event runner writes many small lines at once. Written one by one, each
line costs a pool checkout, a ping, an INSERT and a COMMIT: four round trips
and an fsync. Here a line joins a queue; while one INSERT is at the database,
the lines that arrive wait, and go together in the next one. No line waits
for a timer: with nothing in flight a line goes at once, so a lone write costs
what it did, and under load the round trips are shared.

A caller is answered only once the INSERT holding its line has committed (or
failed). A caller that gives up first (its write timeout) leaves the queue: a
line not yet sent is never stored behind the back of a caller told `false`.
If a grouped INSERT fails for a reason other than time, its lines are tried
one by one, so one line the database refuses cannot take the others with it.
Nothing here knows about GraphQL.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque

from sqlalchemy.ext.asyncio import AsyncEngine

from . import store

MAX_LINES = 200  # lines in one INSERT
MAX_BYTES = 1024 * 1024  # detail text in one INSERT, well under MySQL's max_allowed_packet


class _Queue:
    """The lines waiting for one engine, and the task that sends them."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = weakref.ref(engine)
        self.waiting: deque[tuple[store.NewLine, asyncio.Future[None]]] = deque()
        self.sender: asyncio.Task[None] | None = None

    async def write(self, line: store.NewLine, bound: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        # A caller that timed out never reads its answer; keep asyncio from
        # reporting an exception no one retrieved.
        future.add_done_callback(_consume)
        self.waiting.append((line, future))
        if self.sender is None or self.sender.done():
            self.sender = loop.create_task(self._send(bound))
        await future

    def _take(self) -> list[tuple[store.NewLine, asyncio.Future[None]]]:
        batch: list[tuple[store.NewLine, asyncio.Future[None]]] = []
        size = 0
        while self.waiting and len(batch) < MAX_LINES:
            line, future = self.waiting[0]
            if future.done():  # its caller gave up
                self.waiting.popleft()
                continue
            length = len(line.detail or "")
            if batch and size + length > MAX_BYTES:
                break
            self.waiting.popleft()
            batch.append((line, future))
            size += length
        return batch

    async def _send(self, bound: float) -> None:
        while self.waiting:
            batch = self._take()
            if not batch:
                continue
            engine = self.engine()
            if engine is None:
                _settle(batch, RuntimeError("the engine was disposed"))
                return
            try:
                async with asyncio.timeout(bound):
                    await store.write_lines(engine, [line for line, _ in batch])
            except Exception as exc:
                if len(batch) == 1 or isinstance(exc, TimeoutError):
                    _settle(batch, exc)
                    continue
                for line, future in batch:
                    if future.done():
                        continue
                    try:
                        async with asyncio.timeout(bound):
                            await store.write_lines(engine, [line])
                    except Exception as single:
                        _settle([(line, future)], single)
                    else:
                        _settle([(line, future)], None)
            else:
                _settle(batch, None)


def _settle(batch: list[tuple[store.NewLine, asyncio.Future[None]]], error: BaseException | None) -> None:
    for _, future in batch:
        if not future.done():
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


def _consume(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


_queues: weakref.WeakKeyDictionary[AsyncEngine, dict[asyncio.AbstractEventLoop, _Queue]] = (
    weakref.WeakKeyDictionary()
)


def _queue(engine: AsyncEngine) -> _Queue:
    loop = asyncio.get_running_loop()
    per_loop = _queues.setdefault(engine, {})
    queue = per_loop.get(loop)
    if queue is None:
        for old in [old for old in per_loop if old.is_closed()]:
            del per_loop[old]
        queue = per_loop[loop] = _Queue(engine)
    return queue


async def write_line(engine: AsyncEngine, line: store.NewLine, *, bound: float) -> None:
    """Store `line`, grouped with the lines written at the same time; raise if it was not stored.

    `bound` (seconds) bounds each INSERT the line takes part in; the caller bounds its own wait.
    """
    await _queue(engine).write(line, bound)
