"""OpenTelemetry spans for requests and SQL: the `otel` extra, off unless RUNLOG_OTEL is set.

A server span per HTTP request (`middleware`) and a client span per statement (`instrument_engine`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from sqlalchemy import event
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

    # Asked every few seconds by machines: their spans would drown the requests worth tracing.
    excluded = "/metrics,/livez,/readyz,/healthz"
    return [Middleware(OpenTelemetryMiddleware, tracer_provider=tracer_provider, excluded_urls=excluded)]


def instrument_engine(engine: Any, tracer_provider: Any) -> None:
    """Span each statement `engine` executes."""
    # Not OpenTelemetry's SQLAlchemy instrumentation: it patches `create_engine` once per
    # process, and every app here has an engine of its own.
    from opentelemetry.trace import get_tracer

    _SpanEvents(get_tracer(__name__, tracer_provider=tracer_provider), engine.sync_engine)


# MariaDB's per-statement bound, which the write's INSERT starts with: the span is named for the INSERT.
_BOUND_PREFIX = re.compile(r"SET STATEMENT \S+ FOR ", re.IGNORECASE)


def _attributes(engine: Engine) -> dict[str, Any]:
    """What every statement's span says of where it went (OpenTelemetry's database conventions)."""
    url = engine.url
    found = {
        "net.peer.name": url.host,
        "net.peer.port": url.port,
        "db.name": url.database,
        "db.user": url.username,
        "db.system": "mysql" if engine.dialect.name in ("mysql", "mariadb") else engine.dialect.name,
    }
    return {k: v for k, v in found.items() if v is not None}


def _start(tracer: Any, attributes: dict[str, Any], sql: str) -> Any:
    """A client span for `sql`, named for its operation (its first word, past MariaDB's statement bound)."""
    from opentelemetry.trace import SpanKind

    words = _BOUND_PREFIX.sub("", sql, count=1).split(None, 1)
    operation = words[0] if words else attributes["db.system"]
    return tracer.start_span(
        operation,
        kind=SpanKind.CLIENT,
        attributes={**attributes, "db.statement": sql, "db.operation": operation},
    )


_SPAN = "gql.tracing.span"  # where a statement's span waits for its end, in `Connection.info`


class _SpanEvents:
    """A client span per statement an engine executes, from its execution events."""

    def __init__(self, tracer: Any, engine: Engine) -> None:
        self.tracer = tracer
        self.attributes = _attributes(engine)
        event.listen(engine, "before_cursor_execute", self.before)
        event.listen(engine, "after_cursor_execute", self.after)
        event.listen(engine, "handle_error", self.failed)

    def before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info[_SPAN] = _start(self.tracer, self.attributes, statement)

    def after(self, conn: Any, *args: Any) -> None:
        span = conn.info.pop(_SPAN, None)
        if span is not None:
            span.end()

    def failed(self, context: Any) -> None:
        from opentelemetry.trace import Status, StatusCode

        conn = context.connection
        span = None if conn is None else conn.info.pop(_SPAN, None)
        if span is not None:
            span.record_exception(context.original_exception)
            span.set_status(Status(StatusCode.ERROR, str(context.original_exception)))
            span.end()
