"""`RequestId`, the outermost ASGI middleware: an id on every response and log line, and no bare 500.

The id (the caller's `X-Request-Id`, or a new one) is in `scope["state"]["request_id"]`; the
request's log context is `context()`, added to by `note()`.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import time
from http import HTTPStatus
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import metrics

log = logging.getLogger("gql.edge.app")

HEADER = b"x-request-id"
TRACEPARENT = b"traceparent"
MAX_CALLER_ID_CHARS = 128
# W3C Trace Context: version-traceid-parentid-flags, lower-case hex (a later version may add fields).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")

# The log context of the request being served, shared by every task that serves it.
_context: contextvars.ContextVar[dict[str, Any] | None]
_context = contextvars.ContextVar("runlog_request", default=None)
_NOWHERE: dict[str, Any] = {}

# What a request is counted as when no GraphQL operation names it.
_ROUTES = {"/healthz": "healthz", "/livez": "livez", "/readyz": "readyz", "/metrics": "metrics"}


def context() -> dict[str, Any]:
    """The log context of the request being served (a dict to add to), or an empty one outside a request."""
    found = _context.get()
    return _NOWHERE if found is None else found


def note(**fields: Any) -> None:
    """Add `fields` (operation, run_id, ...) to the log context of the request being served."""
    found = _context.get()
    if found is not None:
        found.update(fields)


def trace_id(header: str) -> str | None:
    """The trace id of a W3C `traceparent` header, or None when it is not a valid one."""
    found = _TRACEPARENT.fullmatch(header.strip())
    if found is None:
        return None
    version, trace, parent, _flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest) or trace == "0" * 32 or parent == "0" * 16:
        return None
    return trace


def new_id() -> str:
    """A new request id: 16 hex digits, 64 random bits."""
    return os.urandom(8).hex()


def request_id(scope: Scope) -> str:
    """The id `RequestId` gave this request ("-" outside one)."""
    return str(scope.get("state", {}).get("request_id", "-"))


def error_body(status: int, message: str, request_id: str, **extensions: Any) -> bytes:
    """A GraphQL-shaped JSON error body: what a GraphQL client knows how to show."""
    # The code is the status's name (`METHOD_NOT_ALLOWED`), but 413's, which says what is too large.
    code = "BODY_TOO_LARGE" if status == 413 else HTTPStatus(status).name
    details = {"code": code, **extensions, "requestId": request_id}
    return json.dumps(
        {"errors": [{"message": message, "extensions": details}]}, separators=(",", ":")
    ).encode()


async def send_json(
    send: Send, status: int, body: bytes, *headers: tuple[bytes, bytes], prefix: str = ""
) -> None:
    """Send a whole JSON response; `prefix="websocket."` answers a websocket's handshake."""
    fixed = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": prefix + "http.response.start", "status": status, "headers": [*fixed, *headers]})
    await send({"type": prefix + "http.response.body", "body": body})


def _open(scope: Scope, **fields: Any) -> tuple[str, dict[str, Any], contextvars.Token[Any]]:
    """Give the request its id (the caller's when valid), and open its log context with `fields`."""
    rid = trace = None
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text: str = value.decode("latin-1")
            # Not an id we can log or echo safely: make one.
            if 0 < len(text) <= MAX_CALLER_ID_CHARS and all(" " <= c <= "~" for c in text):
                rid = text
        elif name == TRACEPARENT:
            trace = trace_id(value.decode("latin-1"))
    rid = rid or new_id()
    scope.setdefault("state", {})["request_id"] = rid
    context = {"request_id": rid, **fields}
    if trace is not None:
        context["trace_id"] = trace
    return rid, context, _context.set(context)


def _with_id(message: Message, header: tuple[bytes, bytes]) -> Message:
    headers = [h for h in message.get("headers", ()) if h[0].lower() != HEADER]
    return {**message, "headers": [*headers, header]}


class RequestId:
    """ASGI middleware: an id for every request, on every response, and a JSON 500 as a last resort."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
        rid, fields, token = _open(scope, arrived=arrived)
        header = (HEADER, rid.encode())
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = _with_id(message, header)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error, request %s", rid)
            if status:
                status = 500
                raise  # half a response is out: the server can only close the connection
            status = 500
            await send_json(send_with_id, 500, error_body(500, f"Unexpected error (request id {rid}).", rid))
        finally:
            _context.reset(token)
            _count(scope, fields, status, time.perf_counter() - arrived)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid, _, token = _open(scope)
        header = (HEADER, rid.encode())
        answers = "websocket.http.response" in scope.get("extensions", {})
        handshake = True  # no answer to the handshake sent yet

        async def send_with_id(message: Message) -> None:
            nonlocal handshake
            kind = message["type"]
            if handshake:
                handshake = False  # what the app sends first answers the handshake
                if kind == "websocket.close" and answers:
                    # Refused before it was accepted: uvicorn's own 403 would carry no id.
                    body = error_body(403, "This websocket was refused.", rid)
                    await send_json(send, 403, body, header, prefix="websocket.")
                    return
                if kind in ("websocket.accept", "websocket.http.response.start"):
                    message = _with_id(message, header)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _context.reset(token)


def _count(scope: Scope, fields: dict[str, Any], status: int, took: float) -> None:
    operation = fields.get("operation")
    if operation is None:
        path = scope.get("path", "")
        if path == "/graphql":
            operation = "graphiql" if scope.get("method") in ("GET", "HEAD") and status == 200 else "none"
        else:
            operation = _ROUTES.get(path, "other")
    if status >= 500 or status == 0:
        outcome = "failed"
    elif status >= 400:
        outcome = "refused"
    elif fields.get("errors"):
        outcome = "error"
    else:
        outcome = "ok"
    metrics.observe_request(operation, outcome, took)
