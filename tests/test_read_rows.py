"""runLog over rows this service did not write: every page reads, and paging stays exact.

Other tools write to the same tables: SQLite's `CURRENT_TIMESTAMP` text, ISO
times with `T`, `Z` or an offset, MariaDB's zero dates, an older table whose
columns allow NULL or hold text. Each test reads through the HTTP app with the
query the clients ship (`gql/operations/RunLog.graphql` and its fragments).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql import store
from gql.edge.app import create_app
from gql.edge.graphiql import with_fragments
from gql.store.db import metadata

from .conftest import Api, Backend

OPERATIONS = Path(__file__).resolve().parent.parent / "gql" / "operations"
RUN_LOG = with_fragments((OPERATIONS / "RunLog.graphql").read_text())
STAND_IN = "0001-01-01T00:00:00+00:00"


def shipped_page(api: Api, run_id: Any, limit: int | None = None, after: str | None = None) -> dict[str, Any]:
    """One page through the shipped query; fails on any GraphQL error."""
    result: dict[str, Any] = api.data(RUN_LOG, {"runId": run_id, "limit": limit, "after": after})["runLog"]
    return result


def walk(api: Api, run_id: Any, limit: int) -> list[dict[str, Any]]:
    """Every line of a run, page by page; fails if the pages do not end."""
    nodes: list[dict[str, Any]] = []
    after = None
    for _ in range(200):
        page = shipped_page(api, run_id, limit=limit, after=after)
        nodes += page["nodes"]
        if not page["pageInfo"]["hasNextPage"]:
            return nodes
        after = page["pageInfo"]["endCursor"]
    raise AssertionError(f"200 pages of {limit} and still no end: {[n['id'] for n in nodes[-10:]]}")


def insert(backend: Backend, rows: list[dict[str, Any]], *, permissive: bool = False) -> list[int]:
    """Rows as another writer left them, each column given as SQL text; answers their ids."""
    ids = []
    with backend.sync.begin() as conn:
        if permissive and backend.name == "mariadb":
            # An older MariaDB, or a session that allows zero dates.
            conn.exec_driver_sql("SET SESSION sql_mode = ''")
        for row in rows:
            values = {"run_id": "7", "kind": "'note'", "step_id": "NULL", "phase": "NULL", "detail": "NULL"}
            values.update(row)
            names = ", ".join(values)
            result = conn.execute(
                sa.text(f"INSERT INTO event_run_log ({names}) VALUES ({', '.join(values.values())})")
            )
            ids.append(int(result.lastrowid))
    return ids


@pytest.fixture
def serve() -> Iterator[Callable[[Backend], Api]]:
    """Start the app on a backend whose tables the test made itself.

    On SQLite the app runs init-db as it starts, which adds the read indexes.
    """
    clients: list[TestClient] = []

    def start(backend: Backend) -> Api:
        client = TestClient(create_app(backend.settings()))
        client.__enter__()
        clients.append(client)
        return Api(client)

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def older_table(backend: Backend, phase: str = "VARCHAR(32)") -> None:
    """An `event_run_log` from before this service: NULL allowed everywhere, wider or text columns."""
    if backend.name == "mariadb":
        backend.execute(
            "CREATE TABLE event_run_log (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
            f"run_id INT NOT NULL, step_id INT NULL, kind VARCHAR(64) NULL, phase {phase} NULL, "
            "detail BLOB NULL, at DATETIME(3) NULL, KEY ix_event_run_log_run_at (run_id, at, id), "
            "KEY ix_event_run_log_run_kind_at (run_id, kind, at, id)) CHARACTER SET utf8mb4"
        )
    else:
        backend.execute(
            "CREATE TABLE event_run_log (id INTEGER PRIMARY KEY, run_id INT NOT NULL, step_id INT NULL, "
            f"kind VARCHAR(64) NULL, phase {phase} NULL, detail TEXT NULL, at DATETIME NULL)"
        )


# ── 1. SQLite's `at` text, ordered as the times it names ────────────────────

# Each stored `at` as another tool writes it, and the UTC time it names.
AT_TEXTS = [
    ("'2026-03-01 12:00:00'", "2026-03-01T12:00:00"),  # CURRENT_TIMESTAMP
    ("'2026-03-01T12:00:00Z'", "2026-03-01T12:00:00"),
    ("'2026-03-01 12:00:00.250'", "2026-03-01T12:00:00.250"),
    ("'2026-03-01T13:30:00+02:00'", "2026-03-01T11:30:00"),
    ("'2026-03-01T10:00:00-01:00'", "2026-03-01T11:00:00"),
    ("'2026-03-01T11:59:59.5'", "2026-03-01T11:59:59.500"),
    ("'2026-03-01 12:00'", "2026-03-01T12:00:00"),
    ("'2026-03-01 12:00:00.100000'", "2026-03-01T12:00:00.100"),  # as this service writes
    ("'2026-03-01T12:00:00.7+00:00'", "2026-03-01T12:00:00.700"),
    ("'2026-03-01'", "2026-03-01T00:00:00"),
]


@pytest.mark.parametrize("limit", [1, 2, 3, 500])
def test_lines_order_and_page_by_the_time_their_at_names_whatever_its_text(
    tables: Backend, api: Api, limit: int
) -> None:
    if tables.name == "sqlite":
        ids = insert(tables, [{"at": text} for text, _ in AT_TEXTS])
    else:  # a DATETIME holds the time itself, whatever text named it
        ids = insert(tables, [{"at": f"'{utc.replace('T', ' ')}'"} for _, utc in AT_TEXTS])
    named = {i: datetime.datetime.fromisoformat(utc) for i, (_, utc) in zip(ids, AT_TEXTS, strict=True)}
    expected = sorted(ids, key=lambda i: (named[i], i), reverse=True)
    nodes = walk(api, 7, limit)
    assert [int(n["id"]) for n in nodes] == expected
    assert [datetime.datetime.fromisoformat(n["at"]) for n in nodes] == [
        named[i].replace(tzinfo=datetime.UTC) for i in expected
    ]
    assert all(n["problem"] is None for n in nodes)


def test_a_line_written_by_this_service_pages_in_among_lines_of_other_tools(
    tables: Backend, api: Api
) -> None:
    assert api.write(7, "note", {"text": "now"})
    text = "'2999-01-01T00:00:00Z'" if tables.name == "sqlite" else "'2999-01-01 00:00:00'"
    insert(tables, [{"at": text}, {"at": "'2000-01-01 00:00:00'"}])
    nodes = walk(api, 7, 1)
    assert [n["at"][:4] for n in nodes] == ["2999", str(datetime.datetime.now(datetime.UTC).year), "2000"]


def test_sqlite_reads_a_page_through_an_index_range_on_the_normalised_at(tmp_path: Path) -> None:
    # MariaDB's plan is test_read.test_mariadb_reads_a_page_through_an_index_range.
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'plan.db'}")
    metadata.create_all(engine)
    cursor = store.Cursor(at=datetime.datetime(2026, 3, 1, 12), id=50)
    with engine.connect() as conn:
        # By kind, either of the two indexes on (run_id, kind, at, id) in some order is the same range.
        by_kind = (
            "ix_event_run_log_run_kind_utc (run_id=? AND kind=?",
            "ix_event_run_log_kind_run_utc (kind=? AND run_id=?",
        )
        for kinds, indexes in [(None, ("ix_event_run_log_run_utc (run_id=?",)), (["note"], by_kind)]:
            for after in (None, cursor, store.Cursor(at="", id=50)):
                query = store.page_query(run_id=7, kinds=kinds, limit=50, after=after, sqlite=True)
                sql = str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
                plan = " / ".join(row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
                assert any(f"SEARCH event_run_log USING INDEX {index}" in plan for index in indexes), plan
                assert "TEMP B-TREE" not in plan, plan
    engine.dispose()


# ── 2. A row no line can hold: readable, its problem stated, pages go on ────


def _bad_rows(backend: Backend) -> tuple[list[dict[str, str]], dict[int, str]]:
    """Good rows, and bad ones with the problem each must state (by position in the list)."""
    good = [{"at": f"'2026-03-01 12:00:0{i}'", "detail": f'\'{{"text": "good {i}"}}\''} for i in range(4)]
    if backend.name == "sqlite":
        bad = [
            {"at": "'yesterday'"},
            {"at": "''"},
            {"at": "12345"},
            {"at": "NULL"},
            {"at": "'2026-03-01 12:00:00 and a bit'"},
        ]
        bad_at = [
            "stored at 'yesterday' is not a time",
            "stored at '' is not a time",
            "stored at '12345' is not a time",
            "stored at is null",
            "stored at '2026-03-01 12:00:00 and a bit' is not a time",
        ]
        not_utf8 = "CAST(X'7b2274657874223a2022ff227d' AS TEXT)"  # {"text": "\xff"}
    else:
        bad = [
            {"at": "'0000-00-00 00:00:00'"},
            {"at": "'2026-00-00 00:00:00'"},
            {"at": "NULL"},
        ]
        bad_at = [
            "stored at '0000-00-00 00:00:00.000' is not a time",
            "stored at '2026-00-00 00:00:00.000' is not a time",
            "stored at is null",
        ]
        not_utf8 = "X'7b2274657874223a2022ff227d'"
    other = [
        {"at": "'2026-03-01 12:00:01.500'", "kind": "NULL"},
        {"at": "'2026-03-01 12:00:02.500'", "phase": "'three'"},
        {"at": "'2026-03-01 12:00:02.700'", "phase": f"'{2**40}'"},
        {"at": "'2026-03-01 12:00:00.500'", "detail": not_utf8},
    ]
    problems = dict(enumerate(bad_at, start=len(good)))
    start = len(good) + len(bad)
    problems[start] = "stored kind is null"
    problems[start + 1] = "stored phase 'three' is not an integer from -2147483648 to 2147483647"
    problems[start + 2] = f"stored phase '{2**40}' is not"  # text in a text column
    return good + bad + other, problems


@pytest.mark.parametrize("limit", [1, 2, 3, 500])
def test_rows_no_line_can_hold_read_with_their_problem_and_every_line_stays_reachable(
    backend: Backend, serve: Callable[[Backend], Api], limit: int
) -> None:
    older_table(backend)
    rows, problems = _bad_rows(backend)
    ids = insert(backend, rows, permissive=True)
    api = serve(backend)
    whole = shipped_page(api, 7, limit=2000)["nodes"]
    nodes = walk(api, 7, limit)
    seen = [int(n["id"]) for n in nodes]
    assert seen == [int(n["id"]) for n in whole], "pages disagree with the one whole page"
    assert sorted(seen) == sorted(ids), "a line was skipped or repeated"
    by_id = {int(n["id"]): n for n in nodes}
    for position, row_id in enumerate(ids):
        node = by_id[row_id]
        expected = problems.get(position)
        if expected is None:
            assert node["problem"] is None, node
        else:
            assert node["problem"] is not None and node["problem"].startswith(expected), node
    bad_at = [ids[p] for p, problem in problems.items() if problem.startswith("stored at")]
    for row_id in bad_at:
        assert by_id[row_id]["at"] == STAND_IN
    # The lines whose `at` is not a time come last, after every line with one.
    assert set(seen[-len(bad_at) :]) == set(bad_at)
    with_time = [datetime.datetime.fromisoformat(n["at"]) for n in nodes[: -len(bad_at)]]
    assert with_time == sorted(with_time, reverse=True)
    null_kind = by_id[ids[min(p for p, x in problems.items() if x == "stored kind is null")]]
    assert (null_kind["kind"], null_kind["kindName"]) == (None, "")
    assert all(by_id[ids[p]]["phase"] is None for p, x in problems.items() if "phase" in x)
    not_utf8 = by_id[ids[-1]]["detail"]
    assert not_utf8 == {
        "__typename": "UnreadableDetail",
        "text": '{"text": "\ufffd"}',
        "problem": "is not UTF-8 text: byte 10 is 0xff",
    }


def test_a_phase_past_32_bits_in_a_wider_column_reads_as_null_with_its_problem(
    backend: Backend, serve: Callable[[Backend], Api]
) -> None:
    older_table(backend, phase="BIGINT")
    low, high, fine = insert(
        backend,
        [
            {"at": "'2026-03-01 12:00:00'", "phase": f"{-(2**31) - 1}"},
            {"at": "'2026-03-01 12:00:01'", "phase": f"{2**31}"},
            {"at": "'2026-03-01 12:00:02'", "phase": f"{2**31 - 1}"},
        ],
    )
    nodes = {int(n["id"]): n for n in walk(serve(backend), 7, 1)}
    assert nodes[low]["phase"] is None
    assert (
        nodes[low]["problem"] == "stored phase -2147483649 is not an integer from -2147483648 to 2147483647"
    )
    assert nodes[high]["phase"] is None
    assert (
        nodes[high]["problem"] == "stored phase 2147483648 is not an integer from -2147483648 to 2147483647"
    )
    assert (nodes[fine]["phase"], nodes[fine]["problem"]) == (2**31 - 1, None)


def test_a_blocking_run_with_dates_that_are_not_times_still_reads(tables: Backend, api: Api) -> None:
    if tables.name == "mariadb":
        with tables.sync.begin() as conn:
            conn.exec_driver_sql("SET SESSION sql_mode = ''")
            conn.exec_driver_sql(
                "INSERT INTO event_runs (id, status, ended_at, updated_at) "
                "VALUES (37, 'completed', '0000-00-00 00:00:00', '0000-00-00 00:00:00')"
            )
    else:
        tables.execute(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) "
            "VALUES (37, 'completed', 'yesterday', '2026-03-01T12:00:00+02:00')"
        )
    assert api.write(38, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "invasion:Yew"})
    (node,) = shipped_page(api, 38)["nodes"]
    assert node["detail"]["blockingRun"] == {"id": "37", "status": "completed", "terminal": True}
    run = api.data(
        "{ runLog(runId: 38) { nodes { detail { ... on RunBlockedDetail {"
        " blockingRun { endedAt updatedAt } } } } } }"
    )["runLog"]["nodes"][0]["detail"]["blockingRun"]
    expected_updated = None if tables.name == "mariadb" else "2026-03-01T10:00:00+00:00"
    assert run == {"endedAt": None, "updatedAt": expected_updated}


@pytest.mark.parametrize(
    "stored", [f'"{"9" * 5000}"', '"-5"', '"abc"', '"0"', '"2147483648"', "9" * 5000, "-5"]
)
def test_a_stored_blocking_run_id_that_is_not_a_run_id_has_no_blocking_run(
    tables: Backend, api: Api, stored: str
) -> None:
    tables.add_run(37, "live", None, "2026-03-01 10:00:00")
    with tables.sync.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO event_run_log (run_id, kind, detail, at) "
                "VALUES (38, 'run.blocked', :detail, '2026-03-01 12:00:00')"
            ),
            {"detail": f'{{"blockingRunId": {stored}, "concurrencyKey": "k"}}'},
        )
    assert api.write(38, "run.blocked", {"blockingRunId": 37, "concurrencyKey": "k"})
    older, newer = reversed(shipped_page(api, 38)["nodes"])
    assert newer["detail"]["blockingRun"]["id"] == "37"
    detail = older["detail"]
    if detail["__typename"] == "RunBlockedDetail":
        assert detail["blockingRun"] is None
    else:  # a JSON number of 5,000 digits is past what a reader takes as an id
        assert detail["__typename"] == "UnreadableDetail"


# ── 3. Numbers out of range are the caller's to fix ─────────────────────────


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _cursor(position: bytes) -> str:
    """A plain cursor of run 7 (every kind) in this service's format, at `position`."""
    raw = bytes([2]) + _varint(7) + b"\x00" + position + b"\x00"
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_NOON = _varint(
    (datetime.datetime(2026, 3, 1, 12) - datetime.datetime(1, 1, 1)) // datetime.timedelta(microseconds=1)
)


