"""A request's work ends when its HTTP client hangs up: `unless_gone(receive, work)`.

`receive` is the server's, once the request's body has been read: its next message is the client's
`http.disconnect`. Cancelling the work cancels its statement (store.connections kills it at the server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ClientGone", "unless_gone", "until_gone"]

T = TypeVar("T")


class ClientGone(Exception):
    """The client hung up before the work was done: the work was cancelled."""


async def until_gone(receive: Callable[[], Awaitable[Any]], then: Callable[[], object]) -> None:
    """Call `then` once the client of an HTTP request whose body was read disconnects."""
    while (await receive())["type"] != "http.disconnect":
        pass
    then()


async def unless_gone(receive: Callable[[], Awaitable[Any]] | None, work: Coroutine[Any, Any, T]) -> T:
    """What `work` answers; ClientGone, with `work` cancelled, as soon as the client disconnects."""
    if receive is None:
        return await work
    loop = asyncio.get_running_loop()
    task = loop.create_task(work)
    leaving = loop.create_task(until_gone(receive, task.cancel))
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not leaving.done() or (current is not None and current.cancelling()):
            raise  # cancelled from outside (shutdown), not by the client's leaving
        raise ClientGone from None
    finally:
        leaving.cancel()
