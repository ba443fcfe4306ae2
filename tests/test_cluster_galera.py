"""The service on a 3-node Galera cluster that `scripts/cluster` starts.

Service processes run against different nodes, as replicas behind a load
balancer would, and the tests check what the cluster changes: one sweeper in
the whole cluster, writes through every node stored exactly once.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import subprocess
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gql import store
from gql.domain import retention
from gql.settings import Settings
from gql.store.db import create_engine, metadata

from . import local, serving
from .conftest import ADMIN
from .test_subscription_live import next_line, open_tail

ROOT = Path(__file__).resolve().parent.parent
WRITE_NOTE = (ROOT / "gql" / "operations" / "WriteNote.graphql").read_text()
pytestmark = [pytest.mark.mariadb, pytest.mark.cluster]


def _cluster(command: str) -> str:
    done = subprocess.run(
        [str(ROOT / "scripts" / "cluster"), command, "galera"], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def galera() -> Iterator[list[sa.URL]]:
    """The URLs of the three nodes, each with one fresh database of this module's."""
    urls = [sa.make_url(line) for line in _cluster("start").split()]
    database = f"runlog_cluster_{uuid.uuid4().hex[:8]}"
    first = pymysql.connect(host="127.0.0.1", port=urls[0].port, user="root", autocommit=True)
    with first.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    first.close()
    try:
        yield [url.set(database=database) for url in urls]
    finally:
        _cluster("stop")


@pytest.fixture(scope="module")
def tables(galera: list[sa.URL]) -> Iterator[list[sa.URL]]:
    engine = sa.create_engine(galera[0].set(drivername="mysql+pymysql"))
    metadata.drop_all(engine)
    metadata.create_all(engine)
    engine.dispose()
    yield galera


def _rows(url: sa.URL, sql: str) -> list[tuple[object, ...]]:
    conn = pymysql.connect(
        host="127.0.0.1", port=url.port, user="root", database=url.database, autocommit=True
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def test_only_one_sweeper_in_the_cluster_holds_the_sweep_lock_at_a_time(tables: list[sa.URL]) -> None:
    async def main() -> int:
        engines = [create_async_engine(url) for url in tables]
        holding, most = 0, 0

        async def sweep(engine: AsyncEngine) -> None:
            nonlocal holding, most
            async with retention.sweep_lock(engine, "runlog.sweep.test") as taken:
                if taken:
                    holding += 1
                    most = max(most, holding)
                    await asyncio.sleep(1.0)  # the lock held while the other nodes' sweepers try
                    holding -= 1

        try:
            for _ in range(3):
                await asyncio.gather(*(sweep(engine) for engine in engines))
        finally:
            for engine in engines:
                await engine.dispose()
        return most

    assert asyncio.run(main()) == 1


Services = list[serving.Server]


@pytest.fixture(scope="module")
def services(tables: list[sa.URL], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """A service process on each node, as replicas behind a balancer would be, for the whole module."""
    folder = tmp_path_factory.mktemp("services")
    servers = [
        serving.start(
            folder,
            url.render_as_string(hide_password=False),
            f"node{i}",
            RUNLOG_ADMIN_TOKEN=ADMIN,
            RUNLOG_LOG_LEVEL="WARNING",
        )
        for i, url in enumerate(tables)
    ]
    try:
        for server in servers:  # started together, waited for in turn
            serving.wait_until_healthy(server)
        yield servers
    finally:
        serving.stop(*servers)


def _write_note(base: str, run_id: int, text: str) -> object:
    return local.post(
        f"{base}/graphql",
        json={
            "query": WRITE_NOTE,
            "operationName": "WriteNote",
            "variables": {"runId": str(run_id), "text": text},
        },
        timeout=30,
    ).json()


def _texts(url: sa.URL, run_id: int) -> list[str]:
    rows = _rows(url, f"SELECT detail FROM event_run_log WHERE run_id = {run_id}")
    return sorted(json.loads(str(detail))["text"] for (detail,) in rows)


def test_writes_through_every_node_are_stored_exactly_once(tables: list[sa.URL], services: Services) -> None:
    answers: dict[str, object] = {}

    def write(i: int) -> None:
        answers[f"note {i}"] = _write_note(services[i % 3].base, 7, f"note {i}")

    with ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(write, range(150)))
    assert {body for body in map(json.dumps, answers.values())} == {'{"data": {"writeRunLog": true}}'}
    assert _texts(tables[1], 7) == sorted(answers)


def _fill(url: sa.URL, ended: range, lines_each: int, live_run: int) -> None:
    conn = pymysql.connect(
        host="127.0.0.1", port=url.port, user="root", database=url.database, autocommit=True
    )
    try:
        with conn.cursor() as cur:
            runs: list[tuple[int, str, str | None, str]] = [
                (run, "completed", "2020-01-01 00:00:00", "2020-01-01 00:00:00") for run in ended
            ]
            runs.append((live_run, "live", None, "2020-01-01 00:00:00"))
            cur.executemany(
                "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, %s, %s, %s)", runs
            )
            for run in [*ended, live_run]:
                # Placeholders only in VALUES, so that pymysql sends one
                # INSERT of many rows (one commit), not one per row.
                cur.executemany(
                    "INSERT INTO event_run_log (run_id, at, kind, detail) VALUES (%s, %s, %s, %s)",
                    [(run, "2020-01-01 00:00:00", "note", '{"text":"x","actor":null}')] * lines_each,
                )
    finally:
        conn.close()


PRUNE = "mutation($before: DateTime!) { pruneTerminal(before: $before, limit: 37) }"


def test_prunes_sent_through_every_node_at_once_all_answer_and_keep_live_runs(
    tables: list[sa.URL], services: Services
) -> None:
    """Two nodes deleting the same lines conflict at commit (1213); the slice that lost is chosen again."""
    ended = range(1001, 1021)
    _fill(tables[0], ended, lines_each=60, live_run=1099)
    errors: list[object] = []
    deleted = 0
    lock = threading.Lock()

    def prune(i: int) -> None:
        nonlocal deleted
        while True:
            body = local.post(
                f"{services[i % 3].base}/graphql",
                json={"query": PRUNE, "variables": {"before": "2021-01-01T00:00:00Z"}},
                headers={"Authorization": f"Bearer {ADMIN}"},
                timeout=60,
            ).json()
            with lock:
                if "errors" in body:
                    errors.append(body["errors"])
                    return
                deleted += body["data"]["pruneTerminal"]
            if body["data"]["pruneTerminal"] == 0:
                return

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(prune, range(6)))
    assert errors == []
    assert deleted == 20 * 60
    counts = _rows(
        tables[2], "SELECT run_id, COUNT(*) FROM event_run_log WHERE run_id > 1000 GROUP BY run_id"
    )
    assert counts == [(1099, 60)]


