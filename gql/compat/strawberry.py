"""Strawberry's non-public names the service relies on (tested in tests/test_compat.py).

`__all__` names one entry per reach. A `*_HOOKS` tuple not in it names the members used of
the class whose entry precedes it, and is tested with that class.
"""

from __future__ import annotations

import strawberry
from graphql import GraphQLSchema
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.subscriptions.protocols.graphql_ws.handlers import BaseGraphQLWSHandler

__all__ = [
    "VIEW_HOOKS",
    "BaseGraphQLTransportWSHandler",
    "BaseGraphQLWSHandler",
    "WebSocketAdapterBase",
    "graphql_schema",
]


def graphql_schema(schema: strawberry.Schema) -> GraphQLSchema:
    """The graphql-core schema Strawberry built (`Schema._schema`), which has no public accessor.

    Without it the page plans, `RunLogSchema.root_labels` and the start-up check of known
    documents have no schema to run against.
    """
    return schema._schema


# ── the view, its websocket adapter and handlers ──────────────────────────────
# Members of Strawberry's classes, beyond its documented view hooks, that gql/edge/view.py,
# gql/edge/adapters.py and gql/api/subscriptions.py override or read; tests/test_compat.py checks each.
# Documented, and so not here: the ASGI view's hooks ("Extending the view": get_context,
# get_root_value, process_result, decode_json, encode_json, render_graphql_ide,
# on_ws_connect) and a base view's ("Adding an integration": run, get_sub_response,
# create_response, request_adapter_class, and the request adapter's content_type).

# What gql/edge/view.py's `RunLogGraphQL` overrides or reads beyond the documented hooks: one entry,
# the view (`strawberry.asgi.GraphQL`, itself public).
VIEW_HOOKS = (
    "reject_websocket",
    "websocket_adapter_class",
    "graphql_transport_ws_handler_class",
    "graphql_ws_handler_class",
    "websocket_subprotocols",
)

# Strawberry's ASGI websocket adapter: gql/edge/adapters.py sends text frames (the graphql-ws client
# cannot parse binary ones) and closes 4400 on a non-object. Its exceptions are in a documented
# module (strawberry.http.exceptions, which "Adding an integration" imports from).
WebSocketAdapterBase = ASGIWebSocketAdapter
WEBSOCKET_ADAPTER_HOOKS = ("iter_json", "send_json", "close", "ws", "view")

# Strawberry's websocket protocol handlers: gql/api/subscriptions.py gives each operation its own
# context, checks each message, and refuses an oversized or untrusted text as its error; without
# them, a socket's operations share one deadline and budget and skip those checks.
TRANSPORT_WS_HOOKS = (
    "handle_message",
    "handle_subscribe",
    "handle_task_exception",
    "handle_invalid_message",
    "send_message",
    "connection_acknowledged",  # whether connection_init was answered
    "operations",  # the operations running, by id
    "schema",
    "context",
    "view",
)
WS_HOOKS = (
    "handle",
    "handle_message",
    "handle_connection_init",
    "handle_start",
    "handle_async_results",
    "send_message",
    "connection_acknowledged",
    "websocket",
    "schema",
    "context",
    "view",
)
