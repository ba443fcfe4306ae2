"""What `GET /healthz` (`problem`) and `GET /readyz` (`Readiness`) check, and how they word what is wrong.

The reason says what happened and what to do, never SQL or the connection string.
"""

from __future__ import annotations

import asyncio
import os
import re

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from .. import store
from ..settings import Settings
from ..store.db import MissingDatabaseFile, pool_state, sqlite_file

TIMED_OUT = "the database did not answer in time"
REFUSED = "the database refused or dropped the connection"

# MySQL/MariaDB error codes, as the server or aiomysql gives them.
_ACCESS_DENIED = frozenset({1044, 1045, 1142, 1698})
_UNKNOWN_DATABASE = 1049
_NO_SUCH_TABLE = 1146
_TOO_MANY_CONNECTIONS = frozenset({1040, 1203})
_READ_ONLY = frozenset({1290, 1792, 1836})
_TABLE = re.compile(r"event_run_log|event_runs")


async def problem(engine: AsyncEngine, settings: Settings) -> str | None:
    """What is wrong with the database, worded for a person; None when nothing is."""
    path = sqlite_file(settings.url)
    if path is not None:
        # A deleted or read-only file still answers reads through open connections.
        if not path.exists():
            return str(MissingDatabaseFile(path))
        if not os.access(path, os.W_OK):
            return (
                f"the SQLite database file {path} is read-only for this process: "
                "writes answer false until it is writable again"
            )
    try:
        async with asyncio.timeout(settings.connect_timeout + 1):
            await store.ping(engine)
    except Exception as exc:  # the answer: 503 with this reason, logged by the route
        return describe(exc, settings)
    return None


def describe(exc: BaseException, settings: Settings) -> str:
    """`exc`, raised by a check of the database, as a reason a person can act on."""
    # A full pool is a database that has not answered, not one that refused.
    if isinstance(exc, TimeoutError | sa_exc.TimeoutError):
        return TIMED_OUT
    original = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    if isinstance(original, MissingDatabaseFile):
        return str(original)
    sqlite = getattr(original, "sqlite_errorname", None)
    message = str(original)
    if sqlite is not None:
        return _describe_sqlite(sqlite, message, settings)
    args = getattr(original, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    user = settings.url.username or "(none)"
    if code in _ACCESS_DENIED:
        return (
            f"the database denied access to user {user!r}: check the user and password in "
            "RUNLOG_DATABASE_URL and the user's grants"
        )
    if code == _UNKNOWN_DATABASE:
        return (
            f"the database {settings.url.database!r} named in RUNLOG_DATABASE_URL does not exist "
            "on the server"
        )
    if code == _NO_SUCH_TABLE:
        return _missing_table(message)
    if code in _TOO_MANY_CONNECTIONS:
        return "the database refused the connection: it has too many connections (max_connections)"
    if code in _READ_ONLY:
        return "the database is read-only (read_only is set): writes answer false"
    return REFUSED if store.is_unavailable(exc) else f"the database check failed ({type(original).__name__})"


def _describe_sqlite(name: str, message: str, settings: Settings) -> str:
    path = sqlite_file(settings.url) or settings.url.database
    if "no such table" in message:
        return _missing_table(message)
    if name.startswith("SQLITE_READONLY"):
        return f"the SQLite database file {path} is read-only: writes answer false until it is writable again"
    if name == "SQLITE_CANTOPEN":
        return f"the SQLite database file {path} cannot be opened (its folder is missing or not readable)"
    if name in ("SQLITE_BUSY", "SQLITE_LOCKED"):
        return f"the SQLite database file {path} is locked by another process (a backup, a long transaction)"
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
        return f"the file {path} is not a readable SQLite database ({name})"
    return f"the SQLite database failed the check ({name})"


def _missing_table(message: str) -> str:
    found = _TABLE.search(message)
    table = found.group(0) if found else "a table the service uses"
    return f"{table} is missing from the database: run python -m gql init-db to create it"


class Readiness:
    """Whether this process can write now: a spare connection of `engine`'s (the writes' pool), and a
    database that answers (checked once)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.checking: asyncio.Future[str | None] | None = None

    async def problem(self, engine: AsyncEngine) -> str | None:
        full = pool_full(engine)
        if full is not None:
            return full
        if self.checking is None:
            self.checking = asyncio.ensure_future(problem(engine, self.settings))
            self.checking.add_done_callback(self._done)
        return await asyncio.shield(self.checking)

    def _done(self, _future: asyncio.Future[str | None]) -> None:
        self.checking = None


def pool_full(engine: AsyncEngine) -> str | None:
    """Why the pool has no connection to spare, or None when it has one (or is not a bounded pool)."""
    most = pool_state(engine).most
    checked_out = getattr(engine.sync_engine.pool, "checkedout", None)
    if most is None or not callable(checked_out):
        return None  # SQLite's pools: not a bound the service sets
    in_use = checked_out()
    if in_use < most:
        return None
    return (
        f"the writes' connection pool is full: {in_use} of {most} connections in use "
        "(RUNLOG_WRITE_POOL_SIZE and as many overflow); writes wait for one"
    )
