"""The body limit: an ASGI middleware that refuses a request body too big (413) or too slow (408).

A body within the limits is handed on whole: as one message, and while it is answered as
`scope["state"]["body"]` (`body`). The request is then served until its client leaves (hangup.py).
"""

from __future__ import annotations

import asyncio
import gc

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..request_id import error_body, request_id, send_json
from .hangup import serve_until_gone

# A body at least this big is followed by a young-generation collection (view.PREPARED_MAX_BODY).
COLLECT_AFTER_BYTES = 256 * 1024


class BodyLimit:
    """ASGI middleware: refuse a body over `max_bytes` with 413, or one not in within `timeout` s with 408."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send, declared)
            return
        read = [0]
        try:
            await self._serve(scope, receive, send, read)
        finally:
            # The scope outlives the request: uvicorn keeps a connection's last one until its
            # keep-alive timer fires, even once the client has reset it (bench.body_rss).
            scope.get("state", {}).pop("body", None)
            if read[0] >= COLLECT_AFTER_BYTES:
                # graphql-core's executor is a reference cycle holding the request's variables.
                gc.collect(1)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, read: list[int]) -> None:
        """Read the body within the limits and hand the request on; `read[0]` is the bytes read."""
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                await self._too_slow(scope, send, size)
                return
            if message["type"] != "http.request":
                return  # http.disconnect: the client is gone, no one to answer
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            read[0] = size
            if size > self.max_bytes:
                await self._refuse(scope, send, None)
                return
            if not message.get("more_body", False):
                break
        # Held once: handed on as one message, and as the scope's state (the view logs unrun writes from it).
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        del chunks
        scope.setdefault("state", {})["body"] = body
        whole: Message = {"type": "http.request", "body": body, "more_body": False}
        await serve_until_gone(self.app, scope, whole, receive, send)

    async def _refuse(self, scope: Scope, send: Send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "more bytes than that"
        message = (
            f"The request body is over the limit of {self.max_bytes} bytes "
            f"(RUNLOG_MAX_BODY_BYTES): it has {size}."
        )
        body = error_body(413, message, request_id(scope), maxBytes=self.max_bytes)
        await send_json(send, 413, body, _CLOSE)

    async def _too_slow(self, scope: Scope, send: Send, size: int) -> None:
        message = (
            f"The request body did not arrive within {self.timeout:g} seconds (RUNLOG_BODY_TIMEOUT): "
            f"{size} bytes came in that time."
        )
        body = error_body(408, message, request_id(scope), timeoutSeconds=self.timeout)
        await send_json(send, 408, body, _CLOSE)


def body(scope: Scope) -> bytes:
    """The whole body of a request `BodyLimit` handed on."""
    return scope["state"]["body"]  # type: ignore[no-any-return]


# A refusal closes the connection: the rest of the body is unread, so no request can follow it.
_CLOSE = (b"connection", b"close")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses it; count the bytes anyway
    return None
