"""Tables, the engine, and `init-db`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    event,
    inspect,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .settings import Settings

metadata = MetaData()

# MariaDB's DATETIME(3) keeps milliseconds and, unlike TIMESTAMP, is never
# shifted by the session's time zone; the service always writes UTC.
_Millis = DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
# SQLite has no BIGINT autoincrement; INTEGER PRIMARY KEY is its rowid.
_Id = BigInteger().with_variant(Integer(), "sqlite")

event_run_log = Table(
    "event_run_log",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("run_id", Integer, nullable=False),
    Column("step_id", Integer, nullable=True),
    Column("kind", String(64), nullable=False),
    Column("phase", Integer, nullable=True),
    # TEXT holding JSON, not a JSON column: rows written before this service
    # may hold text that is not JSON, and they must still be readable.
    Column("detail", Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), nullable=True),
    Column("at", _Millis, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# SQLite keeps `at` as whatever text (or number) its writer stored, and compares
# it as text: `2026-03-01 12:00:00` sorts before `2026-03-01T11:00:00Z`. Its
# reads therefore order by this normalised form: UTC, `YYYY-MM-DD HH:MM:SS.SSS`,
# from any text SQLite's date functions read (with `T`, `Z`, `+02:00`, any
# fraction), and '' (older than every time) for a value that is not a date
# (`yesterday`, '', a number, NULL). The GLOB keeps `now` and Julian day
# numbers out: SQLite would read them as times, and `now` would move. An index
# on the expression keeps a page an index range; a query must spell it exactly
# so for SQLite to match it with the index.
SQLITE_AT_ORDER = (
    "coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
    "THEN strftime('%Y-%m-%d %H:%M:%f', at) END, '')"
)
_MYSQL = ("mysql", "mariadb")


def _index(name: str, *columns: Any, dialects: tuple[str, ...]) -> None:
    """An index on the run log that only `dialects` get; init-db reads `info` to know which."""
    index = Index(name, *columns, info={"dialects": dialects})
    # ddl_if documents "a string or tuple of strings"; its type hint names only str.
    index.ddl_if(dialect=dialects)  # type: ignore[arg-type]


_log = event_run_log.c
# Serve the read (a run's lines newest first, keyset on at, id) and the prune's
# join from a terminal run to its lines; the kind's index serves a read
# filtered by kind, so that a rare kind is an index range, never a scan of the
# run's whole log.
_index("ix_event_run_log_run_at", _log.run_id, _log.at, _log.id, dialects=_MYSQL)
_index("ix_event_run_log_run_kind_at", _log.run_id, _log.kind, _log.at, _log.id, dialects=_MYSQL)
# The same two on SQLite, over the normalised `at` its reads order by.
_index("ix_event_run_log_run_utc", _log.run_id, text(SQLITE_AT_ORDER), _log.id, dialects=("sqlite",))
_index(
    "ix_event_run_log_run_kind_utc",
    _log.run_id,
    _log.kind,
    text(SQLITE_AT_ORDER),
    _log.id,
    dialects=("sqlite",),
)

# Ours: the idempotency keys of keyed writes (`writeRunLog(idempotencyKey:)`).
# The contract fixes event_run_log's columns, so a key lives here, written in
# the same transaction as its line: either both are stored or neither, and a
# retry after a lost answer finds the key. The key is kept as its SHA-256, so
# any key fits and no collation (case, trailing spaces) can make two keys one.
# Keys are forgotten after a day (writes.KEY_TTL), which bounds the table.
event_run_log_keys = Table(
    "event_run_log_keys",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("key_digest", String(64), primary_key=True),
    # The line the key stored, so a key reused for another line is refused.
    Column("line_digest", String(64), nullable=False),
    Column("created_at", _Millis, nullable=False),
    Index("ix_event_run_log_keys_created", "created_at"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# Owned by the events system. The service reads only these four columns and
# creates the table only in a fresh database (tests, the demo, a laptop).
event_runs = Table(
    "event_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("status", String(32), nullable=False),
    Column("ended_at", DateTime, nullable=True),
    Column("updated_at", DateTime, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)


def create_engine(settings: Settings) -> AsyncEngine:
    """Open the pool for `settings.database_url`, with bounded waits everywhere."""
    url = settings.url
    if settings.is_embedded:
        engine = create_async_engine(
            url,
            connect_args={"timeout": settings.write_timeout},
            pool_pre_ping=True,
        )
        event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
        return engine
    # aiomysql bounds only the TCP connect: it has no read timeout, so a
    # server that accepts and never answers (the handshake, a ping, a
    # statement) would hold a caller forever. Every database call the service
    # makes therefore runs under asyncio.timeout (write, read, prune,
    # blockingRun, /healthz); SQLAlchemy throws away a connection whose
    # operation was cancelled instead of returning it to the pool.
    connect_args: dict[str, Any] = {
        "connect_timeout": settings.connect_timeout,
        # Every time the service writes or compares is UTC; pin the session so
        # a TIMESTAMP column in an existing database is not shifted either.
        "init_command": "SET time_zone = '+00:00'",
        "charset": "utf8mb4",
    }
    # One round trip where one will do. Connections autocommit, so a read is
    # its statement alone and a write commits with its INSERT: no COMMIT, no
    # ROLLBACK when a connection goes back to the pool, and no ping when it
    # comes out (together they made a 50-line page three round trips, and
    # halved what a plain endpoint served on these settings). A connection the
    # server has closed (wait_timeout, a restart, KILL) is found when it is
    # used instead: SQLAlchemy sees the disconnect, invalidates the pool's
    # connections, and the reads retry once (store.py); see SQLAlchemy's
    # "Dealing with Disconnects". Work that needs a transaction asks for one
    # (`transaction` below).
    return create_async_engine(
        url,
        connect_args=connect_args,
        pool_size=settings.pool_size,
        max_overflow=settings.pool_size,
        pool_timeout=settings.connect_timeout,
        pool_recycle=settings.pool_recycle,
        isolation_level="AUTOCOMMIT",
        pool_reset_on_return=None,
        # Closing a connection that autobegan would still send a ROLLBACK.
        skip_autocommit_rollback=True,
    )


@asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in one real transaction, committed at the end unless it raises.

    On MySQL/MariaDB the engine's connections autocommit (see `create_engine`),
    where `engine.begin()` would commit each statement on its own. This one
    leaves autocommit for its duration (a few round trips, for the rare work
    that needs them: a prune slice, loading the demo); the pool puts the
    connection back in autocommit when it returns.
    """
    async with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            yield conn


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers go on while a writer writes; busy_timeout makes a
    # second writer wait for the lock instead of failing at once.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=2000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


