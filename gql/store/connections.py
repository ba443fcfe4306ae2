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

    The pool does not ping before checkout (db.py), so a connection the server closed fails
    on first use; a read changes nothing, so it is sent again on a fresh one. Any other
    failure is the caller's.
    """
    try:
        async with engine.connect() as conn:
            return (await conn.execute(statement, values)).all()
    except sa_exc.DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    async with engine.connect() as conn:
        return (await conn.execute(statement, values)).all()
