"""How a plan reads a request's variables and a field's arguments: as graphql-core's executor reads them.

Both plans (read_plan.py, write_plan.py) coerce with graphql-core's public
`get_variable_values` and `get_argument_values`, the functions its executor
calls, so a value a plan hands on is the value the executor would have. A
value that does not coerce is not answered by a plan: the request goes to
the executor, whose error and log it then gets.
"""

from __future__ import annotations

from typing import Any

from graphql import (
    FieldNode,
    GraphQLError,
    GraphQLField,
    GraphQLSchema,
    OperationDefinitionNode,
    VariableValues,
    get_argument_values,
    get_variable_values,
)


def coerce(
    schema: GraphQLSchema, operation: OperationDefinitionNode, inputs: dict[str, Any] | None
) -> VariableValues | None:
    """The operation's variables as the executor coerces them; None when any does not coerce."""
    found = get_variable_values(schema, operation.variable_definitions or (), inputs or {})
    return None if isinstance(found, list) else found


def arguments(field: GraphQLField, node: FieldNode, variables: VariableValues) -> dict[str, Any] | None:
    """The field's arguments by GraphQL name, as the executor coerces them; None when any does not."""
    try:
        return get_argument_values(field, node, variables)
    except GraphQLError:
        return None