def test_prunes_through_every_node_cut_off_anywhere_by_their_deadlines_answer_and_add_up(
    tables: list[sa.URL],
) -> None:
    """Concurrent prunes through all three nodes, each with a deadline that may fall in any statement.

    Each call answers a count, or fails as the service answers DATABASE_UNAVAILABLE
    (`store.is_unavailable`; anything else is "Unexpected error"), and the counts
    add up to the lines that went. Before, a connection cancelled while it set a
    transaction's isolation level went back to the pool closed, and the next call
    on it failed with "Cancelled during execution"; and a COMMIT cut off by the
    deadline deleted lines its call never reported.
    """
    ended, live = range(3001, 3041), 3099
    _fill(tables[0], ended, lines_each=30, live_run=live)
    before = datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC)

    async def main() -> tuple[int, list[str], list[int]]:
        engines = [
            create_engine(Settings(database_url=url.render_as_string(hide_password=False))) for url in tables
        ]
        unexpected: list[str] = []
        answered = 0
        unknown: list[int] = []  # what each OutcomeUnknown said it may have deleted

        async def prune(engine: AsyncEngine, seed: int) -> None:
            nonlocal answered
            rng = random.Random(seed)
            loop = asyncio.get_running_loop()
            for _ in range(2000):  # a bound on the calls, not a wait: the last answers 0, nothing left
                try:
                    deleted = await store.prune_terminal(
                        engine, before=before, limit=7, deadline=loop.time() + rng.uniform(0, 0.25)
                    )
                except store.OutcomeUnknown as exc:
                    # A COMMIT unanswered past its grace (a loaded machine): it says how
                    # many lines its call's earlier slices deleted, and how many more it may
                    # have; the sum allows for both.
                    answered += exc.deleted
                    unknown.append(exc.up_to)
                    continue
                except Exception as exc:
                    if not store.is_unavailable(exc):
                        unexpected.append(repr(exc))
                        return
                    continue
                answered += deleted
                if deleted == 0:
                    return
            unexpected.append("still pruning after 2000 calls")

        try:
            await asyncio.gather(*(prune(engines[i % 3], i) for i in range(9)))
        finally:
            for engine in engines:
                await engine.dispose()
        return answered, unexpected, unknown

    answered, unexpected, unknown = asyncio.run(main())
    assert unexpected == []
    counts = _rows(
        tables[1], "SELECT run_id, COUNT(*) FROM event_run_log WHERE run_id > 3000 GROUP BY run_id"
    )
    assert counts == [(live, 30)]
    assert answered <= 40 * 30 <= answered + sum(unknown)


