"""One round trip where one will do, and a connection the server closed is replaced unseen.

The service's pool neither pings a connection when it hands it out nor rolls
it back when it comes back, and its connections autocommit: a page is one
statement on the wire, and its blocking runs one more. The cost of that is
finding a dead connection on first use: a read that meets one is sent again on
a fresh connection, so the caller never sees it. Both are checked against the
real MariaDB: the round trips through `FaultProxy`, which notes every command
a client sends, and the dead connections by killing them with `KILL`.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql import store
from gql.edge.app import create_app
from gql.store.db import create_engine, transaction

from .conftest import MARIADB_URL, Api, Backend
from .faultproxy import FaultProxy

pytestmark = pytest.mark.mariadb

PAGE = "{ runLog(runId: 7, limit: 50) { nodes { id kind detail { __typename } } pageInfo { endCursor } } }"
BLOCKED = (
    "{ runLog(runId: 7, limit: 50) { nodes { id detail { ... on RunBlockedDetail"
    " { blockingRun { id status } } } } } }"
)
UPSTREAM = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)


def _through(proxy: FaultProxy, backend: Backend, **overrides: Any) -> Any:
    url = sa.make_url(backend.url).set(host="127.0.0.1", port=proxy.port)
    return backend.settings(database_url=url.render_as_string(hide_password=False), **overrides)


def test_a_page_is_one_round_trip_and_its_blocking_runs_one_more(mariadb: Backend) -> None:
    mariadb.create_tables()
    mariadb.add_run(37, "live", None, "2026-01-01 00:00:00")
    with FaultProxy(*UPSTREAM) as proxy, TestClient(create_app(_through(proxy, mariadb))) as client:
        api = Api(client)
        assert api.write(7, "note", {"text": "hello"})
        assert api.write(7, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
        for _ in range(3):  # the first read may open a connection; every read is the same
            proxy.commands.clear()
            assert len(api.data(PAGE)["runLog"]["nodes"]) == 2
            assert [name for name, _ in proxy.commands] == ["query"], proxy.commands
            assert proxy.commands[0][1].startswith("SELECT")
        proxy.commands.clear()
        nodes = api.data(BLOCKED)["runLog"]["nodes"]
        assert nodes[0]["detail"]["blockingRun"] == {"id": "37", "status": "live"}
        queries = [text for _, text in proxy.commands]
        assert len(queries) == 2 and "event_run_log" in queries[0] and "event_runs" in queries[1]


def test_a_page_and_its_blocking_runs_take_one_connection_from_the_pool(mariadb: Backend) -> None:
    """Two reads, one checkout: the page's connection is kept for its blocking runs, then put back.

    Each runLog field of a request takes its own; a long poll holds none while it waits.
    """
    mariadb.create_tables()
    mariadb.add_run(37, "live", None, "2026-01-01 00:00:00")
    with TestClient(create_app(mariadb.settings())) as client:
        api = Api(client)
        assert api.write(7, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
        engine = client.app_state["engine"]
        checkouts: list[object] = []
        sa.event.listen(engine.sync_engine, "checkout", lambda *_: checkouts.append(None))
        for _ in range(3):
            checkouts.clear()
            nodes = api.data(BLOCKED)["runLog"]["nodes"]
            assert nodes[0]["detail"]["blockingRun"] == {"id": "37", "status": "live"}
            assert len(checkouts) == 1
            assert engine.sync_engine.pool.checkedout() == 0
        checkouts.clear()
        both = api.data("{ a: " + BLOCKED[2:-2] + " b: " + BLOCKED[2:-2] + " }")
        assert both["a"] == both["b"] == {"nodes": nodes}
        assert len(checkouts) == 2
        assert engine.sync_engine.pool.checkedout() == 0
        cursor = api.data("{ runLog(runId: 7) { pageInfo { startCursor } } }")["runLog"]["pageInfo"]
        poll = "query P($b: String) { runLog(runId: 7, before: $b, wait: 30) { nodes { id } } }"
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(api.data, poll, {"b": cursor["startCursor"]})
            deadline = time.monotonic() + 30
            while "runlog_long_polls_waiting 1.0" not in client.get("/metrics").text.splitlines():
                assert not waiting.done(), waiting.result()
                assert time.monotonic() < deadline, "the long poll never waited"
                time.sleep(0.05)
            assert engine.sync_engine.pool.checkedout() == 0
            assert api.write(7, "note", {"text": "ends the wait"})
            assert len(waiting.result(timeout=30)["runLog"]["nodes"]) == 1


def test_one_connection_keeps_to_its_engine_and_drops_a_connection_whose_read_was_cancelled(
    mariadb: Backend,
) -> None:
    """A replica's read never takes the primary's held connection, nor the next read a cancelled one."""
    mariadb.create_tables()
    mariadb.add_run(37, "live", None, "2026-01-01 00:00:00")
    url = sa.make_url(mariadb.url)

    async def run() -> None:
        primary = create_engine(mariadb.settings(pool_size=1))
        other = create_engine(mariadb.settings(pool_size=1))
        events: list[str] = []
        sa.event.listen(primary.sync_engine, "checkout", lambda *_: events.append("checkout"))
        sa.event.listen(primary.sync_engine, "invalidate", lambda *_: events.append("invalidate"))
        try:
            async with store.one_connection(primary):
                assert [*(await store.find_runs(primary, [37]))] == [37]
                assert [*(await store.find_runs(other, [37]))] == [37]
                assert [*(await store.find_runs(primary, [37]))] == [37]
                assert events == ["checkout"]
                assert other.sync_engine.pool.checkedout() == 0
                locker = pymysql.connect(
                    host=url.host, port=url.port or 3306, user=url.username, password=url.password or "",
                    database=url.database, autocommit=True,
                )  # fmt: skip
                try:
                    with locker.cursor() as cursor:
                        cursor.execute("LOCK TABLES event_runs WRITE")
                    with pytest.raises(TimeoutError):
                        async with asyncio.timeout(0.3):
                            await store.find_runs(primary, [37])
                finally:
                    locker.close()  # its lock with it
                assert events == ["checkout", "invalidate"]
                assert [*(await store.find_runs(primary, [37]))] == [37]
                assert events == ["checkout", "invalidate", "checkout"]
            assert primary.sync_engine.pool.checkedout() == 0
        finally:
            await primary.dispose()
            await other.dispose()

    asyncio.run(run())


def _kill_connections(backend: Backend) -> int:
    """KILL every connection to the backend's database, as a restart or wait_timeout would close them."""
    database = sa.make_url(backend.url).database
    killer = pymysql.connect(
        host=UPSTREAM[0],
        port=UPSTREAM[1],
        user=MARIADB_URL.username or "root",
        password=MARIADB_URL.password or "",
        autocommit=True,
    )
    try:
        with killer.cursor() as cursor:
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
                (database,),
            )
            ids = [row[0] for row in cursor.fetchall()]
            for connection_id in ids:
                cursor.execute(f"KILL {int(connection_id)}")
    finally:
        killer.close()
    backend.sync.dispose()  # the test's own connections were among them
    return len(ids)


