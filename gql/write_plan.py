"""A mutation of nothing but `writeRunLog` fields, answered without graphql-core's executor.

A writer sends the same small mutation thousands of times (the shipped
`WriteNote`): a text validated once, a few variables, one Boolean back. For
that, graphql-core's executor and Strawberry's resolver wrapping are most of
the CPU a write costs beyond the INSERT itself. A plan, made once per
operation, keeps what depends on the request and nothing else:

- the variables, coerced by graphql-core's own `get_variable_values`, and
  each field's arguments by its `get_argument_values` (both public), so a
  value is read exactly as the executor reads it;
- each field, in order, handed to the same function the resolver calls
  (`schema.write_line`): the writer check, the line's checks, its deadline
  from the request's arrival, the grouping, the log of a refused line;
- the answer, `{"data": {<response key>: true|false, ...}}`, as graphql-core
  would build it.

A plan is made only for an operation whose every root selection is a plain
`writeRunLog` field (no directive, no fragment, no `__typename`, each
response key once) and only while that field is what the plan knows: no
field extension or permission class, and every argument a scalar, which
Strawberry hands to the resolver as it is. Anything a plan does not answer
exactly as the executor would, it does not answer at all: a variable or
argument that does not coerce, for instance, goes the normal way, before
any line is written, and gets the executor's own error and its log.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphql import (
    ArgumentNode,
    FieldNode,
    GraphQLArgument,
    GraphQLField,
    GraphQLNonNull,
    GraphQLScalarType,
    GraphQLSchema,
    ListValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    Undefined,
    ValueNode,
    VariableDefinitionNode,
    VariableNode,
    VariableValues,
    coerce_input_literal,
    get_nullable_type,
    is_required_argument,
    value_from_ast_untyped,
)
from strawberry.types.base import StrawberryMaybe

from .compat.graphql import (
    GraphQLVariableSignature,
    VariableValueSource,
    coerce_default_value,
    get_variable_signature,
)
from .compat.strawberry import strawberry_definition

WRITE_FIELD = "writeRunLog"
# The argument types Strawberry hands to a resolver as graphql-core coerced
# them (a GlobalID, an enum, an input type or a list would be converted).
_PASSED_ON = frozenset({"ID", "String", "Int", "Float", "Boolean", "JSON"})
_IMMUTABLE = (type(None), bool, int, float, str)


class _Refused(Exception):
    """A value graphql-core would refuse: the request goes the normal way, for its error."""


@dataclass(frozen=True, slots=True)
class _Variable:
    """A variable of a scalar type, coerced as graphql-core's `coerce_variable_values` does."""

    name: str
    signature: GraphQLVariableSignature
    scalar: GraphQLScalarType
    non_null: bool
    default: Any  # its coerced default; Undefined when it has none

    def coerce(self, inputs: dict[str, Any], sources: dict[str, Any] | None, coerced: dict[str, Any]) -> None:
        """Coerce its value into `coerced`, and its source into `sources` unless None (not needed)."""
        value = inputs.get(self.name, Undefined)
        if value is Undefined:
            if sources is not None:
                sources[self.name] = VariableValueSource(self.signature)
            if self.default is not Undefined:
                coerced[self.name] = self.default
            elif self.non_null:
                raise _Refused
            return
        if sources is not None:
            sources[self.name] = VariableValueSource(self.signature, value)
        if value is None:
            if self.non_null:
                raise _Refused
            coerced[self.name] = None
            return
        try:
            value = self.scalar.coerce_input_value(value)
        except Exception:  # graphql-core's own coercion catches as broadly
            raise _Refused from None  # counted where the request falls back (view.run_prepared)
        if value is Undefined:
            raise _Refused
        coerced[self.name] = value


