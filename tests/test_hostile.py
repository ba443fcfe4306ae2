"""Input an attacker would send, found by fuzzing and by reading every `except`, cache and bound.

Each test is one case that once broke a promise of the README: a write that
answered with an error, a request that cost far more than its bound.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.api import page as page_module
from gql.edge.app import create_app
from gql.edge.view import MOST_BODY_NESTING
from gql.store import ANSWER_GRACE_SECONDS

from .conftest import MARIADB_URL, SLACK, Api, Backend
from .faultproxy import FaultProxy
from .test_bounded import held_bytes


def test_a_detail_nested_as_deep_as_the_body_parser_reads_answers_false(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # Near a thousand levels the request's JSON parser, high on the stack, once
    # read a detail that the encoder, deep in a resolver, could not write back:
    # writeRunLog answered INTERNAL_SERVER_ERROR. Every depth the body may nest
    # (MOST_BODY_NESTING, less the body's own three levels) up to the limit is tried.
    query = 'mutation($d: JSON) { writeRunLog(runId: 1, kind: "step.status", detail: $d) }'
    for depth in range(MOST_BODY_NESTING - 40, MOST_BODY_NESTING - 2):
        detail = '{"to": "x", "answer": ' + "[" * depth + "]" * depth + "}"
        body = '{"query": ' + json.dumps(query) + ', "variables": {"d": ' + detail + "}}"
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gql"):
            response = api.client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 200, (depth, response.text)
        answer = response.json()
        assert answer["data"] == {"writeRunLog": False} and "errors" not in answer, (
            depth,
            response.text[:300],
        )
        (record,) = [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]
        assert record.levelno == logging.WARNING
        assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0


@pytest.mark.parametrize("depth", [MOST_BODY_NESTING + 1, 3000])
def test_valid_json_nested_deeper_than_the_limit_is_refused_naming_the_limit(api: Api, depth: int) -> None:
    # It was "Unable to parse request body as JSON", as if it were not JSON.
    query = "{ __typename }"
    body = '{"query": ' + json.dumps(query) + ', "variables": {"d": ' + "[" * depth + "]" * depth + "}}"
    response = api.client.post("/graphql", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["message"] == (
        f"The request body nests arrays and objects {depth + 2} deep: this service reads JSON "
        f"nested at most {MOST_BODY_NESTING} deep"
    )
    # A bracket in a string is not nesting.
    inside = json.dumps({"query": query, "variables": {"d": "[" * depth}})
    assert api.client.post(
        "/graphql", content=inside, headers={"Content-Type": "application/json"}
    ).json() == {"data": {"__typename": "Query"}}


def _doubling(fragments: int, on: str, leaf: str) -> str:
    """Fragments that each spread the next twice: a few hundred bytes, 2**fragments leaves."""
    chain = " ".join(
        f"fragment F{i} on {on} {{ ...F{i + 1} ... on {on} {{ ...F{i + 1} }} }}" for i in range(fragments)
    )
    return f"{chain} fragment F{fragments} on {on} {{ {leaf} }}"


@pytest.mark.parametrize(
    "query",
    [
        "query { ...F0 } " + _doubling(12, "Query", "__typename"),
        "query { runLog(runId: 1) { ...F0 } } " + _doubling(12, "RunLogPage", "nodes { id }"),
    ],
)
def test_fragments_spread_over_and_over_are_refused_before_they_are_walked(api: Api, query: str) -> None:
    # Strawberry's depth and alias rules, and the resolver's look at its
    # selection, walk a fragment once per spread: twenty such fragments (a
    # kilobyte) held the event loop for minutes.
    body = api.post(query)
    assert "data" not in body  # a request error: nothing ran
    (error,) = body["errors"]
    assert error["message"].startswith("The document holds more than 2000 selections once its fragments")
    assert error["extensions"] == {"code": "TOO_MANY_SELECTIONS", "maxSelections": 2000}


def test_fragments_spread_within_a_budget_and_a_fragment_cycle_are_answered_as_ever(api: Api) -> None:
    assert api.data("query { ...F0 } " + _doubling(8, "Query", "__typename")) == {"__typename": "Query"}
    body = api.post("query { ...A } fragment A on Query { ...B ...B } fragment B on Query { ...A }")
    assert "data" not in body
    assert body["errors"][0]["message"].startswith("Cannot spread fragment 'A' within itself")


LINE = "id kind at detail { __typename ... on RunBlockedDetail { concurrencyKey blockingRun { id } } }"


@pytest.mark.parametrize(
    ("selection", "lines"),
    [
        # Each alias of `nodes` serves the page's 2,000 lines again.
        (" ".join(f"n{i}: nodes {{ {LINE} }}" for i in range(6)), 12_000),
        # So does each alias of `detail` or `blockingRun`, under each `nodes`.
        (f"nodes {{ {LINE} " + " ".join(f"d{i}: detail {{ __typename }}" for i in range(5)) + " }", 12_000),
        (
            "nodes { detail { ... on RunBlockedDetail { "
            + " ".join(f"b{i}: blockingRun {{ id }}" for i in range(6))
            + " } } }",
            12_000,
        ),
    ],
)
def test_a_page_served_again_under_aliases_counts_against_the_line_budget(
    api: Api, selection: str, lines: int
) -> None:
    query = f"{{ runLog(runId: 1, limit: 2000) {{ {selection} }} }}"
    (error,) = api.post(query)["errors"]
    assert error["extensions"] == {"code": "TOO_MANY_LINES", "lines": lines, "maxLines": 10_000}
    assert (
        "a page served under several aliases of nodes, detail or blockingRun counts once" in error["message"]
    )


def test_a_page_served_once_is_counted_once_however_its_fragments_select_it(api: Api) -> None:
    # The frontend's fragments name nodes, detail and blockingRun more than
    # once under the same response keys: graphql-core merges them, and so does
    # the count. Five such full pages fit the default budget.
    spread = "fragment L on RunLogLine { id detail { ... on RunBlockedDetail { blockingRun { id } } } }"
    page = f"nodes {{ ...L }} nodes {{ {LINE} }}"
    query = (
        "{ "
        + " ".join(f"r{i}: runLog(runId: 1, limit: 2000) {{ {page} }}" for i in range(5))
        + " } "
        + spread
    )
    assert api.post(query).get("errors") is None
    five = " ".join(f"n{i}: nodes {{ {LINE} }}" for i in range(5))
    assert api.post(f"{{ runLog(runId: 1, limit: 2000) {{ {five} }} }}").get("errors") is None


def _strict_json(text: str) -> Any:
    """`text` read as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_page_with_a_stored_nan_and_an_integer_past_64_bits_is_still_json(
    tables: Backend, api: Api
) -> None:
    # Written by another tool: JSON has no NaN, and Python's reader takes it.
    # A page with an integer past 64 bits anywhere on it is written by the
    # standard encoder, which wrote NaN as it is: a page no browser could read.
    for detail in [
        '{"to": "x", "answer": [NaN, Infinity]}',
        '{"to": "y", "answer": 123456789012345678901234567890}',
    ]:
        tables.execute(
            "INSERT INTO event_run_log (run_id, kind, detail, at)"
            " VALUES (1, 'step.status', :d, '2026-01-01 00:00:00')",
            d=detail,
        )
    response = api.client.post(
        "/graphql",
        json={"query": "{ runLog(runId: 1) { nodes { detail { ... on StepStatusDetail { to answer } } } } }"},
    )
    assert response.status_code == 200
    nodes = _strict_json(response.text)["data"]["runLog"]["nodes"]
    assert [n["detail"] for n in nodes] == [
        {"to": "y", "answer": 123456789012345678901234567890},
        {"to": "x", "answer": [None, None]},
    ]


