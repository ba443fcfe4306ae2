"""OpenTelemetry's non-public names the service relies on (tested in tests/test_compat.py).

Imported only when tracing is on (the `tracing` extra).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer

__all__ = ["trace_engine"]


def trace_engine(tracer: Any, sync_engine: Any, connections_usage: Any) -> None:
    """Make a span of each statement `sync_engine` executes: the instrumentation's `EngineTracer`.

    The documented way, `SQLAlchemyInstrumentor().instrument(engine=...)`,
    instruments once per process (the instrumentor is a singleton that
    refuses a second call) and patches `create_engine`; every app has an
    engine of its own and tests make several. `EngineTracer`
    (`opentelemetry.instrumentation.sqlalchemy.engine`) is what the
    instrumentor attaches to each engine. Without it, statements sent
    through SQLAlchemy make no spans.
    """
    EngineTracer(tracer, sync_engine, connections_usage, enable_commenter=False)  # type: ignore[no-untyped-call]
