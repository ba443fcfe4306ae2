"""The live tail's transport: a websocket's caller, its caps, and the registry of tails.

Strawberry's `graphql-transport-ws` and `graphql-ws` handlers, each operation with its own
context (`OperationSchema`); what a tail delivers is tail.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Generic, TypeVar

from graphql import GraphQLError

# A documented module: Strawberry's "Adding an integration" imports from it.
from strawberry.http.exceptions import WebSocketDisconnected

from ..compat.strawberry import BaseGraphQLTransportWSHandler, BaseGraphQLWSHandler
from ..domain.auth import Caller, Policy, Role
from .limits import query_text_refusal
from .trusted import REFUSED
from .writes import log_unrun_writes

log = logging.getLogger("gql.api.subscriptions")

T = TypeVar("T")
U = TypeVar("U")


class Refused(Exception):
    """A subscription the caller may not start now; the message says why and what to do."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class BadConnectionInit(Exception):
    """A `connection_init` payload this server cannot read; the message says what was wrong."""


def connection_caller(policy: Policy, payload: Mapping[str, Any], header: str | None) -> Caller:
    """The caller of a websocket: the payload's `Authorization` (any case), else the header's."""
    given = [
        value for key, value in payload.items() if isinstance(key, str) and key.lower() == "authorization"
    ]
    if len(given) > 1:
        raise BadConnectionInit("the connection_init payload has more than one Authorization key")
    if not given:
        return policy.identify(header)
    value = given[0]
    if not isinstance(value, str):
        raise BadConnectionInit(
            "the connection_init payload's Authorization must be a string: "
            '{"Authorization": "Bearer <token>"}'
        )
    return policy.identify(value)


