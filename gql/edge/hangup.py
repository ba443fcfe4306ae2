"""A request's work ends when its HTTP client hangs up: `serve_until_gone`, called by `BodyLimit`."""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..request_id import request_id

__all__ = ["serve_until_gone"]

log = logging.getLogger("gql.edge.hangup")


async def serve_until_gone(
    app: ASGIApp, scope: Scope, request: Message, receive: Receive, send: Send
) -> None:
    """Serve `scope`, its body `request` read from `receive`; cancel the work if the client leaves first.

    The server's `receive` is awaited here alone; the app's answers `request`, then
    `http.disconnect` once the client has gone.
    """
    task: asyncio.Task[None] = asyncio.current_task()  # type: ignore[assignment]
    gone = asyncio.Event()
    left = False  # the client left before the answer was sent: the work was cancelled
    complete = False
    pending = [request]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def tracked(message: Message) -> None:
        nonlocal complete
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            complete = True
        await send(message)

    async def watch() -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()
        if not complete:  # once the answer is sent, the server says `http.disconnect` to every receive
            left = True
            task.cancel()

    watching = asyncio.get_running_loop().create_task(watch())
    try:
        await app(scope, replay, tracked)
    except asyncio.CancelledError:
        if not left or task.uncancel():  # cancelled from outside too (shutdown)
            raise
        log.info(
            "request %s (%s %s): its client left; stopped", request_id(scope), scope["method"], scope["path"]
        )
    else:
        if left:
            task.uncancel()
    finally:
        watching.cancel()
