"""Every HTTP response carries its request's id, and no failure leaves as a bare 500.

`RequestId` is the outermost ASGI middleware. It gives each request its id
(the caller's `X-Request-Id` when that is printable ASCII of at most 128
characters, otherwise a new one), keeps it in the request's state where the
GraphQL context and error masking read it, and sets it on every response
that leaves the app, whoever made the response: a GraphQL answer, the 413 of
the body limit, a 404 of the router, the GraphiQL page. An exception nothing
else caught becomes a JSON 500 that carries the id, logged in full with it.

Responses uvicorn makes itself, for bytes that are not HTTP at all, never
reach the app and carry no id.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("gql.app")

HEADER = b"x-request-id"
MAX_CALLER_ID_CHARS = 128

# The code in an error's `extensions`, by HTTP status.
CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    413: "BODY_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    500: "INTERNAL_SERVER_ERROR",
}


def request_id(scope: Scope) -> str:
    """The id `RequestId` gave this request ("-" outside one)."""
    found: str = scope.get("state", {}).get("request_id", "-")
    return found


def error_body(status: int, message: str, request_id: str, **extensions: Any) -> bytes:
    """A GraphQL-shaped JSON error body: what a GraphQL client knows how to show."""
    details = {"code": CODES.get(status, "ERROR"), **extensions, "requestId": request_id}
    return json.dumps(
        {"errors": [{"message": message, "extensions": details}]}, separators=(",", ":")
    ).encode()


def _from_caller(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text: str = value.decode("latin-1")
            if 0 < len(text) <= MAX_CALLER_ID_CHARS and all(" " <= c <= "~" for c in text):
                return text
            return None  # not an id we can log or echo safely: make one
    return None


class RequestId:
    """ASGI middleware: an id for every request, on every response, and a JSON 500 as a last resort."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _from_caller(scope) or uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        header = (HEADER, rid.encode())
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [h for h in message.get("headers", ()) if h[0].lower() != HEADER]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error, request %s", rid)
            if started:
                raise  # half a response is out: the server can only close the connection
            body = error_body(500, f"Unexpected error (request id {rid}).", rid)
            await send_with_id(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_with_id({"type": "http.response.body", "body": body})
