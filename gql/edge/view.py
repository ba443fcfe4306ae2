"""The GraphQL view at /graphql: Strawberry's, answering JSON only, trusted documents, and masked errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
from typing import Any
from urllib.parse import urlencode

import orjson
from cross_web import HTTPException
from graphql import GraphQLError, OperationType, get_operation_ast, parse
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry import UNSET, Schema
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from .. import request_id
from ..api.context import Context
from ..api.subscriptions import BadConnectionInit, TransportWSHandler, WSHandler, connection_caller
from ..api.trusted import NO_DOCUMENTS, REFUSED, TrustedDocuments, unknown_id
from ..api.writes import log_unrun_writes
from ..domain.auth import Policy, Role
from . import body_limit, graphiql
from .adapters import RequestAdapter, WebSocketAdapter
from .answers import (
    JSON,
    anonymise,
    finite,
    forget_tracebacks,
    json_content_type,
    json_error,
    masked,
    response_media_type,
    shortened,
    should_mask,
)

log = logging.getLogger("gql.edge.app")


def _mutation(query: str | None, operation_name: str | None) -> bool:
    """Whether the request's operation is a mutation (False when its text does not parse)."""
    if query is None:
        return False
    try:
        operation = get_operation_ast(parse(query), operation_name)
    except GraphQLError:
        return False
    return operation is not None and operation.operation == OperationType.MUTATION


