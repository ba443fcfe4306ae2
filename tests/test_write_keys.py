"""`writeRunLog(idempotencyKey:)`: a retry with the same key stores the line at most once."""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app

from .conftest import MARIADB_URL, Api, Backend
from .faultproxy import FaultProxy

KEYED = (
    "mutation W($runId: ID!, $kind: String!, $detail: JSON, $key: String) {"
    " writeRunLog(runId: $runId, kind: $kind, detail: $detail, idempotencyKey: $key) }"
)


def keyed(api: Api, run_id: int, text: str, key: str | None) -> bool:
    body = api.post(KEYED, {"runId": run_id, "kind": "note", "detail": {"text": text}, "key": key})
    assert "errors" not in body, body
    answer: bool = body["data"]["writeRunLog"]
    return answer


def lines(backend: Backend) -> list[tuple[int, str]]:
    return [
        (row.run_id, row.detail)
        for row in backend.rows("SELECT run_id, detail FROM event_run_log ORDER BY id")
    ]


def test_the_same_key_for_the_same_run_stores_the_line_once(tables: Backend, api: Api) -> None:
    assert keyed(api, 1, "once", "k-1")
    assert keyed(api, 1, "once", "k-1")  # a retry of a stored line: true, nothing more stored
    assert keyed(api, 2, "once", "k-1")  # another run: its own line
    assert keyed(api, 1, "again", "k-2")
    assert keyed(api, 1, "no key", None)
    assert lines(tables) == [
        (1, '{"text":"once"}'),
        (2, '{"text":"once"}'),
        (1, '{"text":"again"}'),
        (1, '{"text":"no key"}'),
    ]


def test_concurrent_retries_with_one_key_store_one_line(tables: Backend, api: Api) -> None:
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: keyed(api, 1, "raced", "k-race"), range(6)))
    assert answers == [True] * 6
    assert lines(tables) == [(1, '{"text":"raced"}')]


