"""The background loops stop at shutdown even when a cancel sent to them is lost.

On Python 3.11, aiomysql opens a connection inside `asyncio.wait_for`, which returns the
connection, not the CancelledError, when the two come in the same turn of the loop
(CPython gh-86296). A watcher stopped at that moment kept probing, and the lifespan's
`await watcher.stop()` never returned: the server did not exit on SIGTERM. Here the
step a loop repeats reads the database for real, then waits to be cancelled and loses
the cancel, as that connect does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gql import store
from gql.domain import tail
from gql.store.db import create_engine
from gql.store.replica import Replica

from .conftest import Backend

PATIENCE = 60  # a stop that takes this long never ends


def losing_the_cancel(
    step: Callable[..., Awaitable[Any]], reached: asyncio.Event
) -> Callable[..., Awaitable[Any]]:
    """`step`; the first time, the caller then waits to be cancelled, loses the cancel, and returns."""

    async def lost(*args: Any, **kwargs: Any) -> Any:
        answer = await step(*args, **kwargs)
        if not reached.is_set():
            reached.set()
            with contextlib.suppress(asyncio.CancelledError):  # lost, as aiomysql's connect can lose it
                await asyncio.Event().wait()  # until cancelled
        return answer

    return lost


def test_the_watcher_stops_when_its_probe_loses_the_cancel(
    tables: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> None:
        probed = asyncio.Event()
        monkeypatch.setattr(store, "count_recent", losing_the_cancel(store.count_recent, probed))
        settings = tables.settings(wait_interval=0.01)
        engine = create_engine(settings)
        watcher = tail.Watcher(engine, settings)
        watcher.start()
        try:
            async with watcher.watch(7), asyncio.timeout(PATIENCE):
                await probed.wait()  # the probe has counted run 7's lines, and waits
                await watcher.stop()
            assert watcher.probes == 1
        finally:
            await engine.dispose()

    asyncio.run(run())


@pytest.mark.mariadb
def test_the_replica_monitor_stops_when_its_look_loses_the_cancel(
    mariadb: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> None:
        looked = asyncio.Event()
        settings = mariadb.settings(read_check_interval=0.01)
        replica = Replica(create_engine(settings), create_engine(settings), settings)
        monkeypatch.setattr(replica, "check", losing_the_cancel(replica.check, looked))
        replica.start()
        try:
            async with asyncio.timeout(PATIENCE):
                await looked.wait()  # the monitor has looked at the "replica", and waits
                await replica.stop()
            assert (replica.reason or "").startswith("replicates from no primary"), replica.reason
        finally:
            await replica.primary.dispose()

    asyncio.run(run())
