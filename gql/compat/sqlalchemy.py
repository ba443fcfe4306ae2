"""SQLAlchemy's non-public names the store's direct path relies on (tested in tests/test_compat.py)."""

from __future__ import annotations

from typing import Any

# `greenlet_spawn` (`sqlalchemy.util`, not documented): runs SQLAlchemy's sync API in the
# greenlet its asyncio layer needs, as `AsyncConnection.run_sync` does for a connection.
# The direct path holds a pooled connection (`AsyncEngine.raw_connection`), not an
# `AsyncConnection`, and checks it back in or closes it with this: the async driver's
# close runs only inside such a greenlet.
from sqlalchemy.util import greenlet_spawn

__all__ = ["cursor_listeners", "greenlet_spawn"]


def cursor_listeners(engine: Any) -> tuple[Any, ...]:
    """The `before_cursor_execute` listeners of a sync `engine`, in the order they run.

    SQLAlchemy's `event.contains` asks about one known function; nothing public lists them
    all. `engine.dispatch` is its event registry.
    """
    return tuple(engine.dispatch.before_cursor_execute)
