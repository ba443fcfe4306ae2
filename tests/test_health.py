"""`GET /healthz` says what is wrong, in words an operator can act on, never one reason for all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings

from .conftest import MARIADB_URL, Api, Backend, free_port


def health(client: TestClient) -> tuple[int, dict[str, Any]]:
    response = client.get("/healthz")
    return response.status_code, response.json()


def unhealthy_reason(settings: Settings) -> str:
    with TestClient(create_app(settings)) as client:
        status, body = health(client)
    assert status == 503 and body["status"] == "unavailable", body
    reason: str = body["reason"]
    return reason


def test_a_missing_table_is_named_with_the_command_that_creates_it(
    tables: Backend, make_api: Callable[..., Api]
) -> None:
    api = make_api()  # started with both tables (the embedded default makes them at start)
    assert health(api.client) == (200, {"status": "ok"})
    tables.execute("DROP TABLE event_run_log")
    status, body = health(api.client)
    assert status == 503
    assert body["reason"] == (
        "event_run_log is missing from the database: run python -m gql init-db to create it"
    )
    # Without the events system's table, lines are still written: the
    # service stays in its balancer (test_retention checks the same).
    tables.create_tables()
    tables.execute("DROP TABLE event_runs")
    assert health(api.client) == (200, {"status": "ok"})


def test_a_server_that_refuses_the_connection_is_said_to_refuse_it() -> None:
    settings = Settings(database_url=f"mysql+aiomysql://root@127.0.0.1:{free_port()}/test")
    assert unhealthy_reason(settings) == "the database refused or dropped the connection"


@pytest.mark.mariadb
def test_an_unknown_user_is_told_apart_from_a_database_that_is_down(mariadb: Backend) -> None:
    url = sa.make_url(mariadb.url).set(username="runlog_no_such_user", password="wrong")
    settings = Settings(database_url=url.render_as_string(hide_password=False))
    reason = unhealthy_reason(settings)
    assert reason == (
        "the database denied access to user 'runlog_no_such_user': check the user and password "
        "in RUNLOG_DATABASE_URL and the user's grants"
    )
    assert "wrong" not in reason  # never the password


@pytest.mark.mariadb
def test_a_database_missing_on_the_server_is_named() -> None:
    url = MARIADB_URL.set(database="runlog_no_such_database")
    settings = Settings(database_url=url.render_as_string(hide_password=False))
    assert unhealthy_reason(settings) == (
        "the database 'runlog_no_such_database' named in RUNLOG_DATABASE_URL does not exist on the server"
    )
