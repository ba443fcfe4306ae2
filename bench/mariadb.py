"""The MariaDB server the benchmarks use: RUNLOG_BENCH_MARIADB_URL."""

from __future__ import annotations

import os

import pymysql
import sqlalchemy as sa

MARIADB_URL = sa.make_url(os.environ.get("RUNLOG_BENCH_MARIADB_URL", "mysql+aiomysql://root@127.0.0.1:3306/"))


def connect(database: str | None = None) -> pymysql.Connection:  # type: ignore[type-arg]
    """A plain autocommit connection, to create, fill and drop a benchmark's database."""
    return pymysql.connect(
        host=MARIADB_URL.host or "127.0.0.1",
        port=MARIADB_URL.port or 3306,
        user=MARIADB_URL.username or "root",
        password=MARIADB_URL.password or "",
        database=database,
        autocommit=True,
    )