def test_a_connection_the_server_killed_is_replaced_without_failing_the_read(mariadb: Backend) -> None:
    mariadb.create_tables()
    mariadb.add_run(37, "live", None, "2026-01-01 00:00:00")
    # A pool of several connections, all in use once: each of them is killed.
    with TestClient(create_app(mariadb.settings(pool_size=3))) as client:
        api = Api(client)
        assert api.write(7, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
        first = api.data(BLOCKED)
        assert first["runLog"]["nodes"][0]["detail"]["blockingRun"] == {"id": "37", "status": "live"}
        assert _kill_connections(mariadb) >= 1
        # The page and its blocking runs each meet a dead connection first.
        assert api.data(BLOCKED) == first
        assert _kill_connections(mariadb) >= 1
        assert api.data(PAGE)["runLog"]["nodes"][0]["id"] == first["runLog"]["nodes"][0]["id"]
        assert client.get("/healthz").status_code == 200


def test_after_a_restart_every_pooled_connection_is_replaced_not_only_the_one_a_read_met(
    mariadb: Backend,
) -> None:
    """Three pooled connections, all killed: the read that meets the first replaces them all,
    so neither its own retry nor the write after it meets another dead one."""
    mariadb.create_tables()

    async def run() -> None:
        engine = create_engine(mariadb.settings(pool_size=3), writes=True)
        try:
            held = [await engine.connect() for _ in range(3)]  # the pool holds three
            for conn in held:
                await conn.execute(sa.text("SELECT 1"))
                await conn.close()
            assert _kill_connections(mariadb) >= 3
            page = await store.read_page(engine, run_id=7, kinds=None, limit=50, after=None)
            assert page.lines == []
            line = store.NewLine(run_id=7, kind="note", detail='{"text": "after the restart"}')
            await store.insert_lines(engine, [line], deadline=asyncio.get_running_loop().time() + 3)
        finally:
            await engine.dispose()

    asyncio.run(run())
    assert mariadb.rows("SELECT run_id FROM event_run_log") == [(7,)]


def test_work_that_needs_a_transaction_still_gets_one(mariadb: Backend) -> None:
    """On an engine whose connections autocommit, `transaction` is all or nothing, and
    the connection goes back to the pool autocommitting."""
    mariadb.create_tables()

    async def run() -> None:
        engine = create_engine(mariadb.settings(pool_size=1))
        try:
            with pytest.raises(RuntimeError):
                async with transaction(engine) as conn:
                    await conn.execute(sa.text("INSERT INTO event_runs VALUES (1, 'live', NULL, NOW())"))
                    raise RuntimeError("half way")
            async with engine.connect() as conn:  # the same pooled connection
                assert (await conn.execute(sa.text("SELECT @@autocommit"))).scalar() == 1
                await conn.execute(sa.text("INSERT INTO event_runs VALUES (2, 'live', NULL, NOW())"))
        finally:
            await engine.dispose()

    asyncio.run(run())
    # Rolled back as a whole; the plain statement committed by itself.
    assert mariadb.rows("SELECT id FROM event_runs") == [(2,)]