class Connection:
    """One websocket's subscriptions: how many run, against the per-connection cap."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.running = 0


class Tails:
    """This process's running subscriptions, against the per-process cap; ended by `stop`."""

    def __init__(self, most: int, per_connection: int) -> None:
        self.most = most
        self.per_connection = per_connection
        self.running: set[_Slot] = set()
        self.stopping = False

    def connection(self) -> Connection:
        return Connection(self.per_connection)

    def take(self, connection: Connection | None) -> _Slot:
        """A slot for one more subscription, or `Refused` past a cap (or while stopping)."""
        if self.stopping:
            raise Refused(
                "runLogTail is refused: this server process is shutting down; "
                "reconnect (to another process) with the last cursor as `since`",
                "SHUTTING_DOWN",
            )
        if connection is not None and connection.running >= connection.most:
            raise Refused(
                f"runLogTail is refused: this connection already runs {connection.running} "
                f"subscriptions, the most one connection may hold "
                "(RUNLOG_MAX_SUBSCRIPTIONS_PER_CONNECTION); complete one first, or ask for "
                "several kinds or runs in fewer subscriptions",
                "TOO_MANY_SUBSCRIPTIONS",
            )
        if len(self.running) >= self.most:
            raise Refused(
                f"runLogTail is refused: this server process already runs {len(self.running)} "
                "subscriptions, the most it holds (RUNLOG_MAX_SUBSCRIPTIONS); try again shortly, "
                "or on another process",
                "TOO_MANY_SUBSCRIPTIONS",
            )
        slot = _Slot(self, connection)
        self.running.add(slot)
        if connection is not None:
            connection.running += 1
        return slot

    async def stop(self, grace: float = 5.0) -> None:
        """Refuse new subscriptions and cancel the running ones, waiting up to `grace` seconds."""
        self.stopping = True
        tasks = {slot.task for slot in self.running if slot.task is not None and not slot.task.done()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for slot in list(self.running):
            slot.release()


class _Slot:
    def __init__(self, tails: Tails, connection: Connection | None) -> None:
        self.tails = tails
        self.connection = connection
        # The operation's task: the resolver takes its slot in it.
        self.task = asyncio.current_task()
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.tails.running.discard(self)
            if self.connection is not None:
                self.connection.running -= 1


# A class, not an async generator: graphql-core may close a stream it never iterated,
# and a generator that never started runs no `finally`, which would keep its slot.
class Stream(Generic[T, U]):
    """`source`'s items mapped by `convert` (its exceptions by `fail`), holding `slot` until it is closed."""

    def __init__(
        self,
        slot: _Slot,
        source: AsyncIterator[T],
        convert: Callable[[T], U],
        fail: Callable[[Exception], Exception],
    ) -> None:
        self.slot = slot
        self.source = source
        self.convert = convert
        self.fail = fail

    def __aiter__(self) -> Stream[T, U]:
        return self

    async def __anext__(self) -> U:
        if not self.slot.held:
            raise StopAsyncIteration
        try:
            item = await self.source.__anext__()
        except (StopAsyncIteration, asyncio.CancelledError):
            await self.aclose()
            raise
        except Exception as exc:
            await self.aclose()
            raise self.fail(exc) from exc
        return self.convert(item)

    async def aclose(self) -> None:
        if not self.slot.held:
            return
        self.slot.release()
        close = getattr(self.source, "aclose", None)
        if close is not None:
            await close()


def _refusal(view: Any, context: Any, payload: Any) -> Any:
    """The formatted error for a subscribe or start payload too big or not trusted; None if neither."""
    query = payload.get("query") if isinstance(payload, dict) else None
    if not isinstance(query, str):
        return None  # Strawberry refuses it as it is
    too_big = query_text_refusal(query, context.settings.max_query_bytes)
    if too_big is not None:
        return too_big.formatted
    trusted = view.trusted
    if not trusted.enforced or query in trusted.texts or Role.ADMIN in context.caller.roles:
        return None
    return GraphQLError(REFUSED, extensions={"code": "FORBIDDEN"}).formatted


def unreadable(message: Mapping[str, Any]) -> str | None:
    """Why a message cannot be served as the protocols define it, or None."""
    # Strawberry's handlers index into what they receive: a wrong type would fail inside them.
    if not isinstance(message.get("type"), str):  # graphql-ws's handler raised KeyError out of the app
        return "a message needs a type (a string)"
    if "id" in message and not isinstance(message["id"], str):
        return "an operation's id must be a string"
    if message.get("type") == "connection_init" and not isinstance(message.get("payload") or {}, dict):
        return "the connection_init payload must be an object"
    if message.get("type") not in ("subscribe", "start"):
        return None
    if not isinstance(message.get("id"), str):
        return f"a {message['type']} message needs an id (a string)"
    payload = message.get("payload")
    if not isinstance(payload, dict):
        return f"a {message['type']} message's payload must be an object"
    if not isinstance(payload.get("query"), str):
        return "the payload's query must be a string"
    if payload.get("variables") is not None and not isinstance(payload["variables"], dict):
        return "the payload's variables must be an object"
    if payload.get("operationName") is not None and not isinstance(payload["operationName"], str):
        return "the payload's operationName must be a string"
    return None


class OperationSchema:
    """The schema as a websocket handler sees it: each operation runs with a context of its own."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    async def stream(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any = None,
        root_value: Any = None,
        operation_name: str | None = None,
    ) -> Any:
        context = context_value.for_operation()
        results = await self.schema.stream(
            query,
            variable_values=variable_values,
            context_value=context,
            root_value=root_value,
            operation_name=operation_name,
        )
        return _unrun_writes_logged(results, {"query": query, "variables": variable_values}, context)

    subscribe = stream


async def _unrun_writes_logged(results: Any, sent: dict[str, Any], context: Any) -> AsyncIterator[Any]:
    """`results`, each line of a mutation refused before it ran logged as not stored, as over HTTP."""
    async with contextlib.aclosing(results):
        async for result in results:
            if result.data is None and result.errors and all(e.path is None for e in result.errors):
                log_unrun_writes(context.request_id, sent, result.errors, context.settings)
            yield result


class TransportWSHandler(BaseGraphQLTransportWSHandler[Any, None]):
    """Strawberry's graphql-transport-ws handler (overrides: `compat.strawberry.TRANSPORT_WS_HOOKS`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = OperationSchema(self.schema)  # type: ignore[assignment]

    async def handle_message(self, message: Any) -> None:
        reason = unreadable(message)
        if reason is not None:
            await self.handle_invalid_message(f"Invalid message: {reason}")
            return
        if message.get("type") == "connection_init" and message.get("payload", {}) is None:
            # The protocol allows a null payload, which Strawberry closed with 4400 (graphql-ws takes it).
            message = {"type": "connection_init"}
        await super().handle_message(message)

    async def handle_subscribe(self, message: Any) -> None:
        error = _refusal(self.view, self.context, message.get("payload"))
        if error is not None and self.connection_acknowledged and message.get("id") not in self.operations:
            await self.send_message({"id": message["id"], "type": "error", "payload": [error]})
            return
        await super().handle_subscribe(message)

    async def handle_task_exception(self, error: Exception) -> None:
        if isinstance(error, WebSocketDisconnected):
            # Routine: a tail's client disconnects and resumes.
            log.debug("websocket %s: the client left while it was sent a message", self.context.request_id)
            return
        await super().handle_task_exception(error)


class WSHandler(BaseGraphQLWSHandler[Any, None]):
    """Strawberry's graphql-ws handler, held to graphql-transport-ws's rules (overrides: `WS_HOOKS`).

    One `connection_init` (4429 for a second) within RUNLOG_HEADER_TIMEOUT (4408), readable messages (4400).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = OperationSchema(self.schema)  # type: ignore[assignment]
        self.init_received = False

    async def handle(self) -> None:
        waiting = asyncio.create_task(self._close_unless_initialised(self.context.settings.header_timeout))
        try:
            await super().handle()
        finally:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnected):
                await waiting

    async def _close_unless_initialised(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if not self.init_received:
            await self.websocket.close(code=4408, reason="Connection initialisation timeout")

    async def handle_message(self, message: Any) -> None:
        reason = unreadable(message)
        if reason is not None:
            await self.websocket.close(code=4400, reason=f"Invalid message: {reason}")
            return
        await super().handle_message(message)

    async def handle_connection_init(self, message: Any) -> None:
        # Each connection_init would start a keep-alive task, never stopped.
        if self.init_received:
            await self.websocket.close(code=4429, reason="Too many initialisation requests")
            return
        self.init_received = True
        await super().handle_connection_init(message)

    async def handle_start(self, message: Any) -> None:
        error = _refusal(self.view, self.context, message.get("payload"))
        if error is not None and self.connection_acknowledged:
            await self.send_message({"type": "error", "id": message["id"], "payload": error})
            return
        await super().handle_start(message)

    async def handle_async_results(self, *args: Any) -> None:
        try:
            await super().handle_async_results(*args)
        except WebSocketDisconnected:
            # Raised from the operation's task, it would be "Task exception was never retrieved".
            log.debug("websocket %s: the client left while it was sent a message", self.context.request_id)
