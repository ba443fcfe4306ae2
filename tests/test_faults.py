"""Database faults, for real: a MariaDB that refuses, hangs and comes back; a locked SQLite.

Each MariaDB test puts `FaultProxy` between the service and the server. The
timings are printed (run with `-s` to see them) and held to the bounds the
contract promises: a write answers false within 5 s when the database
refuses and within 10 s when it hangs, a read answers a clean error within
5 s when refused and by its own timeout (with slack) when it hangs, and both
work again within 20 s of the database's return, with no restart.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings
from gql.store import ANSWER_GRACE_SECONDS

from .conftest import ADMIN, MARIADB_URL, SLACK, Api, Backend
from .faultproxy import FaultProxy
from .leaks import assert_clean_errors

T = TypeVar("T")

READ = "{ runLog(runId: 1, limit: 100) { nodes { id detail { ... on NoteDetail { text } } } } }"
PRUNE = 'mutation { pruneTerminal(before: "2026-01-01T00:00:00Z") }'
REFUSED = "the database refused or dropped the connection"
SILENT = "the database did not answer in time"


def timed(call: Callable[[], T]) -> tuple[T, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def until(check: Callable[[], bool], within: float) -> float:
    """Seconds until `check()` holds; fails after `within`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < within, f"not back within {within}s"
        time.sleep(0.2)
    return time.monotonic() - started


def unavailable(body: dict[str, Any]) -> bool:
    assert_clean_errors(body)
    errors = body.get("errors") or []
    return (
        len(errors) == 1
        and errors[0]["extensions"]["code"] == "DATABASE_UNAVAILABLE"
        and errors[0]["message"].startswith("The run log's database is not answering; try again shortly")
    )


def texts(api: Api) -> list[str]:
    return [node["detail"]["text"] for node in api.data(READ)["runLog"]["nodes"]]


def reads(api: Api) -> bool:
    return "errors" not in api.post(READ)


def health(client: TestClient) -> tuple[int, str | None]:
    response = client.get("/healthz")
    return response.status_code, response.json().get("reason")


def through(proxy: FaultProxy, backend: Backend, **overrides: Any) -> Settings:
    url = sa.make_url(backend.url).set(host="127.0.0.1", port=proxy.port)
    return backend.settings(database_url=url.render_as_string(hide_password=False), **overrides)


def report(timings: dict[str, float]) -> None:
    print()
    for name, seconds in timings.items():
        print(f"  {name:<58} {seconds:6.2f} s")


