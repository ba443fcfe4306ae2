"""The GraphQL view at /graphql: Strawberry's, and the prepared path that answers a known text itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
from typing import Any

import orjson
from cross_web import HTTPException
from graphql import GraphQLError, OperationType, get_operation_ast, parse
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry import UNSET, Schema
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.extensions import DisableIntrospection
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.types import ExecutionResult

from . import body_limit, graphiql, metrics, not_stored, request_id
from .adapters import RequestAdapter, WebSocketAdapter
from .answers import (
    JSON,
    MaskUnexpected,
    anonymise,
    finite,
    forget_tracebacks,
    json_content_type,
    json_error,
    masked,
    operation_label,
    response_media_type,
    shortened,
    should_mask,
)
from .auth import Policy, Role
from .engine import DocumentCacheExtension, DocumentCaches, Engine, Planned
from .limits import RequestLimits
from .page import Context
from .schema import RunLogSchema
from .subscriptions import BadConnectionInit, TransportWSHandler, WSHandler, connection_caller
from .trusted import NO_DOCUMENTS, REFUSED, TrustedDocuments, unknown_id
from .unrun_writes import log_unrun_writes

log = logging.getLogger("gql.app")

# A body this big is left to Strawberry, so as not to be decoded twice.
PREPARED_MAX_BODY = 256 * 1024


def reproduced(extension: Any) -> bool:
    """Whether `run_prepared` does what `extension` does for a request (see `run_prepared`)."""
    made = extension if isinstance(extension, type) else type(extension())
    # Masking is in process_result, limits and introspection in the cached validation, and
    # the writes' notStored in run_prepared and run_writes.
    return made in (
        MaskUnexpected,
        RequestLimits,
        DisableIntrospection,
        DocumentCacheExtension,
        not_stored.NotStoredExtension,
    )


def _mutation(request_data: GraphQLRequestData) -> bool:
    """Whether the request's operation is a mutation (False when its text does not parse)."""
    if not isinstance(request_data.query, str):
        return False
    try:
        operation = get_operation_ast(parse(request_data.query), request_data.operation_name)
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
        caches: DocumentCaches,
        max_lines: int,
        policy: Policy,
        trusted: TrustedDocuments = NO_DOCUMENTS,
        prepared: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(schema, **options)
        self.trusted = trusted
        self.policy = policy
        # An extension run_prepared does not reproduce (a tracer) sends every request through Strawberry.
        self.prepared = prepared and not schema.directives and all(map(reproduced, schema.extensions))
        self.engine = Engine(schema, caches, max_lines)
        self.root_labels = schema.root_labels if isinstance(schema, RunLogSchema) else {}

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        try:
            if self.prepared and isinstance(request, Request) and request.method == "POST":
                response = await self.run_prepared(request)
                if response is not None:
                    return response
            return await super().run(request, context, root_value)
        except HTTPException as exc:
            # Strawberry answers these in plain text; a GraphQL client reads JSON.
            headers = {"Allow": "POST"} if exc.status_code == 405 else None
            return json_error(request, exc.status_code, shortened(exc.reason), headers)

    async def execute_single(
        self,
        request: Any,
        request_adapter: Any,
        sub_response: Any,
        context: Any,
        root_value: Any,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        # A GET may run a query, never a mutation (a link or an <img> could send it): 405, not 400.
        try:
            return await super().execute_single(
                request, request_adapter, sub_response, context, root_value, request_data
            )
        except HTTPException as exc:
            # Strawberry's 400 for an operation type the method may not run: on GET, a mutation.
            if request_adapter.method == "GET" and exc.status_code == 400 and _mutation(request_data):
                raise HTTPException(405, "A mutation must be sent by POST; GET may run only a query") from exc
            raise

    async def parse_http_body(self, request: Any) -> Any:
        # Strawberry executes any content type containing "application/json" ("application/jsonp").
        if request.method == "POST":
            refusal = json_content_type(request.headers.get("content-type"))
            if refusal is not None:
                raise HTTPException(415, refusal)
        data = await super().parse_http_body(request)
        if not isinstance(data, GraphQLRequestData):
            return data  # a batch: refused by Strawberry, batching is off
        document_id = await self._document_id(request)
        if document_id is not None:
            text = self.trusted.text(document_id) if isinstance(document_id, str) else None
            if data.query is not None:
                raise HTTPException(400, "Send either a query or a documentId, not both")
            if text is None:
                raise HTTPException(400, unknown_id(document_id))
            data.query = text
        elif self.trusted.enforced and data.query is not None and not self._may_run(request, data.query):
            raise HTTPException(403, REFUSED)
        return data

    def should_render_graphql_ide(self, request: Any) -> bool:
        # A GET of a trusted document has no `query` either: it is run, not shown.
        return super().should_render_graphql_ide(request) and request.query_params.get("documentId") is None

    async def _document_id(self, request: Any) -> object:
        """The request's `documentId` (trusted documents), None when it sends none."""
        if request.method == "GET":
            return request.query_params.get("documentId")
        body = await request.get_body()
        if b"documentId" not in body:
            return None  # the body is decoded again only when it may hold one
        found = self.parse_json(body)
        return found.get("documentId") if isinstance(found, dict) else None

    def _may_run(self, request: Any, query: object) -> bool:
        """Whether the caller may run `query` while trusted documents are enforced."""
        if isinstance(query, str) and query in self.trusted.texts:
            return True
        return Role.ADMIN in self.policy.identify(request.headers.get("authorization")).roles

    async def run_prepared(self, request: Request) -> Response | None:
        """Answer a POST of a query text validated before, as `run` would; None to leave it to `run`.

        Anything this might not read exactly as `run` would (another content type, `extensions`,
        a text not prepared yet, a request over the line budget) goes to `run`, untouched.
        """
        if json_content_type(request.headers.get("content-type")) is not None:
            metrics.fell_back("prepared", "content_type", None, "the content type is not application/json")
            return None
        body = body_limit.body(request.scope)
        if len(body) > PREPARED_MAX_BODY:
            metrics.fell_back("prepared", "large_body", None, f"the body is over {PREPARED_MAX_BODY} bytes")
            return None
        try:
            data = self.decode_json(body)  # as `run` reads it
        except (ValueError, HTTPException):
            metrics.fell_back("prepared", "json", None, "the body is not JSON (Strawberry refuses it)")
            return None
        if type(data) is not dict:
            metrics.fell_back("prepared", "json", None, "the body is not an object (Strawberry refuses it)")
            return None
        query = data.get("query")
        variables = data.get("variables")
        name = data.get("operationName")
        document_id = data.get("documentId")
        if document_id is not None:
            # A trusted document by its hash; anything odd is `run`'s to refuse.
            if query is not None or type(document_id) is not str:
                metrics.fell_back("prepared", "request_shape", None, "documentId with query, or not a string")
                return None
            query = self.trusted.text(document_id)
        elif self.trusted.enforced and not self._may_run(request, query):
            # Refused by `parse_http_body`, in Strawberry's pipeline.
            metrics.fell_back(
                "prepared", "not_trusted", None, "not a trusted document, and RUNLOG_TRUSTED_DOCUMENTS is on"
            )
            return None
        if (
            type(query) is not str
            or (variables is not None and type(variables) is not dict)
            or (name is not None and type(name) is not str)
            or data.get("extensions") is not None
        ):
            metrics.fell_back(
                "prepared",
                "request_shape",
                None,
                "query, variables, operationName or extensions is not plain",
            )
            return None
        planned = self.engine.plan(query, name, variables)
        if planned is None:
            return None
        request_id.note(operation=operation_label(planned.operation, self.root_labels))
        if planned.writes is not None:
            return await self.run_writes(request, planned)
        sub_response = await self.get_sub_response(request)
        context = await self.get_context(request, response=sub_response)
        outcome = await planned.execute(context)
        result = ExecutionResult(
            data=outcome.data, errors=outcome.errors, extensions=not_stored.extensions(context) or None
        )
        response_data = await self.process_result(request, result)
        return self.create_response(response_data, sub_response)

    async def run_writes(self, request: Request, planned: Planned) -> Response:
        """Answer a mutation of `writeRunLog` fields alone, as the executor would (engine/write_plan.py)."""
        # No sub-response: a write sets no header or status, so this is `create_response`'s answer.
        context = await self.get_context(request, response=None)
        answer: GraphQLHTTPResponse = {"data": await planned.write(context)}
        if context.not_stored:
            answer["extensions"] = not_stored.extensions(context)
        return Response(
            self.encode_json(answer), media_type=response_media_type(request.headers.get("accept"))
        )

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
        # What the lifespan made (gql/app.py), read from the dict: each of `request.state`'s
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

    async def pick_websocket_subprotocol(self, request: WebSocket) -> str | None:
        """graphql-transport-ws when the client offers it, in any order; else graphql-ws."""
        offered = request.scope.get("subprotocols") or []
        return next((protocol for protocol in self.websocket_subprotocols if protocol in offered), None)

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