BIG_PRUNE = "mutation($before: DateTime!) { pruneTerminal(before: $before, limit: 10000) }"


def test_a_prune_through_one_node_while_the_others_write_to_the_same_runs_answers_a_count_every_time(
    tables: list[sa.URL], services: Services
) -> None:
    """pruneTerminal(limit: 10000) through node 1 while writers insert lines through nodes 2 and 3.

    The writers insert as fast as their nodes take lines, so that lines are
    applied on node 1 all through each prune. Before, most calls answered
    DATABASE_UNAVAILABLE: each was one DELETE of 10,000 ids, which InnoDB ran
    as a scan of the whole table at REPEATABLE READ, locking every row and
    every gap until commit; node 1 could apply a line written elsewhere only
    through those locks, so Galera aborted the prune (1213), every retry.
    """
    ended, live = range(2001, 2021), 2099
    _fill(tables[0], ended, lines_each=1000, live_run=live)
    runs = [*ended, live]
    written: dict[int, list[str]] = {run: [] for run in runs}
    count = threading.Condition()
    writes = 0
    stop = threading.Event()

    def write(writer: int) -> None:
        nonlocal writes
        node = tables[1 + writer % 2]
        conn = pymysql.connect(
            host="127.0.0.1", port=node.port, user="root", database=node.database, autocommit=True
        )
        i = 0
        try:
            while not stop.is_set():
                run, text = runs[(writer + i) % len(runs)], f"w{writer}-{i}"
                with conn.cursor() as cur:
                    cur.execute(
                        "INSERT INTO event_run_log (run_id, at, kind, detail) VALUES (%s, UTC_TIMESTAMP(3), "
                        "'note', %s)",
                        (run, json.dumps({"text": text, "actor": None})),
                    )
                with count:
                    written[run].append(text)
                    writes += 1
                    count.notify_all()
                i += 1
        finally:
            conn.close()

    def prune() -> int:
        body = local.post(
            f"{services[0].base}/graphql",
            json={"query": BIG_PRUNE, "variables": {"before": "2021-01-01T00:00:00Z"}},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=120,
        ).json()
        assert "errors" not in body, f"after {answers}: {body}"
        deleted: int = body["data"]["pruneTerminal"]
        return deleted

    def old_lines_left() -> int:
        sql = "SELECT COUNT(*) FROM event_run_log WHERE run_id BETWEEN 2001 AND 2020 AND at < '2021-01-01'"
        return int(_rows(tables[0], sql)[0][0])  # type: ignore[call-overload]

    answers: list[int] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        writers = [pool.submit(write, w) for w in range(2)]
        try:
            with count:  # the writers are writing through nodes 2 and 3
                assert count.wait_for(lambda: writes >= 20, timeout=120), "the writers did not start"
                first = writes
            # Prune until every old line is gone, and on until the writers
            # have written 100 more lines meanwhile.
            while old_lines_left() or writes < first + 100:
                answers.append(prune())
                assert len(answers) < 500, answers
        finally:
            stop.set()
            for future in writers:
                future.result()
    while answers[-1] != 0:  # the writers have stopped: drain what they wrote to the ended runs
        answers.append(prune())
    counts = _rows(
        tables[1],
        "SELECT run_id, COUNT(*) FROM event_run_log WHERE run_id BETWEEN 2001 AND 2099 GROUP BY run_id",
    )
    assert counts == [(live, 1000 + len(written[live]))]
    assert _texts(tables[2], live) == sorted(["x"] * 1000 + written[live])
    assert sum(answers) == 20 * 1000 + sum(len(written[run]) for run in ended)


def test_a_read_through_the_services_engine_on_one_node_sees_what_another_node_just_committed(
    tables: list[sa.URL],
) -> None:
    """Without causal reads, 10 of 300 such reads missed the row (run on this machine)."""

    async def main() -> int:
        engine = create_engine(Settings(database_url=tables[1].render_as_string(hide_password=False)))
        writer = pymysql.connect(
            host="127.0.0.1", port=tables[0].port, user="root", database=tables[0].database, autocommit=True
        )
        missed = 0
        try:
            async with engine.connect() as conn:
                with writer.cursor() as cur:
                    for i in range(300):
                        cur.execute(
                            "INSERT INTO event_run_log (run_id, at, kind, detail) "
                            "VALUES (9, UTC_TIMESTAMP(3), 'note', %s)",
                            (f'{{"text":"{i}","actor":null}}',),
                        )
                        count = sa.text("SELECT COUNT(*) FROM event_run_log WHERE run_id = 9")
                        missed += (await conn.execute(count)).scalar() != i + 1
        finally:
            writer.close()
            await engine.dispose()
        return missed

    assert asyncio.run(main()) == 0


