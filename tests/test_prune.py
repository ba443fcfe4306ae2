"""pruneTerminal: admins only; terminal runs older than the horizon; one bounded slice per call."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app

from .conftest import ADMIN, Api, Backend

PRUNE = "mutation($before: DateTime!, $limit: Int) { pruneTerminal(before: $before, limit: $limit) }"


def prune(api: Api, before: str, limit: int | None = None, token: str | None = ADMIN) -> Any:
    return api.post(PRUNE, {"before": before, "limit": limit}, token=token)


def lines_per_run(backend: Backend) -> dict[int, int]:
    rows = backend.rows("SELECT run_id, COUNT(*) FROM event_run_log GROUP BY run_id")
    return {run_id: count for run_id, count in rows}


@pytest.fixture
def runs(tables: Backend, api: Api) -> Backend:
    # Terminal and old: eligible, whether ended_at is set or only updated_at is.
    tables.add_run(1, "completed", "2026-01-01 00:00:00", "2026-03-01 00:00:00")
    tables.add_run(2, "failed", None, "2026-01-02 00:00:00")
    tables.add_run(3, "cancelled", "2026-01-03 00:00:00", "2026-01-03 00:00:00")
    tables.add_run(4, "missed", "2026-01-04 00:00:00", "2026-01-04 00:00:00")
    # Terminal but ended after the horizon: kept.
    tables.add_run(5, "completed", "2026-02-15 00:00:00", "2026-02-15 00:00:00")
    # Old but not terminal: kept, however old.
    tables.add_run(6, "live", None, "2025-01-01 00:00:00")
    tables.add_run(7, "paused", "2025-01-01 00:00:00", "2025-01-01 00:00:00")
    for run_id in range(1, 9):  # run 8 has no row in event_runs at all: kept
        for i in range(3):
            assert api.write(run_id, "note", {"text": f"line {i}"})
    return tables


def test_prunes_only_terminal_runs_older_than_the_horizon(runs: Backend, api: Api) -> None:
    assert prune(api, "2026-02-01T00:00:00") == {"data": {"pruneTerminal": 12}}
    assert lines_per_run(runs) == {5: 3, 6: 3, 7: 3, 8: 3}
    assert prune(api, "2026-02-01T00:00:00") == {"data": {"pruneTerminal": 0}}


def test_before_with_an_offset_is_converted_to_utc(runs: Backend, api: Api) -> None:
    # 2026-01-02T01:00:00+02:00 is 2026-01-01T23:00Z: only run 1 ended before it.
    assert prune(api, "2026-01-02T01:00:00+02:00")["data"]["pruneTerminal"] == 3
    assert 1 not in lines_per_run(runs)


def test_each_call_deletes_at_most_limit_lines(runs: Backend, api: Api) -> None:
    answers = [prune(api, "2026-02-01T00:00:00", limit=5)["data"]["pruneTerminal"] for _ in range(4)]
    assert answers == [5, 5, 2, 0]


@pytest.mark.parametrize(("limit", "expected"), [(None, 12), (0, 12), (-1, 1)])
def test_limit_null_or_zero_means_the_default_and_is_clamped_to_at_least_one(
    runs: Backend, api: Api, limit: int | None, expected: int
) -> None:
    assert prune(api, "2026-02-01T00:00:00", limit=limit)["data"]["pruneTerminal"] == expected


def test_a_caller_without_a_token_is_refused_and_nothing_is_deleted(runs: Backend, api: Api) -> None:
    body = prune(api, "2026-02-01T00:00:00", token=None)
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    assert "pruneTerminal is refused: the caller is not an admin" in error["message"]
    assert sum(lines_per_run(runs).values()) == 24


def test_a_wrong_token_is_not_an_admin(runs: Backend, api: Api) -> None:
    body = prune(api, "2026-02-01T00:00:00", token=ADMIN + "x")
    assert "the caller is not an admin" in body["errors"][0]["message"]
    assert sum(lines_per_run(runs).values()) == 24


def test_with_no_admin_token_configured_no_one_is_an_admin(tables: Backend, make_api: Any) -> None:
    api = make_api(admin_tokens=())
    for token in (None, "", ADMIN):
        body = prune(api, "2026-02-01T00:00:00", token=token)
        assert body["data"] is None
        assert "the caller is not an admin" in body["errors"][0]["message"]


def test_a_second_admin_token_works_during_a_rotation(runs: Backend, make_api: Any) -> None:
    new = "rotated-admin-token-0000"
    api = make_api(admin_tokens=(ADMIN, new))
    assert prune(api, "2026-02-01T00:00:00", limit=1, token=ADMIN)["data"]["pruneTerminal"] == 1
    assert prune(api, "2026-02-01T00:00:00", limit=1, token=new)["data"]["pruneTerminal"] == 1


@pytest.mark.parametrize("before", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_a_horizon_outside_the_calendar_in_utc_is_refused_with_what_is_wrong(
    runs: Backend, api: Api, before: str
) -> None:
    # Found by the fuzz tests: it was an OverflowError, masked.
    (error,) = prune(api, before)["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "is outside the years 1 to 9999 once read as UTC" in error["message"]
    assert sum(lines_per_run(runs).values()) == 24


TERMINAL = "query($runId: ID!) { runLog(runId: $runId) { run { terminal } } }"


def test_a_prune_keeps_the_lines_of_every_run_the_service_calls_not_terminal_byte_for_byte(
    tables: Backend, api: Api
) -> None:
    """A status that differs from a terminal one only in case or a trailing space is not terminal.

    Before, MariaDB compared the statuses under its collation (utf8mb4_general_ci:
    case and trailing spaces ignored) and pruned these runs' lines; SQLite kept them.
    """
    statuses = {1: "COMPLETED", 2: "completed ", 3: "Failed", 4: "completed", 5: "failed", 6: "cancelled"}
    for run_id, status in statuses.items():
        tables.add_run(run_id, status, "2020-01-01 00:00:00", "2020-01-01 00:00:00")
        assert api.write(run_id, "note", {"text": "kept?"})
    terminal = {
        run_id: api.data(TERMINAL, {"runId": str(run_id)})["runLog"]["run"]["terminal"] for run_id in statuses
    }
    assert terminal == {1: False, 2: False, 3: False, 4: True, 5: True, 6: True}
    assert prune(api, "2021-01-01T00:00:00Z") == {"data": {"pruneTerminal": 3}}
    assert lines_per_run(tables) == {run_id: 1 for run_id, is_terminal in terminal.items() if not is_terminal}


@pytest.mark.mariadb
def test_a_prune_held_up_past_its_deadline_answers_what_it_deleted_until_then(mariadb: Backend) -> None:
    """The lines go in pieces, each committed: a call that meets a line another
    session holds answers the lines it deleted before it, not DATABASE_UNAVAILABLE.
    Before, the call was one transaction, and waited on the line until its timeout."""
    mariadb.create_tables()
    mariadb.add_run(1, "completed", "2026-01-01 00:00:00", "2026-01-01 00:00:00")
    mariadb.execute(
        "INSERT INTO event_run_log (run_id, kind, at) SELECT 1, 'note', '2026-01-01' FROM seq_1_to_2500"
    )
    holder = mariadb.sync.connect()
    try:
        holder.execute(sa.text("SELECT id FROM event_run_log ORDER BY id DESC LIMIT 1 FOR UPDATE"))
        with TestClient(create_app(mariadb.settings(prune_timeout=5.0))) as client:
            body = Api(client).post(PRUNE, {"before": "2026-02-01T00:00:00Z", "limit": 5000}, token=ADMIN)
    finally:
        holder.rollback()
        holder.close()
    assert "errors" not in body, body
    left = lines_per_run(mariadb).get(1, 0)
    assert left > 0  # the held line, and those of the piece it was in (rolled back)
    assert body["data"]["pruneTerminal"] == 2500 - left > 0
