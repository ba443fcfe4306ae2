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

from gql import writes
from gql.app import create_app

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


def test_a_write_is_one_transaction_its_line_and_its_words_each_with_its_bound(mariadb: Backend) -> None:
    mariadb.create_tables()
    with FaultProxy(*UPSTREAM) as proxy:
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)
        settings = mariadb.settings(database_url=url.render_as_string(hide_password=False))
        with TestClient(create_app(settings)) as client:
            api = Api(client)
            assert api.write(7, "note", {"text": "first"})  # opens a connection, finds the column
            for i in range(3):
                proxy.commands.clear()
                assert api.write(7, "note", {"text": f"line {i}"})
                # No ROLLBACK, ping or isolation change: BEGIN, the line, its words, COMMIT.
                assert [name for name, _ in proxy.commands] == ["query"] * 4, proxy.commands
                begin, line, words, commit = (text for _, text in proxy.commands)
                assert (begin, commit) == ("BEGIN", "COMMIT")
                for text, table in ((line, "event_run_log"), (words, "event_run_log_words")):
                    assert text.startswith("SET STATEMENT max_statement_time=")
                    assert f" FOR INSERT INTO {table} (" in text


def test_several_batches_are_at_the_database_at_once_and_no_more_than_the_bound(mariadb: Backend) -> None:
    mariadb.create_tables()
    with TestClient(create_app(mariadb.settings(write_timeout=UNHURRIED_WRITE_TIMEOUT))) as client:
        api = Api(client)
        assert api.write(7, "note", {"text": "warm"})
        locker = _connect(mariadb)
        watcher = _connect(mariadb)
        seen: list[int] = []
        stop = threading.Event()

        def watch() -> None:
            # The INSERTs the server holds behind the lock, every 50 ms.
            with watcher.cursor() as cur:
                while not stop.is_set():
                    cur.execute(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        "WHERE INFO LIKE '%%INSERT INTO event_run_log %%' AND ID <> CONNECTION_ID() "
                        # Others' tests share the server: only this test's database.
                        "AND DB = DATABASE()"
                    )
                    seen.append(int(cur.fetchone()[0]))
                    time.sleep(0.05)

        with locker.cursor() as cur:
            cur.execute("LOCK TABLES event_run_log WRITE")
        thread = threading.Thread(target=watch)
        thread.start()
        with ThreadPoolExecutor(20) as pool:
            sent = [pool.submit(api.write, 7, "note", {"text": f"line {i}"}) for i in range(20)]
            # Held until the bound's batches are at the lock (a fixed 1 s could
            # pass before they got there on a loaded machine), and 0.5 s more
            # for any batch past the bound to show.
            deadline = time.monotonic() + 30
            while max(seen, default=0) < writes.IN_FLIGHT and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
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
