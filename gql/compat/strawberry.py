"""Strawberry's non-public names the service relies on (tested in tests/test_compat.py)."""

from __future__ import annotations

from typing import Any

import strawberry
from graphql import GraphQLResolveInfo, GraphQLSchema
from strawberry.schema.schema import DEFAULT_ALLOWED_OPERATION_TYPES, StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter

__all__ = [
    "DefaultExecutionContext",
    "graphql_schema",
    "is_default_resolver",
    "parse_and_validate",
    "resolve_info",
    "strawberry_definition",
]


def graphql_schema(schema: strawberry.Schema) -> GraphQLSchema:
    """The graphql-core schema Strawberry built (`Schema._schema`).

    Strawberry exposes no public accessor for it, and graphql-core's
    `execute`, `validate` and the plans of gql/engine/page_plan.py and
    gql/engine/write_plan.py need it: without it, the prepared path
    (`RunLogGraphQL.run_prepared`), the trusted documents' check at start-up
    and the operation's label in the log have no schema to run against.
    """
    return schema._schema


def resolve_info(info: strawberry.Info) -> GraphQLResolveInfo[Any]:
    """graphql-core's resolve info behind Strawberry's `Info` (`Info._raw_info`).

    Strawberry's `Info` offers `selected_fields` (converted, without the
    document's fragment definitions) but not graphql-core's `field_nodes` and
    `fragments`, which `runLog` reads to know which details a page serves
    (`schema.detail_servings`). Without it that count, and with it the
    detail budget, cannot be taken before the page is read.
    """
    return info._raw_info


# Strawberry's own executor (graphql-core's, plus the resolve info it makes),
# defined in `strawberry.schema.schema` but exported from no public module.
# `Schema(execution_context_class=...)` is the documented seam; an executor
# plugged in there that should behave as Strawberry's default (operation
# extensions, its resolve info) must subclass this one: gql/engine/page_plan.py's
# `PageExecutor`. Without it the fast path would need graphql-core's bare
# executor, and resolvers would get another info.
DefaultExecutionContext = StrawberryGraphQLCoreExecutionContext


def strawberry_definition(extensions: dict[str, Any] | None) -> Any:
    """The Strawberry definition a graphql-core type, field or enum was made from, or None.

    Strawberry stores it in the graphql-core object's `extensions` under
    `GraphQLCoreConverter.DEFINITION_BACKREF` (from
    `strawberry.schema.schema_converter`, not a public module). No public
    call maps a graphql-core type or field back to its Strawberry type
    (`origin`), field (`python_name`, `default_resolver`) or enum (`origin`,
    the Python enum): gql/engine/page_plan.py's plan compiles only what it can read
    from them, and without it every page is completed by graphql-core.
    """
    return None if extensions is None else extensions.get(GraphQLCoreConverter.DEFINITION_BACKREF)


def is_default_resolver(resolve: Any) -> bool:
    """Whether a graphql-core field's `resolve` is Strawberry's attribute read (its `_is_default` mark).

    Strawberry marks the resolver it makes for a field that has no resolver
    of its own; nothing public tells the two apart once the schema is built.
    gql/engine/page_plan.py's plan reads such a field's attribute itself, and must
    not for any other: without the mark no field is planned.
    """
    return bool(getattr(resolve, "_is_default", False))


async def parse_and_validate(schema: strawberry.Schema, query: str, operation_name: str | None) -> None:
    """Take `query` through Strawberry's pipeline as a request would, up to execution, and no further.

    The schema's extensions see it as a request's (`on_operation`, `on_parse`,
    `on_validate`) and no resolver runs: start-up does this with the known
    documents (gql/engine/engine.py, `Engine.warm`), so the document cache
    holds each one as its first request would have left it. Strawberry's
    public calls all execute; the steps before execution are its private
    `_create_execution_context` and `_prepare_operation_async`. Without them,
    start-up would have to execute each document to have it cached.
    """
    context = schema._create_execution_context(
        query=query, allowed_operation_types=DEFAULT_ALLOWED_OPERATION_TYPES, operation_name=operation_name
    )
    extensions = schema.get_extensions()
    for extension in extensions:  # as Schema.execute hands them the request
        extension.execution_context = context
    runner = schema.create_extensions_runner(context, extensions)
    async with runner.operation():
        await schema._prepare_operation_async(context, runner)