class RunLogGraphQL(GraphQL[Context, None]):
    request_adapter_class = RequestAdapter
    websocket_adapter_class = WebSocketAdapter
    graphql_transport_ws_handler_class = TransportWSHandler
    graphql_ws_handler_class = WSHandler

    def __init__(
        self,
        schema: Schema,
        *,
        policy: Policy,
        trusted: TrustedDocuments = NO_DOCUMENTS,
        **options: Any,
    ) -> None:
        super().__init__(schema, **options)
        self.trusted = trusted
        self.policy = policy

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        try:
            if isinstance(request, WebSocket):
                # graphql-transport-ws when the client offers it, in any order (Strawberry takes
                # the client's first): listed first, it is the one Strawberry picks.
                offered = request.scope.get("subprotocols") or []
                request.scope["subprotocols"] = sorted(offered, key="graphql-transport-ws".__ne__)
            elif request.method == "GET":
                request = self._get_as_read(request)
            elif request.method == "POST":
                request = self._post_as_read(request)
            return await super().run(request, context, root_value)
        except HTTPException as exc:
            params = request.query_params
            # A GET may run a query, never a mutation (a link or an <img> could send it): 405, not
            # Strawberry's 400 for an operation type the method may not run.
            get = exc.status_code == 400 and request.scope.get("method") == "GET"
            if get and _mutation(params.get("query"), params.get("operationName")):
                exc = HTTPException(405, "A mutation must be sent by POST; GET may run only a query")
            # Strawberry answers these in plain text; a GraphQL client reads JSON.
            headers = {"Allow": "POST"} if exc.status_code == 405 else None
            return json_error(request, exc.status_code, shortened(exc.reason), headers)

    def _get_as_read(self, request: Request) -> Request:
        """A GET as Strawberry is to read it: a trusted document's text in place of its `documentId`."""
        params = request.query_params
        document_id = params.get("documentId")
        if document_id is None:
            self._check_trusted(request, params.get("query"))
            return request
        items = [(k, v) for k, v in params.multi_items() if k != "documentId"]
        items.append(("query", self._document_text(document_id, params.get("query"))))
        # Strawberry then runs it, and shows no GraphiQL for a GET without `query`.
        return Request({**request.scope, "query_string": urlencode(items).encode()}, request.receive)

    def _post_as_read(self, request: Request) -> Request:
        """A POST as Strawberry is to read it: JSON only, a trusted document's text for its `documentId`."""
        # Strawberry executes any content type containing "application/json" ("application/jsonp").
        refusal = json_content_type(request.headers.get("content-type"))
        if refusal is not None:
            raise HTTPException(415, refusal)
        body = body_limit.body(request.scope)  # as BodyLimit read it
        if b"documentId" not in body and not self.trusted.enforced:
            return request  # the body is decoded here only when it may hold one, or must be checked
        try:
            data = self.decode_json(body)
        except ValueError:
            return request  # not JSON: Strawberry's to refuse
        if not isinstance(data, dict):
            return request  # a batch: refused by Strawberry, batching is off
        if data.get("documentId") is None:
            self._check_trusted(request, data.get("query"))
            return request
        data["query"] = self._document_text(data.pop("documentId"), data.get("query"))
        whole = [{"type": "http.request", "body": self.encode_json(data), "more_body": False}]

        async def receive() -> Any:
            return whole.pop() if whole else await request.receive()

        return Request(request.scope, receive)

    def _document_text(self, document_id: object, query: object) -> str:
        """The text of the trusted document `document_id` names, sent in place of `query`."""
        if query is not None:
            raise HTTPException(400, "Send either a query or a documentId, not both")
        text = self.trusted.text(document_id) if isinstance(document_id, str) else None
        if text is None:
            raise HTTPException(400, unknown_id(document_id))
        return text

    def _check_trusted(self, request: Request, query: object) -> None:
        """Refuse (403) a text not a trusted document's while they are enforced, unless an admin sent it."""
        if self.trusted.enforced and isinstance(query, str) and not self._may_run(request, query):
            raise HTTPException(403, REFUSED)

    def _may_run(self, request: Any, query: object) -> bool:
        """Whether the caller may run `query` while trusted documents are enforced."""
        if isinstance(query, str) and query in self.trusted.texts:
            return True
        return Role.ADMIN in self.policy.identify(request.headers.get("authorization")).roles

    async def process_result(self, request: Request, result: ExecutionResult) -> GraphQLHTTPResponse:
        # Behind MaskUnexpected: a crash while parsing or validating ends the operation before it.
        request_error = False
        if result.errors:
            request_id.note(errors=True)
            rid = request.state.request_id
            result.errors = [anonymise(e, rid) if should_mask(e) else e for e in result.errors]
            # A request error (no error has a path): nothing ran, so its lines are logged,
            # and the answer has no `data` at all, as the GraphQL specification has it.
            request_error = result.data is None and all(e.path is None for e in result.errors)
            if request_error:
                log_unrun_writes(rid, body_limit.body(request.scope), result.errors, request.state.settings)
        answer = await super().process_result(request, result)
        if request_error:
            answer.pop("data", None)
        if result.errors:
            forget_tracebacks(result.errors)
        return answer

    async def get_sub_response(self, request: Request | WebSocket) -> Response:
        # Where `create_response` finds the media type the caller accepts.
        response = await super().get_sub_response(request)
        response.media_type = response_media_type(request.headers.get("accept"))
        return response

    def create_response(
        self, response_data: GraphQLHTTPResponse | list[GraphQLHTTPResponse], sub_response: Response
    ) -> Response:
        response = super().create_response(response_data, sub_response)
        media_type = sub_response.media_type or JSON
        if media_type != JSON:
            response.headers["content-type"] = media_type
            # The GraphQL over HTTP specification's status codes: no `data` is a request error.
            if isinstance(response_data, dict) and "data" not in response_data:
                response.status_code = 500 if masked(response_data) else 400
        return response

    def decode_json(self, data: str | bytes) -> object:
        depth = _nesting(data)
        if depth > MOST_BODY_NESTING:
            raise HTTPException(
                400,
                f"The request body nests arrays and objects {depth} deep: this service reads JSON "
                f"nested at most {MOST_BODY_NESTING} deep",
            )
        # Strawberry turns only a JSONDecodeError into a 400: anything else here would be a 500.
        try:
            value = _loads(data)
        except json.JSONDecodeError:
            raise  # Strawberry's own 400
        except (UnicodeDecodeError, RecursionError):
            raise HTTPException(400, "Unable to parse request body as JSON") from None
        except ValueError:
            # An integer past sys.get_int_max_str_digits.
            raise HTTPException(
                400,
                f"Unable to parse request body as JSON: a number has more than "
                f"{sys.get_int_max_str_digits()} digits",
            ) from None
        if not isinstance(value, dict | list):
            raise HTTPException(400, "The request body must be a JSON object")
        return value

    def encode_json(self, data: object) -> bytes:
        # orjson is the fast encoder; what it refuses (an integer past 64 bits) takes the standard one.
        try:
            return orjson.dumps(data)
        except TypeError:
            pass
        try:
            return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
        except ValueError:
            # NaN or Infinity in a stored detail: null, as orjson writes it.
            return json.dumps(finite(data), separators=(",", ":")).encode()

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        # What the lifespan made (gql/edge/app.py), read from the dict: each of `request.state`'s
        # attributes costs an AttributeError raised and caught (docs/performance.md).
        state = request.scope["state"]
        websocket = request.scope["type"] == "websocket"
        return Context(
            engine=state["engine"],
            settings=state["settings"],
            writer=state["writer"],
            policy=self.policy,
            caller=self.policy.identify(request.headers.get("authorization")),
            request_id=state["request_id"],  # given by the RequestId middleware
            request=request if websocket else None,
            sweeper=state["sweeper"],
            arrived=asyncio.get_running_loop().time(),
            watcher=state["watcher"],
            tails=state["tails"] if websocket else None,
            connection=state["tails"].connection() if websocket else None,
            replica=state["replica"],
            admissions=state["admissions"],
        )

    async def reject_websocket(self, request: Any) -> Any:
        """Refuse a handshake from another origin's page with a 403 that says why, when the server can.

        Strawberry calls it once its origin check (`is_websocket_origin_allowed`) has refused.
        """
        log.warning(
            "websocket %s refused: a page of origin %r may open it only if RUNLOG_CORS_ORIGINS "
            "names that origin (the request was for host %r)",
            request.scope["state"]["request_id"],
            shortened(request.headers.get("origin", ""), 200),
            shortened(request.headers.get("host", ""), 200),
        )
        if "websocket.http.response" not in request.scope.get("extensions", {}):
            return await super().reject_websocket(request)  # a bare 403
        message = (
            "A page of another origin may open this websocket only if RUNLOG_CORS_ORIGINS names its origin."
        )
        await request.send_denial_response(json_error(request, 403, message))
        return request

    async def on_ws_connect(self, context: Context) -> Any:
        """Read the caller from `connection_init`'s payload; one this cannot read closes with 4403."""
        try:
            context.caller = connection_caller(
                context.policy,
                context.connection_params or {},
                context.request.headers.get("authorization"),
            )
        except BadConnectionInit as exc:
            log.info("websocket %s refused: %s", context.request_id, exc)
            # Closed here, so that both protocols close alike (graphql-ws would close with 1011).
            await context.request.close(code=4403, reason=f"Forbidden: {exc}")
            raise ConnectionRejectionError() from None
        return await super().on_ws_connect(context)

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql.graphiql_response()


# A run of 19 digits may be an integer past 64 bits, which orjson reads as a float. Found as
# 19 zeros once each digit is "0" and anything else " ": one linear pass, many times faster
# than a regex, which also slows on runs of digits (docs/performance.md).
_DIGITS_AS_ZEROS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_NUMBER = b"0" * 19


# How deep a request body's arrays and objects may nest: well within what the parser and, deeper
# on the stack, the resolvers can walk (about a thousand), so that the limit is one number.
MOST_BODY_NESTING = 512
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def _nesting(data: str | bytes) -> int:
    """How deep `data`'s arrays and objects nest, outside its strings (0 when it has few brackets)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= MOST_BODY_NESTING:
        return 0  # cannot nest deeper than that: the common case, two passes in C
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    depth = most = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        most = max(most, depth)
    return most


def _loads(data: str | bytes) -> object:
    """What `json.loads` reads in `data`, or its error; through orjson, the faster, where the two agree."""
    if isinstance(data, bytes) and _LONG_NUMBER not in data.translate(_DIGITS_AS_ZEROS):
        with contextlib.suppress(orjson.JSONDecodeError):  # NaN, a lone surrogate, UTF-16: json's to read
            return orjson.loads(data)
    return json.loads(data)
