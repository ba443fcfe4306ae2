"""How answers look: masked errors, JSON errors, the media type, and what a request is counted as."""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterator
from typing import Any

from graphql import (
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    get_operation_ast,
)
from starlette.exceptions import HTTPException as RouteError
from starlette.requests import Request
from starlette.responses import Response
from strawberry.extensions import SchemaExtension
from strawberry.http import GraphQLHTTPResponse

from .. import request_id
from ..api.context import ClientError
from ..api.schema import RunLogSchema
from ..request_id import error_body

log = logging.getLogger("gql.edge.app")


class MaskUnexpected(SchemaExtension):
    """Mask what the caller cannot act on (`should_mask`): replaced by the request id, and logged in full."""

    def on_operation(self) -> Iterator[None]:
        self.streamed = False  # a stream's results are masked as each is sent (`on_stream_result`)
        yield
        if not self.streamed:
            self.mask(self.execution_context.result)
        # What the request is counted as.
        found = self.execution_context.graphql_document
        schema = self.execution_context.schema
        if found is not None and isinstance(schema, RunLogSchema):  # build_schema's, as every app's
            operation = get_operation_ast(found, self.execution_context.operation_name)
            request_id.note(operation=operation_label(operation, schema.root_labels))

    def on_stream_result(self, result: Any) -> Iterator[None]:
        self.streamed = True
        self.mask(result)
        yield

    def mask(self, result: Any) -> None:
        errors = getattr(result, "errors", None)
        if errors:
            rid = getattr(self.execution_context.context, "request_id", "-")
            result.errors = [anonymise(e, rid) if should_mask(e) else e for e in errors]


def anonymise(error: GraphQLError, request_id: str) -> GraphQLError:
    log.error(
        "masked error, request %s, path %s",
        request_id,
        error.path,
        exc_info=error.original_error or error,
    )
    return GraphQLError(
        message=f"Unexpected error (request id {request_id}).",
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions={"code": "INTERNAL_SERVER_ERROR", "requestId": request_id},
    )


def forget_tracebacks(errors: list[GraphQLError]) -> None:
    """Drop the tracebacks of answered errors and of what they wrap: their frames hold the request."""
    pending: list[BaseException | None] = list(errors)
    seen: set[int] = set()
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        error.__traceback__ = None
        pending += [error.__cause__, error.__context__, getattr(error, "original_error", None)]


def should_mask(error: GraphQLError) -> bool:
    """Whether `error` came from a surprise: not a `ClientError`, nor from before execution."""
    original = error.original_error
    if original is None or isinstance(original, ClientError):
        return False
    # An error pointing into the document (an Int too long to read) is the caller's.
    return not (error.path is None and (isinstance(original, GraphQLError) or error.nodes))


def operation_label(
    operation: OperationDefinitionNode | None, root_labels: dict[OperationType, dict[str, str]]
) -> str:
    """What a GraphQL request is counted as: its root fields' names joined by `+` (the schema's only)."""
    names = None if operation is None else root_labels.get(operation.operation)
    if operation is None or names is None:
        return "invalid"
    labels = set()
    for selection in operation.selection_set.selections:
        label = names.get(selection.name.value) if isinstance(selection, FieldNode) else "fragment"
        if label is None:
            return "invalid"
        labels.add(label)
    return "+".join(sorted(labels))


def finite(value: Any) -> Any:
    """`value` with every float that is not finite (NaN, Infinity) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def json_content_type(header: str | None) -> str | None:
    """None when `header` is JSON as this service reads it, else why not."""
    accepted = "the body must be sent as Content-Type: application/json (optionally ; charset=utf-8)"
    media_type, *parameters = (header or "").split(";")
    if media_type.strip().lower() != "application/json":
        shown = "no Content-Type" if header is None else f"Content-Type {header[:100]!r}"
        return f"Unsupported content type: {shown}; {accepted}"
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return f"Unsupported charset {value.strip()[:40]!r}: JSON is read as UTF-8; {accepted}"
    return None


def shortened(reason: str, most: int = 1000) -> str:
    # Strawberry quotes the caller's input in some reasons ("Unknown operation named ...").
    if len(reason) <= most:
        return reason
    return f"{reason[:most]}... ({len(reason)} characters, shortened)"


def json_error(
    request: Request, status: int, message: str, headers: Any = None, **extensions: Any
) -> Response:
    """A JSON error answer; `extensions` go beside its code (`code=` in place of the status's name)."""
    body = error_body(status, message, request.state.request_id, **extensions)
    media_type = response_media_type(request.headers.get("accept"))
    return Response(body, status_code=status, media_type=media_type, headers=headers)


JSON = "application/json"
GRAPHQL_RESPONSE = "application/graphql-response+json"


@functools.lru_cache(maxsize=256)
def response_media_type(accept: str | None) -> str:
    """application/graphql-response+json when `accept` ranks it at least as high as JSON, else JSON."""
    if not accept or accept == JSON:
        return JSON
    graphql_q = json_q = wildcard_q = 0.0
    for part in accept.split(","):
        media_type, *parameters = part.split(";")
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media_type = media_type.strip().lower()
        if media_type == GRAPHQL_RESPONSE:
            graphql_q = max(graphql_q, quality)
        elif media_type == JSON:
            json_q = max(json_q, quality)
        elif media_type in ("*/*", "application/*"):
            wildcard_q = max(wildcard_q, quality)
    if graphql_q > 0 and graphql_q >= (json_q or wildcard_q):
        return GRAPHQL_RESPONSE
    return JSON


def masked(response_data: GraphQLHTTPResponse) -> bool:
    """Whether an answer's errors include one the service masked (its own failure, not the caller's)."""
    for error in response_data.get("errors") or ():
        extensions = error.get("extensions") if isinstance(error, dict) else None
        if isinstance(extensions, dict) and extensions.get("code") == "INTERNAL_SERVER_ERROR":
            return True
    return False


async def route_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, RouteError):  # registered for RouteError only
        raise exc
    return json_error(request, exc.status_code, exc.detail, exc.headers)
