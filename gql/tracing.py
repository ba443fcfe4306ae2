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
on (`RunLogGraphQL.prepared`; tests/test_operable.py checks it). What the
SQL spans do not show: reads and writes on MySQL/MariaDB go to the pool's
aiomysql connection directly (gql/store.py), past SQLAlchemy's execution
events, so those statements have no span of their own; their time is in the
request's span.
"""

from __future__ import annotations

import logging
from typing import Any

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


def instrument_engine(engine: Any, tracer_provider: Any) -> None:
    """Make a span of each statement `engine` executes through SQLAlchemy.

    What `SQLAlchemyInstrumentor().instrument(engine=...)` does for the
    engine, without its once-per-process gate (every app has an engine of
    its own; tests make several) and without patching `create_engine`.
    """
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import get_meter
    from opentelemetry.trace import get_tracer

    tracer = get_tracer(__name__, tracer_provider=tracer_provider)
    usage = get_meter(__name__).create_up_down_counter(
        name="db.client.connections.usage",
        unit="connections",
        description="The number of connections that are currently in state described by the state attribute.",
    )
    EngineTracer(tracer, engine.sync_engine, usage, enable_commenter=False)  # type: ignore[no-untyped-call]
