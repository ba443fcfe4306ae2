"""SQLAlchemy's non-public names the service relies on (tested in tests/test_compat.py).

SQLAlchemy's documented API covers its pools' `size()`, `checkedout()` and
`overflow()`, pool and engine events, and `AsyncAdaptedConnection
.driver_connection`; what is below it does not cover.
"""

from __future__ import annotations

from sqlalchemy.util import greenlet_spawn

__all__ = ["greenlet_spawn"]

# `greenlet_spawn` (`sqlalchemy.util`, not documented): runs a function of
# SQLAlchemy's sync API inside the greenlet its asyncio layer needs, as
# `AsyncConnection.run_sync` does for a connection. gql/store's direct path
# holds a pooled connection (`AsyncEngine.raw_connection`) rather than an
# `AsyncConnection`, and closes it or checks it back in with this: the
# async driver's close runs only inside such a greenlet. Without it that
# path would need an AsyncConnection per statement, the cost it avoids.