@pytest.mark.mariadb
def test_a_database_that_refuses_then_hangs_then_returns(
    mariadb: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    mariadb.create_tables()
    mariadb.add_run(2, "completed", "2025-01-01 00:00:00", "2025-01-01 00:00:00")
    timings: dict[str, float] = {}
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    with FaultProxy(*upstream) as proxy:
        # The default timeouts, which the bounds are about, and a small pool
        # (six connections at most): the six operations sent while the
        # database hangs each hold one until their timeouts cancel them, so a
        # pool that kept a cancelled connection, or leaked its slot, would be
        # short of connections afterwards.
        settings = through(proxy, mariadb, pool_size=3, prune_timeout=4)
        with TestClient(create_app(settings)) as client:
            api = Api(client)
            assert api.write(1, "note", {"text": "before"})
            assert health(client) == (200, None)

            proxy.refuse()
            written, timings["refused: writeRunLog answers false"] = timed(
                lambda: api.write(1, "note", {"text": "while refused"})
            )
            assert written is False
            body, timings["refused: runLog answers DATABASE_UNAVAILABLE"] = timed(lambda: api.post(READ))
            assert unavailable(body)
            body, timings["refused: pruneTerminal answers DATABASE_UNAVAILABLE"] = timed(
                lambda: api.post(PRUNE, token=ADMIN)
            )
            assert unavailable(body)
            state, timings["refused: /healthz answers 503"] = timed(lambda: health(client))
            assert state == (503, REFUSED)

            proxy.recover()
            timings["back after refusing: writeRunLog true again"] = until(
                lambda: api.write(1, "note", {"text": "after refusing"}), 20
            )
            timings["back after refusing: runLog reads again"] = until(lambda: reads(api), 20)
            assert health(client) == (200, None)

            proxy.hang()
            with ThreadPoolExecutor(6) as pool:
                writes = [
                    pool.submit(timed, lambda i=i: api.write(1, "note", {"text": f"while hung {i}"}))
                    for i in range(3)
                ]
                read = pool.submit(timed, lambda: api.post(READ))
                prune = pool.submit(timed, lambda: api.post(PRUNE, token=ADMIN))
                healthz = pool.submit(timed, lambda: health(client))
                answers = [w.result() for w in writes]
                assert [written for written, _ in answers] == [False] * 3
                timings["hung: slowest of 3 concurrent writeRunLog, false"] = max(t for _, t in answers)
                body, timings["hung: runLog answers DATABASE_UNAVAILABLE"] = read.result()
                assert unavailable(body)
                body, timings["hung: pruneTerminal answers (prune_timeout 4 s)"] = prune.result()
                assert unavailable(body)
                state, timings["hung: /healthz answers 503"] = healthz.result()
                assert state == (503, SILENT)

            proxy.recover()
            timings["back after hanging: writeRunLog true again"] = until(
                lambda: api.write(1, "note", {"text": "after hanging"}), 20
            )
            timings["back after hanging: runLog reads again"] = until(lambda: reads(api), 20)
            assert health(client) == (200, None)
            # Every answer is the right one (no connection hands back the
            # answer to an earlier, cancelled statement), and every false
            # was a line not stored.
            assert texts(api)[-3:] == ["after hanging", "after refusing", "before"]
            assert set(texts(api)) == {"before", "after refusing", "after hanging"} | set(texts(api)[:-3])
            # The pool is whole: more concurrent writes than it has connections.
            with ThreadPoolExecutor(8) as pool:
                assert all(pool.map(lambda i: api.write(1, "note", {"text": f"after {i}"}), range(8)))
            assert client.app_state["write_engine"].pool.checkedout() == 0

    stored = [row[0] for row in mariadb.rows("SELECT detail FROM event_run_log")]
    assert not any("while" in text for text in stored), "a line answered false was stored"
    assert len(stored) == 11
    # Each refused line is in the log, whole.
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run log line not stored")]
    assert len(refused) == 4 and all('"kind": "note"' in m and "while" in m for m in refused)
    report(timings)
    for name, seconds in timings.items():
        bound = 20 if name.startswith("back") else 5 if name.startswith("refused") else 10
        if name == "hung: runLog answers DATABASE_UNAVAILABLE":
            # Its own timeout (8 s by default) ends it: 10 s left a loaded machine 2 s.
            bound = settings.read_timeout + SLACK
        assert seconds < bound, f"{name}: {seconds:.2f}s, over {bound}s"


def _lock_tables(backend: Backend) -> pymysql.Connection:  # type: ignore[type-arg]
    url = sa.make_url(backend.url)
    conn = pymysql.connect(
        host=url.host, port=url.port or 3306, user=url.username, password=url.password or "",
        database=url.database, autocommit=True,
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute("LOCK TABLES event_run_log WRITE")
    return conn


@pytest.mark.mariadb
def test_statements_cancelled_by_their_timeout_do_not_poison_the_pool(mariadb: Backend) -> None:
    """A write and a read that wait on a lock are cancelled at their timeout, three times over.

    The pool has two connections at most; each cancelled statement's
    connection must be thrown away, not handed to the next caller with the
    late answer of the statement it was running.
    """
    mariadb.create_tables()
    settings = mariadb.settings(pool_size=1, read_timeout=1, write_timeout=1)
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "before"})
        locker = _lock_tables(mariadb)
        try:
            for i in range(3):
                written, took = timed(lambda i=i: api.write(1, "note", {"text": f"cancelled {i}"}))
                # Each by its timeout (1 s) and the answer's grace, not by the lock's end.
                assert written is False and took < 1 + ANSWER_GRACE_SECONDS + SLACK
                body, took = timed(lambda: api.post(READ))
                assert unavailable(body) and took < 1 + SLACK
        finally:
            with locker.cursor() as cur:
                cur.execute("UNLOCK TABLES")
            locker.close()
        assert api.write(1, "note", {"text": "after"})
        assert texts(api) == ["after", "before"]
        for pool in (client.app_state["engine"].pool, client.app_state["write_engine"].pool):
            assert pool.checkedout() == 0
    # A cancelled insert's transaction died with its connection.
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 2


def test_a_locked_sqlite_database_answers_false_and_unavailable_then_recovers(tmp_path: Path) -> None:
    path = tmp_path / "runlog.db"
    settings = Settings(database_url=f"sqlite+aiosqlite:///{path}", admin_tokens=(ADMIN,))
    with TestClient(create_app(settings)) as client:
        api = Api(client)
        assert api.write(1, "note", {"text": "before"})
        assert api.write(2, "note", {"text": "of a finished run"})
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("INSERT INTO event_runs VALUES (2, 'completed', '2025-01-01', '2025-01-01')")
        # Another process holds the write lock (a backup, a long transaction).
        holder.execute("BEGIN EXCLUSIVE")
        try:
            # Each by the write timeout (SQLite's busy timeout), not by the lock's end.
            bound = settings.write_timeout + ANSWER_GRACE_SECONDS + SLACK
            written, took = timed(lambda: api.write(1, "note", {"text": "while locked"}))
            assert written is False and took < bound
            body, took = timed(lambda: api.post(PRUNE, token=ADMIN))
            assert unavailable(body) and took < bound
            assert texts(api) == ["before"]  # WAL: readers go on while the lock is held
        finally:
            holder.execute("COMMIT")
            holder.close()
        assert api.write(1, "note", {"text": "after"})
        assert texts(api) == ["after", "before"]


