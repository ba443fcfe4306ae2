"""Tables, the engine, and `init-db`.

The tables are the model the code reads and writes through; databases get them from
gql/store/migrations (a test keeps the two equal). `create_engine(settings)` opens the pool.
"""

from __future__ import annotations

import datetime
import functools
import os
import sqlite3
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymysql.constants import FIELD_TYPE
from pymysql.converters import convert_datetime, decoders
from sqlalchemy import (
    DDL,
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
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import URL, Connection, ExceptionContext
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..settings import Settings
from .step_state import triggers

if TYPE_CHECKING:
    from .migrations import Migrated

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

# SQLite compares `at` as the text its writer stored, so its reads order by this normalised
# UTC form, '' for what is not a date. The GLOB keeps `now` and Julian day numbers out (`now`
# would move). A query must spell it exactly so for SQLite to use the index on it.
SQLITE_AT_ORDER = (
    "coalesce(CASE WHEN at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
    "THEN strftime('%Y-%m-%d %H:%M:%f', at) END, '')"
)
_MYSQL = ("mysql", "mariadb")


def _index(name: str, *columns: Any, dialects: tuple[str, ...]) -> None:
    """An index on the run log that only `dialects` get (the migrations make it; this is the model)."""
    index = Index(name, *columns)
    # ddl_if documents "a string or tuple of strings"; its type hint names only str.
    index.ddl_if(dialect=dialects)  # type: ignore[arg-type]


_log = event_run_log.c
_UTC = text(SQLITE_AT_ORDER)  # on SQLite, the indexes are over the normalised `at` its reads order by
for _name, _columns, _after in (
    # A run's lines newest first (keyset on at, id), also the prune's join; by kind, so that a
    # rare kind is an index range, never a scan of the run's whole log.
    ("run", (), ()),
    ("run_kind", (_log.kind,), ()),
    # runLog's phase and step filters: an index range in the page's order each, and
    # the kind last, so a filtered page's kindCounts reads the index alone.
    ("run_phase", (_log.phase,), (_log.kind,)),
    ("run_step", (_log.step_id,), (_log.kind,)),
    # A run's holds: whether a step has a newer step line is a seek per kind (gql/store/newest.py).
    ("run_kind_step", (_log.kind, _log.step_id), ()),
):
    _index(f"ix_event_run_log_{_name}_at", _log.run_id, *_columns, _log.at, _log.id, *_after, dialects=_MYSQL)
    _index(
        f"ix_event_run_log_{_name}_utc", _log.run_id, *_columns, _UTC, _log.id, *_after, dialects=("sqlite",)
    )
# Finished runs a failed cleanup holds: the runs with a `cleanup.failed` line, an index range of
# one rare kind, never a probe of every run that ever ended (gql/edge/hold_metrics.py). Then each run's
# lines in a page's order, as in run_kind: a page by kind is an ordered range whichever of the two
# the planner takes (with (kind, run_id) alone, MariaDB took it for a page, and sorted).
_index("ix_event_run_log_kind_run_at", _log.kind, _log.run_id, _log.at, _log.id, dialects=_MYSQL)
_index("ix_event_run_log_kind_run_utc", _log.kind, _log.run_id, _UTC, _log.id, dialects=("sqlite",))

# Ours: the idempotency keys of keyed writes, written in the transaction of their line
# (event_run_log's columns are fixed by contract). Kept as SHA-256, so that no collation
# makes two keys one; forgotten after writes.KEY_TTL.
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

# Ours: leases that hold across a Galera cluster, where GET_LOCK is per node (retention.sweep_lock).
runlog_leases = Table(
    "runlog_leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("expires_at", _Millis, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# Ours: what pruning took from each run's log (`RunLogPage.pruned`), one row per run, written
# in the transaction that deletes the lines.
event_run_log_pruned = Table(
    "event_run_log_pruned",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("line_count", BigInteger, nullable=False),
    # The newest `at` among them (null while none had a time).
    Column("through", _Millis, nullable=True),
    Column("pruned_at", _Millis, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# Ours: the words of each line's detail as a reader finds them (gql/store/words.py), folded,
# written with the line (event_run_log's columns are fixed by contract).
# Keyed in a page's order, so that a search reads one run's words in one range, joining a line
# only when its words match. `line_at` is the line's `at` as its reads order it (on SQLite,
# the normalised text).
# Binary collation: the text is folded already, and no collation may make two characters one.
event_run_log_words = Table(
    "event_run_log_words",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("line_at", String(32).with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb"), primary_key=True),
    Column("id", _Id, primary_key=True, autoincrement=False),
    Column(
        "words",
        Text().with_variant(mysql.MEDIUMTEXT(collation="utf8mb4_bin"), "mysql", "mariadb"),
        nullable=False,
    ),
    # A run's newest id with words kept, and a line's words, found by (run_id, id).
    Index("ix_event_run_log_words_run_id", "run_id", "id"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# Ours: each step's newest step line (by at, then id), kept by triggers on event_run_log
# (gql/store/step_state.py), so that a run's open steps are an index range, never a probe of its steps.
# `line_at` as the reads order it (SQLite: the normalised text); NULLs: the step has none left.
event_run_log_steps = Table(
    "event_run_log_steps",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("step_id", Integer, primary_key=True, autoincrement=False),
    Column("id", _Id, nullable=True),
    Column("kind", String(64), nullable=True),
    Column("line_at", String(32).with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb"), nullable=True),
    Index("ix_event_run_log_steps_run_kind", "run_id", "kind"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
for _dialects in (("sqlite",), _MYSQL):
    for _trigger in triggers(_dialects[0]):  # after every table: they are on event_run_log
        event.listen(metadata, "after_create", DDL(_trigger.replace("%", "%%")).execute_if(dialect=_dialects))  # type: ignore[arg-type,no-untyped-call]

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


def create_engine(
    settings: Settings, url: URL | None = None, *, pool_size: int | None = None, writes: bool = False
) -> AsyncEngine:
    """Open the pool for `settings.database_url` (or `url`, a replica's), with bounded waits everywhere.

    `pool_size` in place of RUNLOG_POOL_SIZE (the writes' pool: RUNLOG_WRITE_POOL_SIZE). With
    `writes`, the writes' pool on MariaDB: its connections do not autocommit (`store.insert_lines`).
    """
    url = settings.url if url is None else url
    size = settings.pool_size if pool_size is None else pool_size
    if settings.is_embedded:
        # The wait for another writer's lock (SQLite's busy timeout) is part of a write's budget.
        # No ping on checkout: no server closes a file's connection, and a deleted or replaced
        # file is found by `_guard_sqlite_file`'s checkout check.
        engine = create_async_engine(
            url,
            connect_args={"timeout": settings.write_timeout},
            execution_options={_POOL_STATE: PoolState()},
        )
        _sqlite_pragmas = functools.partial(_sqlite_on_connect, busy_timeout=settings.write_timeout)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        path = sqlite_file(url)
        if path is not None:
            _guard_sqlite_file(engine, path)
        _watch_generations(engine)
        return engine
    # aiomysql bounds only the TCP connect, so every database call runs under asyncio.timeout.
    connect_args: dict[str, Any] = {
        "connect_timeout": settings.connect_timeout,
        # UTC, so that a TIMESTAMP column in an existing database is not shifted.
        "init_command": "SET time_zone = '+00:00'",
        "charset": "utf8mb4",
        "conv": _DECODERS,
    }
    # One round trip where one will do: autocommit, no reset on return, no ping on checkout
    # (reads retry once on a closed connection). Work that needs a transaction uses `transaction`.
    # The writes' pool does not autocommit: a batch's first INSERT opens its transaction, and
    # SQLAlchemy's commit ends it (no BEGIN sent); a connection closed in one rolls it back.
    engine = create_async_engine(
        url,
        connect_args=connect_args,
        pool_size=size,
        max_overflow=size,
        pool_timeout=settings.connect_timeout,
        pool_recycle=settings.pool_recycle,
        isolation_level=None if writes else "AUTOCOMMIT",
        execution_options={_POOL_STATE: PoolState(most=2 * size, writes=writes)},
        pool_reset_on_return=None,
        # Closing a connection that autobegan would still send a ROLLBACK.
        skip_autocommit_rollback=True,
    )
    _watch_generations(engine)
    event.listen(engine.sync_engine, "connect", _galera_causal_reads)
    event.listen(engine.sync_engine, "checkout", _refuse_closed)
    return engine


def _refuse_closed(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Never hand out a connection its driver closed: the pool replaces it (DisconnectionError)."""
    # aiomysql closes a connection whose statement was cancelled, and SQLAlchemy may pool it.
    if dbapi_connection.driver_connection.closed:
        raise sa_exc.DisconnectionError("the driver closed this connection: a statement on it was cancelled")


def _watch_generations(engine: AsyncEngine) -> None:
    """Count the pool's generations (`pool_generation`), and replace its connections once marked stale."""
    state = pool_state(engine)
    event.listen(engine.sync_engine, "checkout", functools.partial(_replace_stale, state))
    event.listen(engine.sync_engine, "invalidate", functools.partial(_next_generation, state))


def mariadb_datetime(value: Any) -> Any:
    """A DATETIME or TIMESTAMP as MariaDB sends it, read as pymysql's `convert_datetime` reads it."""
    if (
        type(value) is str
        and 19 <= len(value) <= 26
        and value[10] == " "
        and (len(value) == 19 or value[19] == ".")
    ):
        try:
            read = _FROM_ISO(value)
        except ValueError:
            pass
        else:
            if read.tzinfo is None:
                return read
    return convert_datetime(value)


_FROM_ISO = datetime.datetime.fromisoformat
# aiomysql's decoders (its `conv`, pymysql's: decoders only, its encoders are its own).
_DECODERS = {**decoders, FIELD_TYPE.DATETIME: mariadb_datetime, FIELD_TYPE.TIMESTAMP: mariadb_datetime}


def _galera_causal_reads(dbapi_connection: Any, _record: Any) -> None:
    """On a Galera node, have every read see what the cluster committed before it began."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        row = cursor.fetchone()
        if row is not None and str(row[1]).upper() == "ON":
            cursor.execute("SET SESSION wsrep_sync_wait = 1")
    finally:
        cursor.close()


class PoolState:
    """What the service keeps of one engine's pool, an execution option of the engine (`pool_state`)."""

    __slots__ = ("generation", "most", "stale", "writes")

    def __init__(self, most: int | None = None, *, writes: bool = False) -> None:
        self.most = most  # the most connections the pool opens; None on SQLite
        self.writes = writes  # the writes' pool: its connections do not autocommit (MariaDB)
        self.generation = 0  # see pool_generation
        self.stale = False  # the next checkout replaces every pooled connection


_POOL_STATE = "runlog_pool_state"


def pool_state(engine: Any) -> PoolState:
    """The `PoolState` of an engine `create_engine` made (an AsyncEngine or its sync_engine)."""
    sync_engine = getattr(engine, "sync_engine", engine)
    state = sync_engine.get_execution_options().get(_POOL_STATE)
    if not isinstance(state, PoolState):
        raise LookupError("this engine was not made by gql.store.db.create_engine: it has no pool state")
    return state


def mark_pool_stale(engine: AsyncEngine) -> None:
    """Have the next checkout replace every connection the pool holds now (after a disconnect)."""
    state = pool_state(engine)
    state.stale = True
    state.generation += 1


def pool_generation(engine: AsyncEngine) -> int:
    """A number that moves whenever the pool's connections may have been found dead."""
    return pool_state(engine).generation


def _next_generation(state: PoolState, *_event: Any) -> None:
    state.generation += 1


def _replace_stale(state: PoolState, _dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    if state.stale:
        state.stale = False
        raise sa_exc.InvalidatePoolError("the server closed a pooled connection: replacing them all")


@asynccontextmanager
async def transaction(
    engine: AsyncEngine, isolation_level: str = "REPEATABLE READ"
) -> AsyncIterator[AsyncConnection]:
    """A connection in one real transaction at `isolation_level`, committed at the end unless it raises."""
    async with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            await conn.execution_options(isolation_level=isolation_level)
        async with conn.begin():
            yield conn


# Where a SQLite connection's info (`Connection.info`, its pool record's) keeps its busy timeout in ms.
SQLITE_BUSY_TIMEOUT = "runlog_busy_timeout_ms"


def _sqlite_on_connect(dbapi_connection: Any, record: Any, *, busy_timeout: float) -> None:
    cursor = dbapi_connection.cursor()
    # busy_timeout again, from the same setting as the connect argument, so that no other
    # default can take its place.
    milliseconds = round(busy_timeout * 1000)
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={milliseconds}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
    record.info[SQLITE_BUSY_TIMEOUT] = milliseconds  # what a write puts back (store.writes), not asked


# ── the embedded database's file ─────────────────────────────────────────────


class MissingDatabaseFile(sqlite3.OperationalError):
    """The embedded database's file is not at its path (deleted while the service ran)."""

    sqlite_errorname = "SQLITE_CANTOPEN"

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"the SQLite database file {path} is missing (deleted while the service ran?): "
            "restore it, or create it anew with python -m gql init-db"
        )


def sqlite_file(url: URL) -> Path | None:
    """The file an embedded database's URL names; None for an in-memory one or a URI (left as given)."""
    database = url.database
    if url.get_backend_name() != "sqlite" or url.query or not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        return None
    return Path(database).absolute()


def _guard_sqlite_file(engine: AsyncEngine, path: Path) -> None:
    """Keep the pool on the file at `path`: never a deleted one, never a read-only one once fixed."""
    sync = engine.sync_engine
    journals = [Path(f"{path}-wal"), Path(f"{path}-shm")]
    old_journals: set[tuple[int, int]] = set()
    # The file is created here, once, as sqlite3.connect would on first use:
    # `serve` on the embedded default and `init-db` start from nothing.
    if not path.exists():
        sqlite3.connect(path).close()

    def open_existing(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        if stale:
            # SQLite would replay a deleted database's WAL into the next file at the path.
            for journal in journals:
                if _file(journal) in old_journals:
                    journal.unlink(missing_ok=True)
            stale.clear()
        if not path.exists():
            raise MissingDatabaseFile(path)
        # mode=rw: opening never creates the file, even if it goes between
        # the check above and the open.
        cargs[0] = f"file:{urllib.parse.quote(str(path))}?mode=rw"
        cparams["uri"] = True

    def remember_file(_dbapi_connection: Any, record: Any) -> None:
        file = _file(path)
        record.info[_OPENED] = (file, file is not None and os.access(path, os.W_OK))

    stale: list[bool] = []

    def still_the_file(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        file, writable = record.info.get(_OPENED, (None, False))
        if file is None or _file(path) != file:
            stale.append(True)
            raise sa_exc.InvalidatePoolError(f"the SQLite database file {path} was deleted or replaced")
        # The journals this file uses now (SQLite makes new ones after a checkpoint on close).
        old_journals.clear()
        old_journals.update(found for found in map(_file, journals) if found is not None)
        if not writable and os.access(path, os.W_OK):
            raise sa_exc.DisconnectionError(f"the SQLite database file {path} is writable again")

    def reopen_after_read_only(context: ExceptionContext) -> None:
        name = getattr(context.original_exception, "sqlite_errorname", None) or ""
        if name.startswith("SQLITE_READONLY") and context.connection is not None:
            # Reopened at its next checkout once writable; not invalidated now, so that the
            # error stays the database's own answer.
            info = context.connection.info
            info[_OPENED] = (info.get(_OPENED, (None, False))[0], False)

    event.listen(sync, "do_connect", open_existing)
    # After _sqlite_on_connect, which create_engine listens for first.
    event.listen(sync, "connect", remember_file)
    event.listen(sync, "checkout", still_the_file)
    event.listen(sync, "handle_error", reopen_after_read_only)


_OPENED = "runlog.sqlite_file"


def _file(path: Path) -> tuple[int, int] | None:
    """Which file is at `path` (device, inode); None when there is none."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


async def init_db(engine: AsyncEngine) -> Migrated:
    """Bring the schema to the latest migration, and create `event_runs` where missing; safe to run twice."""
    from . import migrations  # Alembic is imported only by what migrates

    path = sqlite_file(engine.url)
    writable = path is None or os.access(path, os.W_OK)
    async with engine.connect() as conn:
        done = await conn.run_sync(_migrate, functools.partial(migrations.upgrade, writable=writable))
        await conn.commit()
    return done


def _migrate(conn: Connection, upgrade: Callable[[Connection], Migrated]) -> Migrated:
    done = upgrade(conn)
    if not inspect(conn).has_table(event_runs.name):
        event_runs.create(conn)
        done.created.append(event_runs.name)
    return done
