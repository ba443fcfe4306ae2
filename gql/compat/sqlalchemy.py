"""SQLAlchemy's non-public names the store's direct path relies on (tested in tests/test_compat.py)."""

from __future__ import annotations

# `greenlet_spawn` (`sqlalchemy.util`, not documented): runs SQLAlchemy's sync API in the
# greenlet its asyncio layer needs, as `AsyncConnection.run_sync` does for a connection.
# The direct path holds a pooled connection (`AsyncEngine.raw_connection`), not an
# `AsyncConnection`, and checks it back in or closes it with this: the async driver's
# close runs only inside such a greenlet.
from sqlalchemy.util import greenlet_spawn

__all__ = ["greenlet_spawn"]
