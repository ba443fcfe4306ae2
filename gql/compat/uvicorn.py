"""uvicorn's non-public classes the service subclasses (tested in tests/test_compat.py).

Subclasses override or read only what each `*_HOOKS` tuple names. `__all__` names one entry
per reach: a class, with the `*_HOOKS` tuples that follow it (tested with it), and
`HTTP_STATE_HOOKS`, what is read on two other classes of uvicorn's (the request's cycle, the
server's state).
"""

from __future__ import annotations

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = [
    "HTTP_STATE_HOOKS",
    "HTTPProtocolBase",
    "WebSocketProtocolBase",
]

# uvicorn's HTTP protocol (httptools' if installed, else h11's): no setting bounds the time a
# request's head may take, nor its size under httptools; gql/edge/server.py's `HTTPProtocol` adds both.
# Without it a connection that trickles its head holds a slot for ever.
HTTPProtocolBase = AutoHTTPProtocol

HTTP_HOOKS = (
    "connection_made",  # asyncio's, to start the head's deadline
    "data_received",  # asyncio's, to count the head's bytes
    "connection_lost",  # asyncio's, to stop the deadline
    "on_response_complete",  # uvicorn's, once a response is sent: the next head's deadline
    "handle_websocket_upgrade",  # uvicorn's, when the connection becomes a websocket's
    "send_400_response",  # uvicorn's answer to what does not parse, answered with a request id
    "shutdown",  # uvicorn's, at SIGTERM: long polls are ended first
    "limit_concurrency",  # read once a head is parsed; a property lets /livez and co. past it
    "cycle",  # the request/response cycle, made once a head is parsed
    "scope",  # the request's, its path read for limit_concurrency
    "server_state",  # its default headers, for the 400
    "app_state",  # what the app's lifespan yielded: the head's deadline (gql/edge/server.py's lifespan_state)
    "transport",
)

# What gql/edge/server.py reads on the objects those members hold.
HTTP_STATE_HOOKS = ("cycle.response_complete", "server_state.default_headers")

# On uvicorn's httptools protocol only (h11's itself refuses a missing or second Host).
HTTPTOOLS_HOOKS = (
    "on_headers_complete",  # httptools' callback once the head is parsed, before the scope is read
    "url",  # the request's target as sent, its authority with it in the absolute form
    "headers",  # the head's headers, the scope's own list
    "parser",  # for the request's HTTP version
)

# uvicorn's websocket protocol on the websockets library's sans-I/O API: it closes a peer with
# `transport.close()`, which waits for ever on a client that reads nothing; the subclass aborts it.
# Without it a stalled subscriber holds its subscription and delays shutdown.
WebSocketProtocolBase = WebSocketsSansIOProtocol

WEBSOCKET_HOOKS = (
    "keepalive_timeout",  # called when a ping's pong is late
    "send",  # the ASGI send: a close after this side closed, and denial responses
    "shutdown",
    "close_timer",  # its timer for the client's answering close
    "close_timeout",
    "close_sent",
    "handshake_complete",
    "conn",  # the websockets protocol object, to send a close frame
    "transport",
    "ping_timeout",
    "disconnected",
    "loop",
    "client",
)
