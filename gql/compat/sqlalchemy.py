"""SQLAlchemy's (and asyncio's) non-public names the service relies on (tested in tests/test_compat.py).

SQLAlchemy's documented API covers its pools' `size()`, `checkedout()` and
`overflow()`, pool and engine events, and `AsyncAdaptedConnection
.driver_connection`; what is below it does not cover.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pool_waiting"]


def pool_waiting(pool: Any) -> int:
    """How many wait for a connection of `pool`; 0 for a pool of another kind (SQLite's).

    SQLAlchemy has no public count of them: its asyncio pool keeps its
    connections in `_pool`, an adapted queue whose asyncio.Queue (`_queue`,
    made on first use) keeps its waiting getters in a private deque
    (`_getters`). Read defensively. Without it the
    `runlog_db_pool_waiting` gauge cannot be sampled.
    """
    adapted = getattr(pool, "_pool", None)
    queue = getattr(adapted, "__dict__", {}).get("_queue")
    getters = getattr(queue, "_getters", ())
    return sum(1 for getter in getters if not getter.done())