async def init_db(engine: AsyncEngine) -> list[str]:
    """Create what is missing; safe to run twice. Answers what it created.

    `event_runs` is created only where it is missing (a fresh database); an
    existing one is never altered. On an existing `event_run_log` that lacks an
    index this service reads through, the index is added, unless one with the
    same columns is already there under another name.
    """
    async with engine.begin() as conn:
        return await conn.run_sync(_create_missing)


def _create_missing(conn: Connection) -> list[str]:
    inspector = inspect(conn)
    existing = set(inspector.get_table_names())
    created = [table.name for table in metadata.sorted_tables if table.name not in existing]
    metadata.create_all(conn, checkfirst=True)
    if event_run_log.name in existing:
        names, have = _indexes(conn)
        for index in event_run_log.indexes:
            if conn.dialect.name not in index.info["dialects"] or index.name in names:
                continue
            columns = [getattr(column, "name", None) for column in index.expressions]
            if None in columns or tuple(columns) not in have:
                index.create(conn)
                created.append(f"{event_run_log.name}.{index.name}")
    return created


def _indexes(conn: Connection) -> tuple[set[str], set[tuple[str | None, ...]]]:
    """The run log's index names, and the column lists of those on plain columns."""
    if conn.dialect.name == "sqlite":
        # SQLAlchemy does not reflect an index on an expression on SQLite (it
        # warns and skips it); the names are enough to know what is there.
        rows = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (event_run_log.name,)
        )
        return set(rows.scalars()), set()
    found = inspect(conn).get_indexes(event_run_log.name)
    return {ix["name"] for ix in found if ix["name"]}, {tuple(ix["column_names"]) for ix in found}