@pytest.mark.mariadb
def test_a_write_waits_for_the_detail_columns_size_no_longer_than_its_own_deadline(mariadb: Backend) -> None:
    # The detail limit is the column's size, looked up once; while the
    # database cannot be asked, every write with a detail asks again. That
    # lookup waited RUNLOG_CONNECT_TIMEOUT (up to 60 s), whatever was left of
    # the line's deadline: a hung database held each write for 10 s here.
    mariadb.create_tables()
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    with FaultProxy(*upstream) as proxy:
        # Down from the start: the lookup at start-up finds nothing. Refused,
        # it finds that at once; hung, start-up waited out the 10 s connect
        # timeout, as it may (the start-up lookup is not a line's).
        proxy.refuse()
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)
        settings = mariadb.settings(
            database_url=url.render_as_string(hide_password=False), write_timeout=1.0, connect_timeout=10.0
        )
        with TestClient(create_app(settings)) as client:
            proxy.recover()
            proxy.hang()  # listening again, answering nothing: the write's lookup waits
            started = time.monotonic()
            assert Api(client).write(1, "note", {"text": "while hung"}) is False
            seconds = time.monotonic() - started
    # The line's one deadline, and the grace its answer may take past it (with
    # slack, still short of the 10 s connect timeout it waited before).
    assert seconds < 1.0 + ANSWER_GRACE_SECONDS + SLACK, seconds


