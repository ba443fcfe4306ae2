"""A mutation of nothing but `writeRunLog` fields, answered without graphql-core's executor.

Each field goes to `run_log.write_line`, as the resolver's does; anything it cannot answer
as the executor would goes the normal way, before any line is written.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

import strawberry
from graphql import (
    FieldNode,
    GraphQLField,
    GraphQLScalarType,
    OperationDefinitionNode,
    OperationType,
    get_nullable_type,
)

from ..compat.strawberry import graphql_schema
from .coercion import Coercion

WRITE_FIELD = "writeRunLog"
# The argument types Strawberry hands to a resolver as graphql-core coerced
# them (a GlobalID, an enum, an input type or a list would be converted).
_PASSED_ON = frozenset({"ID", "String", "Int", "Float", "Boolean", "JSON"})


@dataclass(frozen=True, slots=True)
class WritePlan:
    """The `writeRunLog` fields of one operation, and the resolver's name for each argument."""

    keys: tuple[str, ...]  # each field's response key, in order
    coercion: Coercion
    python_names: dict[str, str]  # GraphQL argument name: the resolver's keyword

    def arguments(self, inputs: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]] | None:
        """Each field's response key and keyword arguments; None when anything fails to coerce."""
        coerced = self.coercion.coerce(inputs)
        if coerced is None:
            return None  # the executor's error, with its log: the normal way
        names = self.python_names
        return [
            (key, {names[name]: value for name, value in values.items()})
            for key, values in zip(self.keys, coerced[1], strict=True)
        ]


def write_plan(definitions: strawberry.Schema, operation: OperationDefinitionNode) -> WritePlan | None:
    """`operation`'s write plan, or None when it is not a mutation of plain `writeRunLog` fields."""
    schema = graphql_schema(definitions)
    mutation = schema.mutation_type
    if operation.operation != OperationType.MUTATION or mutation is None or operation.directives:
        return None
    if any(definition.directives for definition in operation.variable_definitions or ()):
        return None
    field = mutation.fields.get(WRITE_FIELD)
    if field is None:
        return None
    names = _python_names(definitions, field, definitions.get_field_for_type(WRITE_FIELD, mutation.name))
    if names is None:
        return None
    fields: list[tuple[str, FieldNode]] = []
    for selection in operation.selection_set.selections:
        if (
            not isinstance(selection, FieldNode)
            or selection.name.value != WRITE_FIELD
            or selection.directives
            or selection.selection_set is not None
        ):
            return None
        key = selection.alias.value if selection.alias is not None else WRITE_FIELD
        if any(key == seen for seen, _ in fields):
            return None  # merged into one field by the executor: left to it
        if {a.name.value for a in selection.arguments or ()} - field.args.keys():
            return None
        fields.append((key, selection))
    if not fields:
        return None
    keys = tuple(key for key, _ in fields)
    return WritePlan(keys, Coercion(schema, operation, [(field, node) for _, node in fields]), names)


def _python_names(definitions: strawberry.Schema, field: GraphQLField, found: Any) -> dict[str, str] | None:
    """The resolver's keyword of each argument, or None if Strawberry would do more than pass them on.

    `found` is the Strawberry field `field` was made from (`Schema.get_field_for_type`).
    """
    if found is None or found.extensions or found.permission_classes:
        return None
    by_name = {definitions.config.name_converter.from_argument(a): a for a in found.arguments}
    names = {}
    for name, argument in field.args.items():
        known = by_name.get(name)
        if (
            known is None
            # Strawberry hands a resolver's `Maybe` argument over wrapped in `Some`.
            or typing.get_origin(known.type_annotation.annotation) is strawberry.Maybe
            or not isinstance(scalar := get_nullable_type(argument.type), GraphQLScalarType)
            or scalar.name not in _PASSED_ON
        ):
            return None
        names[name] = known.python_name
    if len(names) != len(found.arguments):
        return None
    return names