def test_a_key_reused_for_another_line_answers_false(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    assert keyed(api, 1, "first", "k-1")
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert keyed(api, 1, "second", "k-1") is False
    assert "already stored a different line" in caplog.text
    assert lines(tables) == [(1, '{"text":"first"}')]


@pytest.mark.parametrize("key", ["", "k" * 257])
def test_a_key_outside_1_to_256_characters_answers_false(tables: Backend, api: Api, key: str) -> None:
    assert keyed(api, 1, "x", key) is False
    assert lines(tables) == []


@pytest.mark.mariadb
def test_a_commit_whose_answer_was_lost_then_retried_with_its_key_is_stored_once(
    mariadb: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    mariadb.create_tables()
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    with FaultProxy(*upstream) as proxy:
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)
        settings = mariadb.settings(database_url=url.render_as_string(hide_password=False), write_timeout=1.5)
        with TestClient(create_app(settings)) as client:
            api = Api(client)
            assert keyed(api, 1, "warm", "k-warm")
            engine = client.app_state["write_engine"]  # the writes' pool

            def lose_the_answer(conn: Any) -> None:
                proxy.deafen()  # the COMMIT reaches the server; its answer does not come back

            sa.event.listen(engine.sync_engine, "commit", lose_the_answer)
            with caplog.at_level(logging.WARNING, logger="gql"):
                told = keyed(api, 1, "committed, answer lost", "k-lost")
            sa.event.remove(engine.sync_engine, "commit", lose_the_answer)
            assert told is False  # the caller was told false...
            assert "outcome unknown" in caplog.text
            proxy.recover()
            deadline = time.monotonic() + 30  # generous: a wait for the commit, not a speed
            while (1, '{"text":"committed, answer lost"}') not in lines(mariadb):
                assert time.monotonic() < deadline, "the commit never landed"
                time.sleep(0.1)
            # ...and the line was stored. The retry with its key answers true
            # and stores nothing more.
            assert keyed(api, 1, "committed, answer lost", "k-lost")
    assert lines(mariadb).count((1, '{"text":"committed, answer lost"}')) == 1


def test_keys_older_than_a_day_are_forgotten_in_bounded_slices(tables: Backend, api: Api) -> None:
    import asyncio
    import datetime

    from gql import store
    from gql.domain import writes
    from gql.store.db import create_engine

    assert keyed(api, 1, "recent", "k-recent")
    old = datetime.datetime(2020, 1, 1)
    for i in range(5):
        tables.execute(
            "INSERT INTO event_run_log_keys (run_id, key_digest, line_digest, created_at)"
            " VALUES (1, :k, 'x', :c)",
            k=f"{i:064d}",
            c=old,
        )

    async def forget() -> list[int]:
        engine = create_engine(tables.settings())
        try:
            before = store.utc_now_millis() - writes.KEY_TTL
            return [await store.forget_keys(engine, before=before, limit=3) for _ in range(3)]
        finally:
            await engine.dispose()

    assert asyncio.run(forget()) == [3, 2, 0]
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log_keys") == 1  # the recent key stays
    assert keyed(api, 1, "recent", "k-recent")  # and still answers its retry
    assert len(lines(tables)) == 1


def keyed_detail(api: Api, kind: str, detail: dict[str, Any], key: str) -> bool:
    body = api.post(KEYED, {"runId": 1, "kind": kind, "detail": detail, "key": key})
    assert "errors" not in body, body
    answer: bool = body["data"]["writeRunLog"]
    return answer


@pytest.mark.parametrize(
    ("kind", "first", "retry"),
    [
        ("note", {"text": "paused", "actor": "ops"}, {"actor": "ops", "text": "paused"}),
        ("note", {"text": "paused"}, {"text": "paused", "actor": None}),
        ("note", {"text": "paused", "actor": None}, {"text": "paused"}),
        (
            "run.blocked",
            {"blockingRunId": 7, "concurrencyKey": "k"},
            {"concurrencyKey": "k", "blockingRunId": "7"},
        ),
        (
            "step.retry",
            {"attempt": 2, "error": "e", "retryAt": "2026-01-01T10:00:00Z"},
            {"error": "e", "retryAt": "2026-01-01T11:00:00+01:00", "attempt": 2, "maxAttempts": None},
        ),
        (
            "phase.gate",
            {"condition": "c", "parameters": {"a": 1, "b": [1, {"x": None, "y": 2}]}},
            {"parameters": {"b": [1, {"y": 2, "x": None}], "a": 1}, "condition": "c"},
        ),
    ],
)
def test_a_retry_whose_detail_reads_the_same_is_the_same_line(
    tables: Backend, api: Api, kind: str, first: dict[str, Any], retry: dict[str, Any]
) -> None:
    assert keyed_detail(api, kind, first, "k-same")
    assert keyed_detail(api, kind, retry, "k-same")  # the same line, spelt another way: true
    assert keyed_detail(api, kind, retry, "k-same")  # and again, as a writer retries until true
    assert len(lines(tables)) == 1


@pytest.mark.parametrize(
    ("kind", "first", "retry"),
    [
        ("note", {"text": "paused", "actor": "ops"}, {"text": "paused"}),
        (
            "run.blocked",
            {"blockingRunId": "007", "concurrencyKey": "k"},
            {"concurrencyKey": "k", "blockingRunId": 7},
        ),
        # Inside a JSON value a null is a value, not a field left out.
        ("phase.gate", {"condition": "c", "parameters": {"x": None}}, {"condition": "c", "parameters": {}}),
    ],
)
def test_a_retry_whose_detail_reads_differently_is_refused(
    tables: Backend, api: Api, kind: str, first: dict[str, Any], retry: dict[str, Any]
) -> None:
    assert keyed_detail(api, kind, first, "k-other")
    assert keyed_detail(api, kind, retry, "k-other") is False
    assert len(lines(tables)) == 1


def test_a_key_stored_with_the_digest_of_the_detail_as_sent_still_answers_its_retry(
    tables: Backend, api: Api
) -> None:
    # What the service stored before it compared details as readers see them:
    # the digest of the JSON as sent. A retry spelt the same way still matches.
    def digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    as_sent = json.dumps(["note", None, None, '{"actor":"ops","text":"old"}'], ensure_ascii=False)
    tables.execute(
        "INSERT INTO event_run_log_keys (run_id, key_digest, line_digest, created_at) VALUES (1, :k, :l, :c)",
        k=digest("k-old"),
        l=digest(as_sent),
        c=datetime.datetime.now(datetime.UTC).replace(tzinfo=None),
    )
    assert keyed_detail(api, "note", {"actor": "ops", "text": "old"}, "k-old")
    assert lines(tables) == []  # found stored: nothing stored again
