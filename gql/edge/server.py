"""How uvicorn serves the app: timeouts and a cap, so that slow sockets cannot hold the process.

`uvicorn_options` is every uvicorn.Config keyword `serve` sets; `lifespan_state` is what the
app's lifespan tells `HTTPProtocol`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from typing import Any

import uvicorn

from .. import request_id
from ..compat.uvicorn import HTTPProtocolBase, WebSocketProtocolBase
from ..domain import tail
from ..settings import Settings

_HEAD_TIMEOUT = "runlog_header_timeout"  # in the app's lifespan state, which uvicorn hands its protocols
MAX_HEAD_BYTES = 16 * 1024  # h11's own limit on a request's head, kept whichever parser uvicorn uses
_HEAD_TOO_BIG = f"The request head is over {MAX_HEAD_BYTES} bytes."

log = logging.getLogger("gql.edge.server")


def no_delay(transport: asyncio.Transport) -> None:
    """Set TCP_NODELAY on a TCP connection: a response would otherwise wait for the client's delayed ACK."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        # asyncio sets it itself, except on a socket a worker was handed (its proto reads 0).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HeadDeadline:
    """A deadline for each request's head, and for a response not taken, mixed into uvicorn's protocol."""

    transport: asyncio.Transport
    cycle: Any
    server_state: Any
    app_state: dict[str, Any]

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        self.scope: Any = None
        super().__init__(config, *args, **kwargs)  # type: ignore[call-arg]
        self.head_timeout: float = self.app_state.get(_HEAD_TIMEOUT, 10.0)
        self.head_timer: asyncio.TimerHandle | None = None
        self.waiting_since: Any = None  # the cycle that was current when the wait began
        self.unsent = float("inf")  # response bytes not yet taken by the client at the last check
        self.head_bytes = 0  # of the head being awaited
        self.head_tail = b""  # its last bytes, where the blank line that ends it may begin

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        no_delay(transport)
        self._await_head()

    # uvicorn answers 503 past this; a process whose connections are all taken is alive all
    # the same, so UNCAPPED_PATHS are answered whatever the count.
    @property
    def limit_concurrency(self) -> int | None:
        scope = self.scope
        if scope is not None and scope.get("path") in UNCAPPED_PATHS:
            return None
        return self.concurrency_cap

    @limit_concurrency.setter
    def limit_concurrency(self, value: int | None) -> None:
        self.concurrency_cap = value

    def data_received(self, data: bytes) -> None:
        if self.head_timer is not None and self.cycle is self.waiting_since and self._head_too_big(data):
            self._stop()
            self.send_400_response(_HEAD_TOO_BIG)  # closes the connection
            return
        super().data_received(data)  # type: ignore[misc]
        if self.head_timer is not None and self.cycle is not self.waiting_since:
            self._stop()  # a new request's head is complete

    def send_400_response(self, msg: str) -> None:
        """Answer what uvicorn could not parse as a request (or a head too big) as the app answers a 400."""
        rid = request_id.new_id()  # a caller's id in a request that is not one cannot be read
        log.info(
            "request %s answered 400 before the app: %s", rid, msg, extra={"fields": {"request_id": rid}}
        )
        body = request_id.error_body(400, msg, rid)
        head = [b"HTTP/1.1 400 Bad Request"]
        head += [name + b": " + value for name, value in self.server_state.default_headers]
        head += [
            b"content-type: application/json",
            b"content-length: " + str(len(body)).encode(),
            request_id.HEADER + b": " + rid.encode(),
            b"connection: close",
        ]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()

    def _head_too_big(self, data: bytes) -> bool:
        """Count the bytes of the head being awaited; whether they pass MAX_HEAD_BYTES."""
        seen = self.head_tail + data
        end = seen.find(b"\r\n\r\n")
        self.head_bytes += len(data) if end < 0 else max(0, end + 4 - len(self.head_tail))
        self.head_tail = seen[-3:]
        return self.head_bytes > MAX_HEAD_BYTES

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._await_head()  # closing too: the response may still wait for its reader

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)  # type: ignore[misc]

    def handle_websocket_upgrade(self, *args: Any) -> None:
        self._stop()  # a websocket's from here on: no head will come
        super().handle_websocket_upgrade(*args)  # type: ignore[misc]

    def _await_head(self, unsent: float = float("inf")) -> None:
        self._stop()
        self.head_bytes = 0
        self.head_tail = b""
        self.waiting_since = self.cycle
        self.unsent = unsent
        loop = asyncio.get_running_loop()
        self.head_timer = loop.call_later(self.head_timeout, self._too_slow)

    def _stop(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _too_slow(self) -> None:
        self.head_timer = None
        answering = self.cycle is not None and not self.cycle.response_complete
        if self.cycle is not self.waiting_since or answering:
            return
        # close() waits for the buffer to drain, for ever if the client reads nothing: one
        # still reading gets another period, one that read nothing in a period is cut off.
        unsent = self.transport.get_write_buffer_size()
        if unsent and unsent < self.unsent:
            self._await_head(unsent)
        elif unsent:
            self.transport.abort()
        elif not self.transport.is_closing():
            # No request is being answered on it: nothing is lost but the socket.
            self.transport.close()


# The paths answered past RUNLOG_MAX_CONNECTIONS (see _HeadDeadline.limit_concurrency).
UNCAPPED_PATHS = frozenset({"/livez", "/readyz", "/metrics"})


class _HeadRefused(Exception):
    """Raised from httptools' callback to stop the parser; uvicorn then calls `send_400_response`."""


class _HostRules:
    """RFC 9112 §3.2's rules for Host, mixed into uvicorn's httptools protocol (`HTTPTOOLS_HOOKS`).

    An absolute-form target's authority replaces the Host, so RUNLOG_ALLOWED_HOSTS judges it.
    """

    url: bytes
    headers: list[tuple[bytes, bytes]]
    parser: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusal: str | None = None

    def on_headers_complete(self) -> None:
        hosts = [value for name, value in self.headers if name == b"host"]
        if len(hosts) > 1:
            self.refusal = "The request has more than one Host header."
        elif not hosts and self.parser.get_http_version() == "1.1":
            self.refusal = "An HTTP/1.1 request must have a Host header."
        if self.refusal is not None:
            raise _HeadRefused(self.refusal)
        scheme, found, rest = self.url.partition(b"://")
        if found and scheme.isalpha():  # the absolute form: a path begins with "/"
            authority = re.split(rb"[/?#]", rest, maxsplit=1)[0].rpartition(b"@")[2]
            self.headers[:] = [(n, v) for n, v in self.headers if n != b"host"] + [(b"host", authority)]
        super().on_headers_complete()  # type: ignore[misc]

    def send_400_response(self, msg: str) -> None:
        super().send_400_response(self.refusal or msg)  # type: ignore[misc]


class HTTPProtocol(_HostRules, _HeadDeadline, HTTPProtocolBase):  # type: ignore[valid-type,misc]
    """uvicorn's HTTP protocol (httptools if installed, else h11): a deadline for each head, Host's rules."""

    def shutdown(self) -> None:
        tail.close_all()  # a long poll ends now with its empty page, not at its timeout
        super().shutdown()


GRACEFUL_SHUTDOWN = 10  # seconds uvicorn lets requests in flight finish after SIGTERM
# Of which a websocket whose client does not take its close frame (1012) is given this many.
WS_SHUTDOWN_GRACE = GRACEFUL_SHUTDOWN / 4
# The close a subscriber that falls behind gets; a close frame's reason holds at most 123 bytes.
BEHIND_CODE = 1008
BEHIND_REASON = (
    "too slow: what was sent was not taken within the ping timeout (RUNLOG_WS_PING_INTERVAL); "
    "reconnect with the last cursor"
)


class ClientGone(OSError):
    """What `WebSocketProtocol.send` raises for a send after this side closed (an OSError, as ASGI asks)."""


class WebSocketProtocol(WebSocketProtocolBase):
    """uvicorn's websocket protocol, dropping a client that takes nothing of what is sent to it."""

    def keepalive_timeout(self) -> None:
        if self.transport.get_write_buffer_size() and not (self.close_sent or self.transport.is_closing()):
            self.conn.send_close(BEHIND_CODE, BEHIND_REASON)
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
            self.transport.close()
        else:
            super().keepalive_timeout()  # nothing unsent: uvicorn's 1011, and the transport closes
        self._abort_unless_closed(self.ping_timeout or WS_SHUTDOWN_GRACE)

    async def send(self, message: Any) -> None:
        if self.close_sent and message["type"] in ("websocket.send", "websocket.close"):
            # Closed by this side (a ping timeout): uvicorn would raise a RuntimeError, a fault.
            raise ClientGone("the websocket was closed by the server")
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            # A denial response completes the handshake: uvicorn would log an ERROR for each one.
            self.handshake_complete = True
        if message["type"] == "websocket.close" and self.close_timer is not None:
            # uvicorn's own timer ends in transport.close(), which would wait for the unsent bytes.
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self._abort)

    def shutdown(self) -> None:
        super().shutdown()  # a close frame (1012) if none was sent, and transport.close()
        self._abort_unless_closed(WS_SHUTDOWN_GRACE)

    def _abort_unless_closed(self, seconds: float) -> None:
        if not self.disconnected:
            self.loop.call_later(seconds, self._abort)

    def _abort(self) -> None:
        if not self.disconnected:
            log.info(
                "websocket of %s dropped: it took none of the %d bytes left to send it",
                "{}:{}".format(*self.client) if self.client else "a client",
                self.transport.get_write_buffer_size(),
            )
            self.transport.abort()  # connection_lost follows: the app's sends end, its tasks too


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Every uvicorn.Config keyword the service sets, whatever the number of workers."""
    from ..logs import logging_config

    return {
        "http": "gql.edge.server:HTTPProtocol",
        "timeout_keep_alive": settings.keepalive_timeout,
        "limit_concurrency": settings.max_connections,
        # Named rather than "auto", so that an installed wsproto changes nothing.
        "ws": "gql.edge.server:WebSocketProtocol",
        "ws_max_size": settings.max_body_bytes,
        "ws_ping_interval": settings.ws_ping_interval,
        "ws_ping_timeout": settings.ws_ping_interval,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN,
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
        "log_config": logging_config(settings.log_format, settings.log_level),
        "log_level": settings.log_level.lower(),
    }


def lifespan_state(settings: Settings) -> dict[str, Any]:
    """What the app's lifespan yields for `HTTPProtocol`: the time a request's head may take."""
    return {_HEAD_TIMEOUT: settings.header_timeout}
