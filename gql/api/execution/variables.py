"""`VariablesExecutor`: graphql-core's executor, with a variable's refusal a caller can act on.

Plug it in at `strawberry.Schema(execution_context_class=...)` (`PageExecutor` extends it).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from graphql import (
    Executor,
    GraphQLError,
    GraphQLSchema,
    NonNullTypeNode,
    NullValueNode,
    OperationDefinitionNode,
    TypeInfo,
    Undefined,
    ValidationContext,
    VariableDefinitionNode,
    is_non_null_type,
    print_ast,
)


class VariablesExecutor(Executor[Any]):
    """graphql-core's executor, refusing before anything runs a variable that is null where a value is needed.

    `$r: ID = 5` may stand at `runId: ID!`; an explicit null for it is a BAD_USER_INPUT naming the variable.
    Plugged in at `strawberry.Schema(execution_context_class=...)`.
    """

    def __init__(self, *args: Any, operation_extensions: Any = None, **kwargs: Any) -> None:
        # Strawberry hands its executor the request's `extensions` (graphql-core's `execute`
        # passes such keywords on to the executor's constructor, as it documents); no resolver
        # here reads them.
        super().__init__(*args, **kwargs)

    @classmethod
    def build(cls, schema: GraphQLSchema, document: Any, *args: Any, **kwargs: Any) -> Any:
        built = super().build(schema, document, *args, **kwargs)
        if isinstance(built, list):  # a variable that does not coerce, an unknown operation
            return [_bad_user_input(error) for error in built]
        refused = [
            _null_where_needed(usage, built.variable_values.coerced)
            for usage in _nullable_in_non_null(schema, document, built.operation)
        ]
        return [error for error in refused if error is not None] or built


def _bad_user_input(error: GraphQLError) -> GraphQLError:
    error.extensions = {**(error.extensions or {}), "code": "BAD_USER_INPUT"}
    return error


def _null_where_needed(
    usage: tuple[VariableDefinitionNode, Any], values: dict[str, Any]
) -> GraphQLError | None:
    definition, found = usage
    name = definition.variable.name.value
    if values.get(name, Undefined) is not None:
        return None
    default = definition.default_value
    if default is not None and not isinstance(default, NullValueNode):
        fix = f"send a value, or leave it out for its default {print_ast(default)}"
    else:
        fix = "send a value"
    return GraphQLError(
        f"Variable '${name}' is null, but it is used where a non-null {found.type} is expected: {fix}.",
        [found.node, definition],
        extensions={"code": "BAD_USER_INPUT"},
    )


# Per operation, the usages of its nullable variables in non-null positions (held weakly).
_USAGES: OrderedDict[int, tuple[weakref.ref[OperationDefinitionNode], tuple[Any, ...]]] = OrderedDict()
_USAGES_SIZE = 256


def _nullable_in_non_null(
    schema: GraphQLSchema, document: Any, operation: OperationDefinitionNode
) -> tuple[tuple[VariableDefinitionNode, Any], ...]:
    found = _USAGES.get(id(operation))
    if found is not None and found[0]() is operation:
        return found[1]
    nullable = {
        d.variable.name.value: d
        for d in operation.variable_definitions or ()
        if not isinstance(d.type, NonNullTypeNode)
    }
    usages: dict[str, tuple[VariableDefinitionNode, Any]] = {}
    if nullable:
        context = ValidationContext(schema, document, TypeInfo(schema), lambda _error: None)
        for usage in context.get_recursive_variable_usages(operation):
            name = usage.node.name.value
            if (
                name in nullable
                and usage.fragment_variable_definition is None
                and is_non_null_type(usage.type)
            ):
                usages.setdefault(name, (nullable[name], usage))  # the first, in document order
    _USAGES[id(operation)] = (weakref.ref(operation), tuple(usages.values()))
    while len(_USAGES) > _USAGES_SIZE:
        _USAGES.popitem(last=False)
    return tuple(usages.values())
