"""On MariaDB a read goes to the driver directly: the very SQL and parameters SQLAlchemy would send."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from gql import store
from gql.db import create_engine
from gql.store import connections, statements

from .conftest import Backend

AT = datetime.datetime(2026, 3, 1, 12, 0, 0)

# The shapes of the reads a page makes: kinds (an IN list), a cursor either way, search filters.
PAGES: dict[str, dict[str, Any]] = {
    "newest": {},
    "kinds": {"kinds": ["WARN", "NOTE", "ERROR"]},
    "after": {"after": store.Cursor(at=AT, id=7)},
    "before, kinds": {"before": store.Cursor(at=AT, id=7), "kinds": ["NOTE"]},
    "with sizes": {"read": "lines with sizes", "fits": 1024},
}


def _sent_by_sqlalchemy(engine: sa.Engine, statement: Any, values: dict[str, Any]) -> tuple[str, Any]:
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        sent.append((sql, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        with engine.connect() as conn:
            conn.execute(statement, values).all()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return sent[0]


@pytest.mark.parametrize("shape", sorted(PAGES))
def test_a_page_read_sends_the_driver_what_sqlalchemy_would(mariadb: Backend, shape: str) -> None:
    mariadb.create_tables()
    arguments: dict[str, Any] = {"kinds": None, "after": None, **PAGES[shape]}
    statement, values = statements.page_statement(run_id=1, limit=50, **arguments)
    engine = create_engine(mariadb.settings())
    try:
        raw = connections._raw_statement(engine, statement, values)
    finally:
        asyncio.run(engine.dispose())
    assert raw is not None, "the page's read would not take the direct path"
    # pymysql's engine, in aiomysql's paramstyle: what SQLAlchemy sends the async driver.
    sync = sa.create_engine(mariadb.sync.url, paramstyle="format")
    try:
        sql, parameters = _sent_by_sqlalchemy(sync, statement, values)
    finally:
        sync.dispose()
    assert (raw.sql, raw.parameters(values)) == (sql, list(parameters))


def test_a_statement_holding_a_value_of_its_own_is_left_to_sqlalchemy(mariadb: Backend) -> None:
    """A literal SQLAlchemy binds itself (COALESCE's 0 here) is not one of the caller's values."""
    table = sa.table("event_run_log", sa.column("id", sa.Integer), sa.column("run_id", sa.Integer))
    run = table.c.run_id == sa.bindparam("r")
    statement = sa.select(sa.func.coalesce(sa.func.max(table.c.id), 0)).where(run)
    engine = create_engine(mariadb.settings())
    try:
        assert connections._raw_statement(engine, statement, {"r": 1}) is None
        plain = sa.select(sa.func.max(table.c.id)).where(run)
        assert connections._raw_statement(engine, plain, {"r": 1}) is not None
    finally:
        asyncio.run(engine.dispose())