@pytest.mark.parametrize(
    ("position", "says"),
    [
        (b"\x01" + _NOON + _varint(2**64), "its line id is not an integer from 1 to 9223372036854775807"),
        (b"\x01" + _NOON + _varint(2**63), "its line id is not an integer from 1 to 9223372036854775807"),
        (b"\x01" + _NOON + _varint(0), "its line id is not an integer from 1 to 9223372036854775807"),
        (b"\x01" + _NOON + b"\xff" * 5000, "is not a cursor this service issued"),
        (b"\x01" + _varint(2**62) + _varint(5), "its time is outside the years 1 to 9999 in UTC"),
        (b"\x02" + _varint(9) + b"yesterday" + _varint(5), "is not a cursor this service issued"),
        (b"\x07", "is not a cursor this service issued"),
    ],
)
def test_a_cursor_out_of_range_is_the_callers_error(api: Api, position: bytes, says: str) -> None:
    body = api.post(RUN_LOG, {"runId": "7", "after": _cursor(position)})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert says in error["message"]
    assert "pageInfo.endCursor" in error["message"]
    assert len(error["message"]) < 400


@pytest.mark.parametrize("run_id", ["9" * 5000, "0" * 20 + "5" * 11, "-" + "9" * 5000])
def test_a_run_id_of_thousands_of_digits_is_the_callers_error(api: Api, run_id: str) -> None:
    body = api.post(RUN_LOG, {"runId": run_id})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert "runId must be a positive integer up to 2147483647" in error["message"]
    assert len(error["message"]) < 200


def test_a_run_id_with_leading_zeros_is_still_the_run(api: Api) -> None:
    assert api.write(5, "note", {"text": "hi"})
    assert [n["runId"] for n in shipped_page(api, "0" * 20 + "5")["nodes"]] == ["5"]
