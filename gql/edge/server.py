"""How uvicorn serves the app: its documented options, and what the app does at its edge.

A request's head, its Host and a client that reads nothing are the reverse proxy's
(deploy/nginx/runlog.conf; docs/operating.md, "Behind a reverse proxy").
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .. import request_id
from ..settings import Settings

__all__ = [
    "GRACEFUL_SHUTDOWN",
    "UNCAPPED_PATHS",
    "InFlightCap",
    "at_exit_signal",
    "listening_socket",
    "uvicorn_options",
]

GRACEFUL_SHUTDOWN = 10  # seconds uvicorn lets requests in flight finish after SIGTERM


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Every uvicorn.Config keyword the service sets, whatever the number of workers."""
    from ..logs import logging_config

    return {
        "http": "httptools",  # named, so that a missing httptools fails at start rather than slows
        "timeout_keep_alive": settings.keepalive_timeout,
        # Named rather than "auto", so that an installed websockets changes nothing: uvicorn's
        # websockets-sansio logs an ERROR for every denial response (Kludex/uvicorn#3138).
        "ws": "wsproto",
        "ws_max_size": settings.max_body_bytes,
        "ws_ping_interval": settings.ws_ping_interval,
        "ws_ping_timeout": settings.ws_ping_interval,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN,
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
        "log_config": logging_config(settings.log_format, settings.log_level),
        "log_level": settings.log_level.lower(),
    }


def listening_socket(host: str, port: int) -> socket.socket:
    """The TCP socket `serve --workers N` hands uvicorn (its `fd`), with Nagle's algorithm off.

    What a worker accepts from it inherits TCP_NODELAY; asyncio sets it only on sockets it made
    itself, and a response would otherwise wait for the client's delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def at_exit_signal(act: Callable[[], None]) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call `act` on this loop, then the handler the server installed.

    uvicorn lets requests in flight finish before the lifespan ends: a long poll would hold the
    shutdown until its timeout. Nothing is installed off the main thread (a test client's
    lifespan) or where no handler was (no server to stop).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handle(sig: int, frame: Any) -> None:
        loop.call_soon_threadsafe(act)
        chained = previous[signal.Signals(sig)]
        if callable(chained):
            chained(sig, frame)

    chained = [sig for sig, handler in previous.items() if callable(handler)]
    for sig in chained:
        signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig in chained:
            if signal.getsignal(sig) is handle:
                signal.signal(sig, previous[sig])


# Answered past RUNLOG_MAX_CONNECTIONS: a process whose requests are all taken is alive all the same.
UNCAPPED_PATHS = frozenset({"/livez", "/readyz", "/metrics"})


class InFlightCap:
    """ASGI middleware: past `most` requests and websockets in flight, a new one gets 503 at once."""

    def __init__(self, app: ASGIApp, most: int) -> None:
        self.app = app
        self.most = most
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in UNCAPPED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.most:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1013, "reason": ""})  # try again later
                return
            message = "This process answers as many requests as it may (RUNLOG_MAX_CONNECTIONS); try again."
            rid = request_id.request_id(scope)
            await request_id.send_json(send, 503, request_id.error_body(503, message, rid))
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