@dataclass(frozen=True, slots=True)
class _Argument:
    """One argument of a field, read as graphql-core's `coerce_argument` reads it."""

    python_name: str
    definition: GraphQLArgument
    node: ValueNode | None  # None: not given
    default: Any  # the argument's coerced default; Undefined when it has none
    constant: Any  # the literal's value when it is the same on every request, else Undefined
    # A list or object literal of a scalar that parses literals as graphql-core's
    # GraphQLScalarType does (JSON): its value as a function of the coerced
    # variables (`_literal`). None: coerced by graphql-core on each request.
    literal: Callable[[dict[str, Any]], Any] | None = None

    def value(self, variables: VariableValues) -> Any:
        """Its value; Undefined when it is left out, as the executor leaves it out."""
        if self.constant is not Undefined:
            return self.constant
        if self.literal is not None:
            value = self.literal(variables.coerced)
            if value is Undefined:
                raise _Refused
            return value
        node = self.node
        if node is None:
            return self.default
        if isinstance(node, VariableNode):
            name = node.name.value
            if name not in variables.coerced and not is_required_argument(self.definition):
                return self.default
            value = variables.coerced.get(name, Undefined)
            if isinstance(self.definition.type, GraphQLNonNull) and (value is None or value is Undefined):
                raise _Refused
            return value
        value = coerce_input_literal(node, self.definition.type, variables)
        if value is Undefined:
            raise _Refused
        return value


@dataclass(frozen=True, slots=True)
class WritePlan:
    """The `writeRunLog` fields of one operation, and how to read their arguments."""

    variables: tuple[_Variable, ...]
    fields: tuple[tuple[str, tuple[_Argument, ...]], ...]  # (response key, arguments), in order
    # Whether an argument is coerced by graphql-core's coerce_input_literal,
    # which reads the variables' sources; the others read only their values.
    sourced: bool = True

    def arguments(self, inputs: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]] | None:
        """Each field's response key and keyword arguments; None when anything fails to coerce."""
        sources: dict[str, Any] | None = {} if self.sourced else None
        coerced: dict[str, Any] = {}
        try:
            for variable in self.variables:
                variable.coerce(inputs or {}, sources, coerced)
            variables = VariableValues(sources or {}, coerced)
            found = []
            for key, arguments in self.fields:
                values = {}
                for argument in arguments:
                    value = argument.value(variables)
                    if value is not Undefined:
                        values[argument.python_name] = value
                found.append((key, values))
        except _Refused:
            return None  # the executor's error, with its log: the normal way
        return found


class WritePlans:
    """Each operation's plan (None: it has none), kept as long as the operation is."""

    def __init__(self, schema: GraphQLSchema) -> None:
        self.schema = schema
        # By identity: an AST node hashes its whole tree, on every lookup.
        self.plans: dict[int, tuple[weakref.ref[OperationDefinitionNode], WritePlan | None]] = {}

    def plan(self, operation: OperationDefinitionNode) -> WritePlan | None:
        known = self.plans.get(id(operation))
        if known is not None and known[0]() is operation:
            return known[1]
        key = id(operation)
        found = _plan(self.schema, operation)
        self.plans[key] = (weakref.ref(operation, functools.partial(self._forget, key)), found)
        return found

    def _forget(self, key: int, gone: weakref.ref[OperationDefinitionNode]) -> None:
        known = self.plans.get(key)
        if known is not None and known[0] is gone:
            del self.plans[key]


def _plan(schema: GraphQLSchema, operation: OperationDefinitionNode) -> WritePlan | None:
    mutation = schema.mutation_type
    if operation.operation != OperationType.MUTATION or mutation is None or operation.directives:
        return None
    field = mutation.fields.get(WRITE_FIELD)
    names = _python_names(field)
    if field is None or names is None:
        return None
    variables = []
    for definition in operation.variable_definitions or ():
        variable = _variable(schema, definition)
        if variable is None:
            return None
        variables.append(variable)
    fields: list[tuple[str, tuple[_Argument, ...]]] = []
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
        given = {a.name.value: a for a in selection.arguments or ()}
        if given.keys() - field.args.keys():
            return None
        arguments = []
        for name, definition in field.args.items():
            argument = _argument(names[name], definition, given.get(name))
            if argument is None:
                return None
            arguments.append(argument)
        fields.append((key, tuple(arguments)))
    if not fields:
        return None
    sourced = any(
        a.literal is None and isinstance(a.node, ListValueNode | ObjectValueNode)
        for _, arguments in fields
        for a in arguments
    )
    return WritePlan(tuple(variables), tuple(fields), sourced)