KEYED = (
    "mutation($runId: ID!, $key: String!, $text: String!) {"
    ' writeRunLog(runId: $runId, kind: "note", detail: {text: $text}, idempotencyKey: $key) }'
)


def test_one_key_written_through_two_nodes_at_once_is_stored_once_and_both_hear_true(
    tables: list[sa.URL], services: Services
) -> None:
    """The two transactions conflict at certification; the one that lost is sent again and finds the key."""
    answers: list[int] = []
    barrier = threading.Barrier(2)

    def write(args: tuple[int, int]) -> None:
        node, i = args
        barrier.wait()
        body = local.post(
            f"{services[node].base}/graphql",
            json={"query": KEYED, "variables": {"runId": "11", "key": f"k{i}", "text": f"keyed {i}"}},
            timeout=30,
        ).json()
        answers.append(body)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for i in range(40):
            list(pool.map(write, [(0, i), (1, i)]))
    assert [body for body in answers if body != {"data": {"writeRunLog": True}}] == []
    assert _texts(tables[2], 11) == sorted(f"keyed {i}" for i in range(40))


NEWER = (
    "query($before: String) { runLog(runId: 12, before: $before, limit: 7, wait: 1) {"
    " nodes { id cursor } pageInfo { hasPreviousPage startCursor } } }"
)


def test_a_reader_on_one_node_following_newer_pages_gets_every_line_written_through_the_others_once(
    tables: list[sa.URL], services: Services
) -> None:
    """Ids interleave by node and commits land late; `before` pages with the long poll still miss nothing."""
    writers, reader = [services[0].base, services[2].base], services[1].base
    delivered: list[str] = []

    def write(i: int) -> None:
        body = _write_note(writers[i % 2], 12, str(i))
        assert body == {"data": {"writeRunLog": True}}, body

    write(-1)
    with local.Client(base_url=reader, timeout=30) as client:
        first = client.post(
            "/graphql", json={"query": "{ runLog(runId: 12) { nodes { id } pageInfo { startCursor } } }"}
        )
        first_page = first.json()["data"]["runLog"]
        first_id, cursor = first_page["nodes"][0]["id"], first_page["pageInfo"]["startCursor"]
        with ThreadPoolExecutor(max_workers=6) as pool:
            writing = [pool.submit(write, i) for i in range(200)]
            quiet = 0
            # Three empty long polls in a row once the writers are done, each
            # saying no newer line remains (a burst of more lines than a
            # cursor names is held back, with hasPreviousPage, until it settles).
            for _ in range(300):  # a bound on the polls, not a wait: each returns when lines come
                if quiet == 3:
                    break
                page = client.post("/graphql", json={"query": NEWER, "variables": {"before": cursor}}).json()
                runlog = page["data"]["runLog"]
                delivered.extend(node["id"] for node in reversed(runlog["nodes"]))
                if runlog["nodes"]:
                    cursor = runlog["pageInfo"]["startCursor"]
                    quiet = 0
                elif all(future.done() for future in writing) and not runlog["pageInfo"]["hasPreviousPage"]:
                    quiet += 1
            assert quiet == 3, f"still lines to follow after 300 polls: {len(delivered)} delivered"
            for future in writing:
                future.result()
    stored = {str(row[0]) for row in _rows(tables[1], "SELECT id FROM event_run_log WHERE run_id = 12")}
    assert len(delivered) == len(set(delivered)), "a line came twice"
    assert set(delivered) == stored - {first_id}
    assert len(stored) == 201


def test_a_tail_on_one_node_delivers_every_line_written_through_the_others_once(
    tables: list[sa.URL], services: Services
) -> None:
    """runLogTail on node 2 while two writers write through nodes 1 and 3: every line, once."""
    writers, reader = [services[0].base, services[2].base], services[1].base
    first = _write_note(writers[0], 13, "first")
    assert first == {"data": {"writeRunLog": True}}, first
    start = local.post(
        f"{reader}/graphql", json={"query": "{ runLog(runId: 13) { pageInfo { startCursor } } }"}, timeout=30
    ).json()
    since = start["data"]["runLog"]["pageInfo"]["startCursor"]
    seen: list[str] = []
    with open_tail(reader, 13, since) as ws:
        with ThreadPoolExecutor(max_workers=6) as pool:
            answers = list(pool.map(lambda i: _write_note(writers[i % 2], 13, str(i)), range(120)))
        assert all(body == {"data": {"writeRunLog": True}} for body in answers), answers
        while len(seen) < 120:
            seen.append(next_line(ws)["detail"]["text"])
        ws.send(json.dumps({"type": "complete", "id": "t"}))
    assert sorted(seen, key=int) == [str(i) for i in range(120)]
