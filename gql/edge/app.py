"""The HTTP app: its routes (/graphql, GraphiQL, health, metrics), its middlewares, and the lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException as RouteError
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from strawberry.extensions import DisableIntrospection

from .. import metrics, request_id, tracing
from ..api.execution import DocumentCache
from ..api.limits import query_limits
from ..api.schema import build_schema
from ..api.subscriptions import Tails
from ..api.trusted import TrustedDocuments
from ..domain import writes
from ..domain.admission import Admissions
from ..domain.auth import Action, Policy
from ..domain.retention import Sweeper
from ..domain.tail import Watcher
from ..request_id import RequestId, error_body
from ..settings import Settings
from ..store.connections import kills_sent
from ..store.db import create_engine, init_db
from ..store.replica import Replica
from . import export, graphiql, health, run_page, server
from .answers import MaskUnexpected, route_error, shortened
from .body_limit import BodyLimit
from .hold_metrics import HoldSeries, thresholds
from .view import RunLogGraphQL

log = logging.getLogger("gql.edge.app")


def create_app(settings: Settings | None = None, *, tracer_provider: Any = None) -> Starlette:
    """Build the app for `settings` (read from the environment when omitted)."""
    settings = Settings.from_env() if settings is None else settings
    policy = Policy.from_settings(settings)
    alert_after = thresholds(settings)  # a reason that is not one stops start-up, naming it
    traced = tracing.provider(tracer_provider) if settings.otel or tracer_provider is not None else None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        # Before the database is touched: a known document this schema refuses stops start-up.
        trusted.check(schema)
        engine = create_engine(settings)
        # Writes have connections of their own, which no reader can take (SQLite has one writer anyway).
        write_engine = (
            engine
            if settings.is_embedded
            else create_engine(settings, pool_size=settings.write_pool_size, writes=True)
        )
        if traced is not None:
            for made in {engine, write_engine}:
                tracing.instrument_engine(made, traced)
        sweeper = Sweeper.from_settings(engine, settings)  # None unless RUNLOG_RETENTION
        watcher = Watcher(engine, settings)
        tails = Tails(settings.max_subscriptions, settings.max_subscriptions_per_connection)
        replica = Replica.from_settings(engine, settings)
        writer = writes.Writer(write_engine, settings)
        # The lifespan state: each request's scope["state"] starts as a copy of it.
        state: dict[str, Any] = {
            "settings": settings,
            "engine": engine,  # the readers'
            "write_engine": write_engine,
            "admissions": Admissions.from_settings(settings),
            "writer": writer,
            "sweeper": sweeper,
            "watcher": watcher,
            "tails": tails,
            "replica": replica,
            "holds": HoldSeries(settings, alert_after),  # what /metrics shows of the holds
        }
        if traced is not None and replica is not None:
            tracing.instrument_engine(replica.engine, traced)
        try:
            if settings.is_embedded:
                migrated = await init_db(engine)
                if migrated.applied or migrated.adopted:
                    for line in migrated.lines(settings.safe_database_url):
                        log.info("%s", line)
            _log_start(settings, policy)
            metrics.forget_dead_workers()
            await writer.log_detail_limit()  # the detail column's size, looked up once
            if write_engine is not engine:
                # The readers' first connection now: the dialect's first-connect round trips are
                # start-up's, not a request's. A database down now is /healthz's to say.
                await health.problem(engine, settings)
            if sweeper is not None:
                sweeper.start()
            watcher.start()
            if replica is not None:
                await replica.check()
                replica.start()
            sampling = asyncio.get_running_loop().create_task(metrics.sample_every(lambda: sample(state)))
            try:
                # A long poll ends now with its empty page, not at its timeout.
                with _start_up_frozen(), server.at_exit_signal(watcher.close):
                    yield state
            finally:
                sampling.cancel()
        finally:
            # Waits and tails end first: they read through the pool.
            await tails.stop()
            await state["holds"].close()
            await watcher.stop()
            if replica is not None:
                await replica.stop()
            if sweeper is not None:
                await sweeper.stop()
            await kills_sent()  # of the reads all these ended
            await engine.dispose()
            await write_engine.dispose()

    extensions: list[Any] = [MaskUnexpected, *query_limits(settings)]
    if not settings.introspection:
        extensions.append(DisableIntrospection)
    # Last, so a document another extension supplied is left as it is.
    documents = DocumentCache()
    extensions.append(documents.extension)
    schema = build_schema(extensions=extensions)
    # A manifest that does not hold stops start-up, naming it; its documents are checked by the lifespan.
    trusted = TrustedDocuments.from_settings(settings)
    graphql_app = RunLogGraphQL(
        schema,
        trusted=trusted,
        policy=policy,
        graphql_ide="graphiql" if settings.graphiql else None,
        allow_queries_via_get=True,  # a GET mutation is refused with 405 (`RunLogGraphQL.run`)
        # Above ours (which names its setting), so it still bounds queries over the socket.
        max_subscriptions_per_connection=2 * settings.max_subscriptions_per_connection,
        keep_alive=True,  # graphql-ws's "ka"; uvicorn also pings (gql/edge/server.py)
        keep_alive_interval=settings.ws_ping_interval,
        connection_init_wait_timeout=timedelta(seconds=settings.header_timeout),
        # Browsers apply no CORS to a websocket: a page of another origin is refused (403).
        allowed_origins=settings.cors_origins,
    )

    def replica_state(request: Request) -> dict[str, Any]:
        # Reported, not judged: pages read from the primary while a replica is down.
        replica: Replica | None = request.state.replica
        return {} if replica is None else {"replica": replica.status()}

    async def healthz(request: Request) -> Response:
        reason = await health.problem(request.state.write_engine, settings)  # readers cannot fill its pool
        extra = replica_state(request)
        if reason is not None:
            log.warning("healthz: %s", reason)
            return JSONResponse({"status": "unavailable", "reason": reason, **extra}, status_code=503)
        return JSONResponse({"status": "ok", **extra})

    readiness = health.Readiness(settings)

    async def readyz(request: Request) -> Response:
        # Ready is whether a write would find a connection: readers cannot fill the writes' pool.
        reason = await readiness.problem(request.state.write_engine)
        extra = replica_state(request)
        if reason is not None:
            log.warning("readyz: %s", reason)
            return JSONResponse({"status": "unavailable", "reason": reason, **extra}, status_code=503)
        return JSONResponse({"status": "ready", **extra})

    def sample(state: dict[str, Any]) -> None:
        plans = getattr(schema.execution_context_class, "plans", None)  # build_schema's PageExecutor
        metrics.sample(state, documents, plans, state["writer"].lines_waiting())

    async def livez(request: Request) -> Response:
        # Asks nothing: a database that is down is no reason to restart this process.
        return JSONResponse({"status": "alive"})

    async def metrics_page(request: Request) -> Response:
        try:
            sample(request.scope["state"])
        except Exception:  # the scrape shows the gauges' last values
            metrics.swallowed("metrics.sample")
            log.exception("sampling the gauges for /metrics failed")
        # The holds say what the log says: shown only to a scrape that may read it.
        visible = policy.allows(policy.identify(request.headers.get("authorization")), Action.READ)
        held: HoldSeries = request.state.holds
        if visible:
            await held.read(request.state.engine)
        body, content_type = metrics.exposition(request.headers.get("accept"), held.collector(visible))
        return Response(body, headers={"Content-Type": content_type})

    routes: list[BaseRoute] = [
        Route("/graphql", graphql_app, methods=["GET", "POST"]),
        WebSocketRoute("/graphql", graphql_app),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/livez", livez, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/runs/{runId}/log.ndjson", export.route(graphql_app), methods=["GET"]),
        *run_page.routes(settings.trusted_documents),
    ]
    if settings.graphiql:
        graphiql.assets()  # read and checked now, so a damaged file stops start-up
        routes.append(Route(graphiql.ASSETS_PATH, graphiql.serve_asset, methods=["GET"]))
    if settings.metrics == "on":
        routes.append(Route("/metrics", metrics_page, methods=["GET"]))
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            *([] if traced is None else tracing.middleware(traced)),
            # Outside the others, so every response (413, preflight) carries the request's id.
            Middleware(RequestId),
            Middleware(server.InFlightCap, most=settings.max_connections),
            *([Middleware(AllowedHosts, hosts=settings.allowed_hosts)] if settings.allowed_hosts else []),
            *_cors(settings),
            # Before anything reads the body.
            Middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout),
        ],
        # The router's 404 and 405, in JSON like every other error.
        exception_handlers={RouteError: route_error},
    )
    return app


# The youngest generation's threshold while serving (Python's default: 700).
YOUNG_COLLECTION_EVERY = 10_000


@contextlib.contextmanager
def _start_up_frozen() -> Iterator[None]:
    """While apps serve, `gc.freeze` what start-up made and collect the youngest generation less often."""
    global _serving, _threshold
    if _serving == 0:
        _threshold = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(YOUNG_COLLECTION_EVERY, *_threshold[1:])
    _serving += 1
    try:
        yield
    finally:
        _serving -= 1
        if _serving == 0:
            gc.set_threshold(*_threshold)
            gc.unfreeze()


# Apps serving in this process, and the collector's thresholds before the first.
_serving = 0
_threshold = gc.get_threshold()


class AllowedHosts:
    """ASGI middleware against DNS rebinding: a JSON 400 for a Host none of `hosts` names."""

    def __init__(self, app: Any, hosts: tuple[str, ...]) -> None:
        self.app = app
        self.exact = frozenset(h for h in hosts if not h.startswith("*."))
        self.suffixes = tuple(h[1:] for h in hosts if h.startswith("*."))

    def allows(self, host: str) -> bool:
        try:
            name = urlsplit(f"//{host.strip()}").hostname  # lower case, without the port
        except ValueError:
            return False
        return name is not None and (name in self.exact or name.endswith(self.suffixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in UNCHECKED_HOST_PATHS:
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        if self.allows(host):
            await self.app(scope, receive, send)
            return
        rid = request_id.request_id(scope)
        shown = shortened(host, 200)
        log.warning("request %s refused: its Host %r is not in RUNLOG_ALLOWED_HOSTS", rid, shown)
        message = f"This service does not answer to the host {shown!r} (RUNLOG_ALLOWED_HOSTS)."
        if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": ""})  # a bare 403
            return
        prefix = "websocket." if scope["type"] == "websocket" else ""
        body = error_body(400, message, rid)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": prefix + "http.response.start", "status": 400, "headers": headers})
        await send({"type": prefix + "http.response.body", "body": body})


UNCHECKED_HOST_PATHS = frozenset({"/livez", "/readyz", "/healthz", "/metrics"})


# Seconds a browser keeps a preflight's answer.
CORS_MAX_AGE = 600


def _cors(settings: Settings) -> list[Middleware]:
    if not settings.cors_origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-Request-Id", "traceparent"],
            expose_headers=["X-Request-Id"],
            allow_credentials=False,  # a bearer token is a header, not a CORS credential
            max_age=CORS_MAX_AGE,
        )
    ]


def _log_start(settings: Settings, policy: Policy) -> None:
    log.info("run log API on %s", settings.safe_database_url)
    if policy.open_reads:
        log.warning("reads are OPEN: no RUNLOG_READER_TOKEN is set, anyone can call runLog")
    if policy.open_writes:
        log.warning("writes are OPEN: no RUNLOG_WRITER_TOKEN is set, anyone can call writeRunLog")
    if not settings.admin_tokens:
        log.warning("no RUNLOG_ADMIN_TOKEN is set: no one is an admin, pruneTerminal is refused")