def _variable(schema: GraphQLSchema, definition: VariableDefinitionNode) -> _Variable | None:
    signature = get_variable_signature(schema, definition)
    if not isinstance(signature, GraphQLVariableSignature) or definition.directives:
        return None
    scalar = get_nullable_type(signature.type)
    if not isinstance(scalar, GraphQLScalarType) or scalar.name not in _PASSED_ON:
        return None
    default = Undefined
    if definition.default_value is not None:
        try:
            default = coerce_default_value(signature)
        except Exception:  # no plan: counted where the request falls back (view.run_prepared)
            return None
        if not isinstance(default, _IMMUTABLE):
            return None  # a fresh copy per request, as graphql-core makes: left to it
    return _Variable(signature.name, signature, scalar, isinstance(signature.type, GraphQLNonNull), default)


def _argument(python_name: str, definition: GraphQLArgument, given: ArgumentNode | None) -> _Argument | None:
    default = Undefined
    if definition.default is not None or definition.default_value is not Undefined:
        try:
            default = coerce_default_value(definition)
        except Exception:  # no plan: counted where the request falls back (view.run_prepared)
            return None
        if not isinstance(default, _IMMUTABLE):
            return None
    if given is None:
        if is_required_argument(definition):
            return None  # refused by validation
        return _Argument(python_name, definition, None, default, default)
    node = given.value
    constant = Undefined
    if not isinstance(node, VariableNode | ListValueNode | ObjectValueNode):
        constant = coerce_input_literal(node, definition.type)
        if constant is Undefined or not isinstance(constant, _IMMUTABLE):
            return None
        if constant is None and isinstance(definition.type, GraphQLNonNull):
            return None
    literal = None
    if isinstance(node, ListValueNode | ObjectValueNode):
        literal = _literal(get_nullable_type(definition.type), node)
    return _Argument(python_name, definition, node, default, constant, literal)


def _literal(scalar: Any, node: ListValueNode | ObjectValueNode) -> Callable[[dict[str, Any]], Any] | None:
    """What coerce_input_literal answers for `node` as a `scalar`, as a function of the coerced variables.

    For a scalar that parses literals as GraphQLScalarType itself does (no
    coerce_input_literal, parse_literal not replaced): graphql-core reads the
    literal with value_from_ast_untyped, each variable as its coerced value
    (Undefined when absent), and hands that to coerce_input_value; a failure
    is Undefined. The literal is read into a tree of functions once, here,
    instead of walked on every request, as WriteNote's `detail: {text:
    $text}` would be. Anything else: None, left to graphql-core.
    """
    if (
        not isinstance(scalar, GraphQLScalarType)
        or scalar.coerce_input_literal is not None
        or "parse_literal" in vars(scalar)
        or type(scalar).parse_literal is not GraphQLScalarType.parse_literal
    ):
        return None
    read = _untyped(node)
    coerce = scalar.coerce_input_value

    def value(variables: dict[str, Any]) -> Any:
        try:
            return coerce(read(variables))
        except Exception:  # as graphql-core's coerce_input_literal: not a value, and the
            return Undefined  # request falls back, counted (view.run_prepared)

    return value


def _untyped(node: ValueNode) -> Callable[[dict[str, Any]], Any]:
    """value_from_ast_untyped(node, variables), as a function of the variables."""
    if isinstance(node, ObjectValueNode):
        members = [(field.name.value, _untyped(field.value)) for field in node.fields]
        return lambda variables: {name: read(variables) for name, read in members}
    if isinstance(node, ListValueNode):
        items = [_untyped(item) for item in node.values]
        return lambda variables: [read(variables) for read in items]
    if isinstance(node, VariableNode):
        name = node.name.value
        return lambda variables: variables.get(name, Undefined)
    constant = value_from_ast_untyped(node)  # a scalar literal: an immutable value
    return lambda _variables: constant


def _python_names(field: GraphQLField | None) -> dict[str, str] | None:
    """The resolver's keyword of each argument, or None if Strawberry would do more than pass them on."""
    if field is None:
        return None
    found = strawberry_definition(field.extensions)
    if found is None or found.extensions or found.permission_classes:
        return None
    names = {}
    for name, argument in field.args.items():
        known = strawberry_definition(argument.extensions)
        if (
            known is None
            or isinstance(known.type, StrawberryMaybe)  # wrapped in Some by Strawberry
            or not isinstance(scalar := get_nullable_type(argument.type), GraphQLScalarType)
            or scalar.name not in _PASSED_ON
        ):
            return None
        names[name] = known.python_name
    if len(names) != len(found.arguments):
        return None
    return names