def test_fields_repeated_under_one_name_are_refused_within_a_bounded_check(api: Api) -> None:
    # graphql-core compares fields sharing a response name pair by pair: 470
    # of them in one selection (1,900 tokens, within every other limit) held
    # the event loop for 1.3 s before it gave up with "Validation aborted.".
    query = "{ runLog(runId: 1) { nodes { " + " ".join(["detail { __typename }"] * 470) + " } } }"
    for _ in range(2):  # the second time, the validation is the cached one
        body = api.post(query)
        assert "data" not in body
        (error,) = body["errors"]
        assert error["message"].startswith("The document selects fields under one response name too many")
        assert error["extensions"] == {"code": "TOO_COMPLEX", "maxComparisons": 25_000}


def test_a_refused_line_of_characters_the_log_escapes_is_bounded_as_logged(
    tables: Backend, make_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # 32,000 NELs are 64,000 bytes as sent, within the detail limit, and were
    # logged whole: 192,000 bytes of escapes, for each of thirty aliased
    # writes of one variable (5.8 MB of log from one 200 KB request), escaped
    # one character at a time in Python (a second of the event loop).
    api = make_api(writer_tokens=("writer-token-0123456789",))
    writes = " ".join(f'w{i}: writeRunLog(runId: 1, kind: "note", detail: $d)' for i in range(30))
    with caplog.at_level(logging.WARNING, logger="gql"):
        data = api.data(f"mutation($d: JSON) {{ {writes} }}", {"d": {"text": "\x85" * 32_000}})
    assert set(data.values()) == {False}
    records = [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]
    assert len(records) == 30
    for record in records:
        message = record.getMessage()
        assert len(message.encode()) < 64 * 1024, len(message.encode())
        assert message.isprintable()
        assert "as logged, over the 66560 logged whole; sha256" in message


def test_a_refused_line_with_a_character_the_log_escapes_still_reads_back_whole(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    detail = {"text": "Britain\u2019s moongate \x85 and \x7f, caf\u00e9 \U0001f600"}
    with caplog.at_level(logging.WARNING, logger="gql"):
        assert api.write(1, "note", {**detail, "extra": 1}) is False
    (record,) = [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]
    message = record.getMessage()
    assert message.isprintable()
    assert json.loads(message.split("; line ", 1)[1])["detail"] == {**detail, "extra": 1}


@pytest.mark.mariadb
def test_a_keyed_line_that_waited_for_its_key_is_not_stamped_behind_lines_read_meanwhile(
    mariadb: Backend,
) -> None:
    # A keyed write waits for the row lock of another writer holding the same
    # key (a retry racing its first try). It was stamped before the wait: a
    # plain line written meanwhile was newer, a reader paging back from the
    # newest line passed both, and the keyed line, stored and answered true,
    # landed between two lines already read: no page ever showed it.
    mariadb.create_tables()
    with TestClient(create_app(mariadb.settings())) as client:
        _keyed_line_waits_for_its_key(Api(client), mariadb)


def _keyed_line_waits_for_its_key(api: Api, mariadb: Backend) -> None:
    write = (
        'mutation($k: String, $t: String!) { writeRunLog(runId: 1, kind: "note", detail: {text: $t},'
        " idempotencyKey: $k) }"
    )
    assert api.data(write, {"t": "old"})["writeRunLog"] is True
    other = pymysql.connect(
        host=MARIADB_URL.host or "127.0.0.1",
        port=MARIADB_URL.port or 3306,
        user=MARIADB_URL.username or "root",
        password=MARIADB_URL.password or "",
        database=sa.make_url(mariadb.url).database,
        autocommit=False,
    )
    keyed: dict[str, Any] = {}
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "INSERT INTO event_run_log_keys (run_id, key_digest, line_digest, created_at)"
                " VALUES (1, %s, 'another line', NOW(3))",
                (hashlib.sha256(b"k").hexdigest(),),
            )
        waiting = threading.Thread(target=lambda: keyed.update(api.data(write, {"k": "k", "t": "keyed"})))
        waiting.start()
        # Until the keyed write waits for the key's row lock (MariaDB shows the wait).
        deadline = time.monotonic() + 30
        while not mariadb.scalar(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX t"
            " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
            " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
        ):
            assert waiting.is_alive(), keyed
            assert time.monotonic() < deadline, "the keyed write never waited for the key's row lock"
            time.sleep(0.2)  # InnoDB refreshes INNODB_TRX only when it was not read in the last 0.1 s
        assert api.data(write, {"t": "plain"})["writeRunLog"] is True
        # A reader reads the newest page now: "plain", then "old".
        first = api.data("{ runLog(runId: 1, limit: 2) { nodes { detail { ... on NoteDetail { text } } } } }")
    finally:
        other.rollback()  # the other writer gives up its key
        other.close()
    waiting.join()
    assert keyed == {"writeRunLog": True}
    assert [n["detail"]["text"] for n in first["runLog"]["nodes"]] == ["plain", "old"]
    # The keyed line is newer than both, where a reader finds it (on top),
    # never between two lines it has already read.
    newest = api.data("{ runLog(runId: 1) { nodes { detail { ... on NoteDetail { text } } } } }")
    assert [n["detail"]["text"] for n in newest["runLog"]["nodes"]] == ["keyed", "plain", "old"]


def test_a_stored_line_is_not_logged_as_not_stored_when_a_sibling_field_nulls_the_answer(
    tables: Backend, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # pruneTerminal is non-null: its refusal nulls the whole answer, after the
    # write before it ran and stored its line. That line was logged as "not
    # stored: the request was refused before it ran", a trace that would have
    # a reader send it again.
    query = (
        'mutation { w: writeRunLog(runId: 1, kind: "note", detail: {text: "stored"})'
        ' p: pruneTerminal(before: "2020-01-01T00:00:00Z") }'
    )
    with caplog.at_level(logging.WARNING, logger="gql"):
        body = api.post(query)
    assert body["data"] is None
    assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAUTHENTICATED"]
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 1
    assert not [r for r in caplog.records if r.getMessage().startswith("run log line not stored")]


@pytest.mark.mariadb
def test_aliased_writes_to_a_database_that_does_not_answer_share_the_requests_deadline(
    mariadb: Backend,
) -> None:
    # The writes of one mutation run one after another: each waited out a
    # deadline of its own, so thirty aliased writes held their request for
    # thirty times RUNLOG_WRITE_TIMEOUT (and a slot of the server with it).
    mariadb.create_tables()
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    writes = " ".join(f'w{i}: writeRunLog(runId: 1, kind: "note")' for i in range(10))
    with FaultProxy(*upstream) as proxy:
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)
        settings = mariadb.settings(database_url=url.render_as_string(hide_password=False), write_timeout=1.0)
        with TestClient(create_app(settings)) as client:
            api = Api(client)
            assert api.write(1, "note") is True
            proxy.hang()
            started = time.monotonic()
            answers = api.data(f"mutation {{ {writes} }}")
            seconds = time.monotonic() - started
    assert set(answers.values()) == {False}
    # One deadline and its grace (with slack), not ten deadlines one after another.
    assert seconds < 1.0 + ANSWER_GRACE_SECONDS + SLACK, seconds


def test_what_runlog_remembers_of_a_query_holds_no_document_alive(api: Api) -> None:
    # runLog remembers, per operation, whether it selects blockingRun. It
    # held each operation, and with it the whole parsed text: 128 texts of
    # 2,000 tokens and a long comment held over 100 MiB, past every cache's bound.
    # Eight such texts would hold over 6 MiB: past the bound below as surely.
    for n in range(8):
        text = (
            f"# {n} "
            + "x" * 60_000
            + "\n{ runLog(runId: 1, kinds: ["
            + "NOTE " * 1900
            + "]) { nodes { id } } }"
        )
        assert api.data(text) == {"runLog": {"nodes": []}}
    assert held_bytes(page_module._ASKED) < 1024 * 1024


@pytest.mark.mariadb
def test_the_prune_command_against_a_database_that_does_not_answer_ends_by_its_timeout(
    mariadb: Backend,
) -> None:
    # aiomysql reads without a timeout: the command waited for ever on a
    # database that accepted its connection and said nothing (a cron job
    # would never end). Each call is bounded by RUNLOG_PRUNE_TIMEOUT.
    mariadb.create_tables()
    upstream = (MARIADB_URL.host or "127.0.0.1", MARIADB_URL.port or 3306)
    with FaultProxy(*upstream) as proxy:
        proxy.hang()
        url = sa.make_url(mariadb.url).set(host="127.0.0.1", port=proxy.port)
        env = {
            **os.environ,
            "RUNLOG_DATABASE_URL": url.render_as_string(hide_password=False),
            "RUNLOG_PRUNE_TIMEOUT": "2",
        }
        done = subprocess.run(
            [sys.executable, "-m", "gql", "prune", "--older-than", "1d"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert "the database did not finish" in done.stderr and "within 2s" in done.stderr, done.stderr
