"""OpenTelemetry spans for requests and SQL: the `otel` extra, off unless RUNLOG_OTEL is set.

`pip install .[otel]` brings the API, the SDK and two instrumentations:
OpenTelemetry's ASGI middleware (a server span per HTTP request, continuing
the caller's `traceparent`) and its SQLAlchemy instrumentation (a client
span per statement SQLAlchemy executes). Spans go to an OTLP exporter when
`opentelemetry-exporter-otlp` is installed too (configured by the standard
OTEL_EXPORTER_OTLP_* variables), or to a tracer provider the operator set
up (`opentelemetry-instrument`); with neither, start-up says that the spans
go nowhere.

Neither instrumentation touches the GraphQL layer, so the fast paths stay
on (`RunLogGraphQL.prepared`; tests/test_operable.py checks it). Page reads
and writes on MySQL/MariaDB send their statements on the pool's aiomysql
connection directly (gql/store/connections.py), past SQLAlchemy's execution events, so
the SQLAlchemy instrumentation never sees them: `SqlSpans` makes their
client spans instead, with the same attributes, and the direct path stays
on. The one statement no span shows is the Galera session setting a new
connection runs (gql/db.py's connect hook).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Engine
from starlette.middleware import Middleware

log = logging.getLogger("gql.tracing")

SERVICE_NAME = "runlog-gql"


class TracingUnavailable(RuntimeError):
    """RUNLOG_OTEL is set but the otel extra is not installed."""


def check_installed() -> None:
    """Raise TracingUnavailable, naming what is missing, unless the otel extra is installed."""
    for module in (
        "opentelemetry.sdk.trace",
        "opentelemetry.instrumentation.asgi",
        "opentelemetry.instrumentation.sqlalchemy",
    ):
        try:
            __import__(module)
        except ImportError as exc:
            raise TracingUnavailable(
                f"RUNLOG_OTEL is set but OpenTelemetry is not installed ({exc.name}): "
                "install the otel extra (pip install .[otel]) or unset RUNLOG_OTEL"
            ) from None


def provider(given: Any = None) -> Any:
    """The tracer provider spans go to: `given`, the one the operator installed, or one of ours."""
    check_installed()
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if given is not None:
        return given
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current  # set up by the operator (opentelemetry-instrument, say)
    made = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )
    except ImportError:
        log.warning(
            "RUNLOG_OTEL is set but no span exporter is installed: spans are made and dropped "
            "(install opentelemetry-exporter-otlp, or run under opentelemetry-instrument)"
        )
    else:
        made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(made)
    return made


def middleware(tracer_provider: Any) -> list[Middleware]:
    """The ASGI middleware that makes a server span per request (outermost, so it spans everything)."""
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    # /metrics, /livez, /readyz and /healthz are asked every few seconds by
    # machines: spans of them would drown the requests worth tracing.
    excluded = "/metrics,/livez,/readyz,/healthz"
    return [Middleware(OpenTelemetryMiddleware, tracer_provider=tracer_provider, excluded_urls=excluded)]


def instrument_engine(engine: Any, tracer_provider: Any) -> SqlSpans:
    """Make a span of each statement `engine` executes through SQLAlchemy; the spans for those it does not.

    What `SQLAlchemyInstrumentor().instrument(engine=...)` does for the
    engine, without its once-per-process gate (every app has an engine of
    its own; tests make several) and without patching `create_engine`. The
    spans returned are for the statements gql/store/connections.py sends to
    the driver directly; the caller keeps them with the engine
    (`db.pool_state(engine).spans`).
    """
    from opentelemetry.metrics import get_meter
    from opentelemetry.trace import get_tracer

    from .compat.opentelemetry import trace_engine

    tracer = get_tracer(__name__, tracer_provider=tracer_provider)
    usage = get_meter(__name__).create_up_down_counter(
        name="db.client.connections.usage",
        unit="connections",
        description="The number of connections that are currently in state described by the state attribute.",
    )
    trace_engine(tracer, engine.sync_engine, usage)
    # The direct path's spans are named for the module that sends them (the
    # span's instrumentation scope), so a trace tells which way a statement went.
    return SqlSpans(get_tracer("gql.store", tracer_provider=tracer_provider), engine.sync_engine)


# MariaDB's per-statement bound (`SET STATEMENT max_statement_time=... FOR`),
# which the write's INSERT starts with: the span is named for the INSERT.
_BOUND_PREFIX = re.compile(r"SET STATEMENT \S+ FOR ", re.IGNORECASE)


def direct_spans(spans: SqlSpans | None, engine: Engine) -> SqlSpans | None:
    """`spans` (the traced engine's, see `instrument_engine`), if the tracer is all that listens to `engine`.

    None when `engine` is not traced, or when something else listens to its
    statements too (a test counting round trips): those go through
    SQLAlchemy's execution then, where every listener sees them.
    """
    if spans is None or not spans.alone(engine):
        return None
    return spans


class SqlSpans:
    """Client spans for statements sent to the driver directly, as the SQLAlchemy instrumentation makes them.

    Same kind, name (the statement's first word) and attributes (`db.system`,
    `db.statement`, `db.operation`, `db.name`, `db.user`, `net.peer.name`,
    `net.peer.port`), so a trace shows a page's read whichever way it went.
    """

    def __init__(self, tracer: Any, engine: Engine) -> None:
        self._tracer = tracer
        # The tracer's own listeners: any other means someone else watches the statements.
        self._ours = tuple(engine.dispatch.before_cursor_execute)
        url = engine.url
        found = {
            "net.peer.name": url.host,
            "net.peer.port": url.port,
            "db.name": url.database,
            "db.user": url.username,
            "db.system": "mysql" if engine.dialect.name in ("mysql", "mariadb") else engine.dialect.name,
        }
        self._attributes = {k: v for k, v in found.items() if v is not None}

    def alone(self, engine: Engine) -> bool:
        return all(listener in self._ours for listener in engine.dispatch.before_cursor_execute)

    @contextmanager
    def statement(self, sql: str) -> Iterator[None]:
        """A span around sending `sql` and reading its answer; an exception marks it failed."""
        from opentelemetry.trace import SpanKind

        words = _BOUND_PREFIX.sub("", sql, count=1).split(None, 1)
        operation = words[0] if words else self._attributes["db.system"]
        attributes = {**self._attributes, "db.statement": sql, "db.operation": operation}
        with self._tracer.start_as_current_span(operation, kind=SpanKind.CLIENT, attributes=attributes):
            yield
