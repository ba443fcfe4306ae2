"""Writes on the wire (MariaDB): one transaction per batch, a few batches at the database at once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.domain import writes
from gql.edge.app import create_app

from .conftest import MARIADB_URL, UNHURRIED_WRITE_TIMEOUT, Api, Backend
from .faultproxy import FaultProxy

pytestmark = pytest.mark.mariadb

UPSTREAM = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)


def _connect(backend: Backend) -> Any:
    return pymysql.connect(
        host=UPSTREAM[0],
        port=UPSTREAM[1],
        user=MARIADB_URL.username or "root",
        password=MARIADB_URL.password or "",
        database=sa.make_url(backend.url).database,
        autocommit=True,
    )


KEYED = (
    'mutation($k: String) { writeRunLog(runId: 7, kind: "note", detail: {text: "keyed"},'
    " idempotencyKey: $k) }"
)


@pytest.mark.parametrize("keyed", [False, True], ids=["batched", "keyed"])
def test_a_write_is_one_transaction_each_statement_with_its_bound(mariadb: Backend, keyed: bool) -> None:
    """A keyed write's key, the line, its words, then COMMIT: no BEGIN (the first INSERT opens the
    transaction), ROLLBACK, ping, or isolation level set and put back."""
    tables = ["event_run_log_keys"] * keyed + ["event_run_log", "event_run_log_words"]
    mariadb.create_tables()
    with FaultProxy(*UPSTREAM) as proxy:
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)
        settings = mariadb.settings(database_url=url.render_as_string(hide_password=False))
        with TestClient(create_app(settings)) as client:
            api = Api(client)
            assert api.write(7, "note", {"text": "first"})  # opens a connection, finds the column
            for i in range(3):
                proxy.commands.clear()
                if keyed:
                    assert api.data(KEYED, {"k": f"key {i}"}) == {"writeRunLog": True}
                else:
                    assert api.write(7, "note", {"text": f"line {i}"})
                assert [name for name, _ in proxy.commands] == ["query"] * (len(tables) + 1), proxy.commands
                *inserts, commit = (text for _, text in proxy.commands)
                assert commit == "COMMIT"
                for text, table in zip(inserts, tables, strict=True):
                    assert text.startswith("SET STATEMENT max_statement_time="), text
                    assert f" FOR INSERT INTO {table} (" in text, text


def test_several_batches_are_at_the_database_at_once_and_no_more_than_the_bound(mariadb: Backend) -> None:
    mariadb.create_tables()
    with TestClient(create_app(mariadb.settings(write_timeout=UNHURRIED_WRITE_TIMEOUT))) as client:
        api = Api(client)
        assert api.write(7, "note", {"text": "warm"})
        writer = client.app_state["writer"]
        locker = _connect(mariadb)
        watcher = _connect(mariadb)
        seen: list[int] = []
        stop = threading.Event()
        placed = threading.Event()  # each line at the lock or waiting in the queue: none on its way

        def watch() -> None:
            # The INSERTs the server holds behind the lock, polled every 50 ms.
            with watcher.cursor() as cur:
                while not stop.is_set():
                    cur.execute(
                        "SELECT INFO FROM information_schema.PROCESSLIST "
                        "WHERE INFO LIKE '%%INSERT INTO event_run_log %%' AND ID <> CONNECTION_ID() "
                        # Others' tests share the server: only this test's database.
                        "AND DB = DATABASE()"
                    )
                    held = [info for (info,) in cur.fetchall()]
                    seen.append(len(held))
                    # Read after the server's list: a batch that moved between the two is in neither.
                    if sum(info.count("line ") for info in held) + writer.lines_waiting() == 20:
                        placed.set()
                    time.sleep(0.05)  # a poll

        with locker.cursor() as cur:
            cur.execute("LOCK TABLES event_run_log WRITE")
        thread = threading.Thread(target=watch)
        thread.start()
        with ThreadPoolExecutor(20) as pool:
            sent = [pool.submit(api.write, 7, "note", {"text": f"line {i}"}) for i in range(20)]
            # Held until every line is behind the lock or in the queue: a batch past the
            # bound would be at the lock by then.
            assert placed.wait(30), seen
            with locker.cursor() as cur:
                cur.execute("UNLOCK TABLES")
            answers = [future.result() for future in sent]
        stop.set()
        thread.join()
        locker.close()
        watcher.close()
    assert answers == [True] * 20
    assert max(seen) == writes.IN_FLIGHT, seen
    texts = sorted(
        row.detail for row in mariadb.rows("SELECT detail FROM event_run_log WHERE detail LIKE '%line%'")
    )
    assert texts == sorted(f'{{"text":"line {i}"}}' for i in range(20))
