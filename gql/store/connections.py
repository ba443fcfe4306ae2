"""Reads through SQLAlchemy's connection, retried once on a connection the server had closed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Executable
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine


async def read_rows(
    engine: AsyncEngine, statement: Executable, values: dict[str, Any] | None = None
) -> Sequence[Any]:
    """The rows of one read, retried once on a connection the server had closed.

    The pool does not ping a connection before handing it out (db.py), so a
    connection closed by the server since its last use (wait_timeout, a
    restart, KILL) fails on first use. SQLAlchemy then invalidates it and
    the pool's older connections; a read changes nothing, so it is sent
    again, once, on a fresh one. Any other failure is the caller's to handle.
    """
    try:
        async with engine.connect() as conn:
            return (await conn.execute(statement, values)).all()
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    async with engine.connect() as conn:
        return (await conn.execute(statement, values)).all()
