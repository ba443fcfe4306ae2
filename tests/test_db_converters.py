"""MariaDB's DATETIME text is read as pymysql reads it, through the service's own, faster converter.

`gql.store.db.mariadb_datetime` replaces pymysql's `convert_datetime` on the
service's connections (it is 30 times cheaper on the `at` of every line); any
value it reads must come back exactly as pymysql's would: the same type, the
same value, a string where pymysql gives up (a zero date), a date where pymysql
reads one.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.converters import convert_datetime

from gql.store.db import create_engine, mariadb_datetime

from .conftest import Backend


def _read(convert: Any, value: Any) -> tuple[type, Any]:
    try:
        read = convert(value)
    except Exception as exc:  # pymysql fails on some texts ('0'): so must we, the same way
        return type(exc), None
    return type(read), read


def _same(value: Any) -> None:
    assert _read(mariadb_datetime, value) == _read(convert_datetime, value), value


@pytest.mark.parametrize(
    "text",
    [
        "2026-02-01 12:00:00",
        "2026-02-01 12:00:00.1",
        "2026-02-01 12:00:00.123",
        "2026-02-01 12:00:00.123456",
        "9999-12-31 23:59:59.999999",
        "1000-01-01 00:00:00",
        "0000-00-00 00:00:00",  # MariaDB's zero date
        "2026-00-00 00:00:00",
        "2026-02-30 00:00:00",
        "2026-02-01 24:00:00",
        "2026-02-01T12:00:00",
        "2026-02-01 12:00:00+05:00",
        "2026-02-01 12:00:00.12Z",
        "2026-02-01 12:00:00.1234567",
        "2026-02-01",
        "yesterday",
        "",
        b"2026-02-01 12:00:00",
    ],
)
def test_each_shape_reads_as_pymysql_reads_it(text: Any) -> None:
    _same(text)


@settings(max_examples=500, deadline=None)
@given(
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31)),
    st.sampled_from([0, 1, 2, 3, 4, 5, 6]),
)
def test_any_time_as_mariadb_writes_it_reads_as_pymysql_reads_it(
    when: datetime.datetime, digits: int
) -> None:
    # As MariaDB sends a DATETIME(digits): the fraction cut to its precision.
    text = when.strftime("%Y-%m-%d %H:%M:%S")
    if digits:
        text += "." + f"{when.microsecond:06d}"[:digits]
    _same(text)
    _same(text.rjust(19, "0"))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789-: .T+Z", min_size=0, max_size=30))
def test_any_text_of_those_characters_reads_as_pymysql_reads_it(text: str) -> None:
    _same(text)


def test_the_services_connections_read_times_as_pymysql_does(mariadb: Backend) -> None:
    """Through the service's engine: what a plain pymysql connection reads, the same values."""
    values = ["2026-02-01 12:00:00.123000", "2026-02-01 12:00:00", "0000-00-00 00:00:00"]
    select = " UNION ALL ".join(
        f"SELECT CAST('{v}' AS DATETIME(6)) AS d6, CAST('{v}' AS DATETIME) AS d0" for v in values
    )

    async def read() -> list[tuple[Any, ...]]:
        engine = create_engine(mariadb.settings())
        try:
            async with engine.connect() as conn:
                # Zero dates are refused by strict modes' CAST: allow them for this session.
                await conn.exec_driver_sql("SET SESSION sql_mode = ''")
                return [tuple(row) for row in (await conn.exec_driver_sql(select)).all()]
        finally:
            await engine.dispose()

    ours = asyncio.run(read())
    with mariadb.sync.connect() as conn:  # pymysql, with its own converters
        conn.exec_driver_sql("SET SESSION sql_mode = ''")
        theirs = [tuple(row) for row in conn.exec_driver_sql(select).all()]
    assert ours == theirs
    assert ours[0] == (
        datetime.datetime(2026, 2, 1, 12, 0, 0, 123000),
        datetime.datetime(2026, 2, 1, 12, 0, 0),
    )