def _three_prunable_lines(mariadb: Backend) -> None:
    """Run 1, completed long ago, with three lines any prune deletes."""
    mariadb.create_tables()
    mariadb.add_run(1, "completed", "2025-01-01 00:00:00", "2025-01-01 00:00:00")
    mariadb.execute(
        "INSERT INTO event_run_log (run_id, kind, at) SELECT 1, 'note', '2025-01-01' FROM seq_1_to_3"
    )


@pytest.mark.mariadb
def test_a_prune_whose_commit_goes_unanswered_says_its_outcome_is_unknown(mariadb: Backend) -> None:
    """The server gets the COMMIT and commits; its answer is lost. The call cannot know, and says so.

    Before, a COMMIT cut off by the deadline was answered as a database that
    did not answer (or left out of the count), though its lines were gone.
    """
    _three_prunable_lines(mariadb)
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    with (
        FaultProxy(*upstream) as proxy,
        TestClient(create_app(through(proxy, mariadb, prune_timeout=1))) as client,
    ):
        # The first COMMIT is SQLAlchemy's, after it sets the slice's isolation level.
        proxy.deafen_at("COMMIT", nth=2)
        body = Api(client).post(PRUNE, token=ADMIN)
    assert_clean_errors(body)
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "DATABASE_UNAVAILABLE"
    assert error["message"].startswith(
        "The outcome is unknown: the database did not answer a prune's COMMIT: 0 lines were deleted "
        "before it, and up to 3 more may have been by it; call again to prune what is left (request id "
    )
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 0  # it had committed


@pytest.mark.mariadb
def test_a_prune_whose_later_slice_goes_unanswered_counts_what_its_earlier_slices_deleted(
    mariadb: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lines of the slices committed before the unanswered one are said and counted.

    Before, the exception said them in words only: a caller summing what prunes
    deleted (and the service's runlog_lines_pruned_total) left them out.
    """
    from gql.store import pruning

    from .test_operable import scrape, value

    monkeypatch.setattr(pruning, "PRUNE_SLICE_LINES", 2)
    _three_prunable_lines(mariadb)
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    with (
        FaultProxy(*upstream) as proxy,
        TestClient(create_app(through(proxy, mariadb, prune_timeout=1))) as client,
    ):
        before = scrape(client)
        # Each slice: SQLAlchemy's COMMIT after it sets the isolation level, then the slice's.
        proxy.deafen_at("COMMIT", nth=4)
        body = Api(client).post(PRUNE, token=ADMIN)
        after = scrape(client)
    (error,) = body["errors"]
    assert error["message"].startswith(
        "The outcome is unknown: the database did not answer a prune's COMMIT: 2 lines were deleted "
        "before it, and up to 1 more may have been by it;"
    ), error["message"]
    pruned = "runlog_lines_pruned_total"
    assert value(after, pruned, source="pruneTerminal") - value(before, pruned, source="pruneTerminal") == 2
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 0


@pytest.mark.mariadb
def test_a_drained_slice_whose_commit_goes_unanswered_is_not_a_plain_timeout(mariadb: Backend) -> None:
    """The sweeper's and the prune command's slices follow pruneTerminal's rule at their COMMIT.

    Before, their own timeout cut the COMMIT's answer off, and the slice was
    reported as one the database did not finish, though its lines were gone.
    """
    import asyncio
    import datetime

    from gql import store
    from gql.domain import retention
    from gql.store.db import create_engine

    _three_prunable_lines(mariadb)
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)

    async def drain() -> BaseException | None:
        engine = create_engine(through(proxy, mariadb))
        try:
            await retention.drain(engine, before=datetime.datetime(2026, 1, 1), limit=10, slice_timeout=1)
        except Exception as exc:
            return exc
        finally:
            await engine.dispose()
        return None

    with FaultProxy(*upstream) as proxy:
        # The first COMMIT is the new connection's, the second SQLAlchemy's
        # after it sets the slice's isolation level; the third is the slice's.
        proxy.deafen_at("COMMIT", nth=3)
        failure = asyncio.run(drain())
    assert isinstance(failure, store.OutcomeUnknown), repr(failure)
    assert "up to 3 more may have been by it" in str(failure)
    assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == 0  # it had committed
