"""A plan's variables and arguments, coerced as graphql-core's executor coerces them.

`Coercion(schema, operation, fields).coerce(variables)` answers the coerced variables and
each field's arguments, or None when anything does not coerce (the request then goes to
the executor, for its error). Scalar-only operations get the steps laid out once.
`VariablesExecutor` refuses a variable that is null where a value is needed.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    GraphQLArgument,
    GraphQLError,
    GraphQLField,
    GraphQLInputType,
    GraphQLNonNull,
    GraphQLScalarType,
    GraphQLSchema,
    ListValueNode,
    NonNullTypeNode,
    NullValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    TypeInfo,
    Undefined,
    ValidationContext,
    ValueNode,
    VariableDefinitionNode,
    VariableNode,
    coerce_input_literal,
    coerce_input_value,
    get_argument_values,
    get_nullable_type,
    get_variable_values,
    is_non_null_type,
    is_required_argument,
    print_ast,
    type_from_ast,
    value_from_ast_untyped,
)

from ..compat.strawberry import DefaultExecutionContext

_IMMUTABLE = (type(None), bool, int, float, str)
# What a request's values come to: the coerced variables, and each field's
# arguments by GraphQL name. None: something does not coerce.
Coerced = tuple[dict[str, Any], list[dict[str, Any]]]


class _Refused(Exception):
    """A value graphql-core would refuse: the request goes to the executor, for its error."""


@dataclass(frozen=True, slots=True)
class _Variable:
    """A variable of a scalar type, coerced as graphql-core's `coerce_variable_values` coerces it."""

    name: str
    type: GraphQLInputType
    non_null: bool
    default: Any  # its coerced default; Undefined when it has none

    def coerce(self, inputs: dict[str, Any], coerced: dict[str, Any]) -> None:
        value = inputs.get(self.name, Undefined)
        if value is Undefined:
            if self.default is not Undefined:
                coerced[self.name] = self.default
            elif self.non_null:
                raise _Refused
            return
        value = coerce_input_value(value, self.type)
        if value is Undefined:
            raise _Refused
        coerced[self.name] = value


@dataclass(frozen=True, slots=True)
class _Argument:
    """One argument of a field, read as graphql-core's `get_argument_values` reads it."""

    name: str
    non_null: bool
    default: Any  # Undefined when it has none
    # How it is read from the coerced variables: a variable's name, a
    # constant, or a JSON literal's function (exactly one is set).
    variable: str | None = None
    constant: Any = Undefined
    literal: Callable[[dict[str, Any]], Any] | None = None

    def value(self, variables: dict[str, Any]) -> Any:
        """Its value; Undefined when it is left out, as the executor leaves it out."""
        if self.constant is not Undefined:
            return self.constant
        if self.literal is not None:
            value = self.literal(variables)
            if value is Undefined:
                raise _Refused
            return value
        if self.variable is None:
            return self.default
        if self.variable not in variables:
            if self.default is not Undefined:
                return self.default
            if self.non_null:
                raise _Refused
            return Undefined
        value = variables[self.variable]
        if value is None and self.non_null:
            raise _Refused
        return value


class Coercion:
    """How one operation's variables and its root fields' arguments are coerced, made once per plan."""

    def __init__(
        self,
        schema: GraphQLSchema,
        operation: OperationDefinitionNode,
        fields: Sequence[tuple[GraphQLField, FieldNode]],
    ) -> None:
        self.schema = schema
        self.operation = operation
        self.fields = tuple(fields)
        # The steps laid out, or None: graphql-core's functions on each request.
        self.steps = _steps(schema, operation, self.fields)

    def coerce(self, inputs: dict[str, Any] | None) -> Coerced | None:
        """The coerced variables and each field's arguments; None when anything does not coerce."""
        if self.steps is None:
            return self._coerce_in_general(inputs)
        variables, arguments = self.steps
        coerced: dict[str, Any] = {}
        found = []
        try:
            for variable in variables:
                variable.coerce(inputs or {}, coerced)
            for field in arguments:
                values = {}
                for argument in field:
                    value = argument.value(coerced)
                    if value is not Undefined:
                        values[argument.name] = value
                found.append(values)
        except _Refused:
            return None
        return coerced, found

    def _coerce_in_general(self, inputs: dict[str, Any] | None) -> Coerced | None:
        variables = get_variable_values(self.schema, self.operation.variable_definitions or (), inputs or {})
        if isinstance(variables, list):
            return None
        try:
            found = [get_argument_values(field, node, variables) for field, node in self.fields]
        except GraphQLError:
            return None
        return variables.coerced, found


def _steps(
    schema: GraphQLSchema,
    operation: OperationDefinitionNode,
    fields: tuple[tuple[GraphQLField, FieldNode], ...],
) -> tuple[tuple[_Variable, ...], tuple[tuple[_Argument, ...], ...]] | None:
    variables = []
    for definition in operation.variable_definitions or ():
        variable = _variable(schema, definition)
        if variable is None:
            return None
        variables.append(variable)
    arguments = []
    for field, node in fields:
        given = {a.name.value: a.value for a in node.arguments or ()}
        if given.keys() - field.args.keys():
            return None
        read = []
        for name, argument_type in field.args.items():
            argument = _argument(name, argument_type, given.get(name))
            if argument is None:
                return None
            read.append(argument)
        arguments.append(tuple(read))
    return tuple(variables), tuple(arguments)


def _variable(schema: GraphQLSchema, definition: VariableDefinitionNode) -> _Variable | None:
    type_: Any = type_from_ast(schema, definition.type)
    if type_ is None or definition.directives or not isinstance(get_nullable_type(type_), GraphQLScalarType):
        return None
    default = Undefined
    if definition.default_value is not None:
        default = coerce_input_literal(definition.default_value, type_)
        if default is Undefined or not isinstance(default, _IMMUTABLE):
            return None  # a fresh copy per request, as graphql-core makes: left to it
    name = definition.variable.name.value
    return _Variable(name, type_, isinstance(type_, GraphQLNonNull), default)


def _argument(name: str, definition: GraphQLArgument, node: ValueNode | None) -> _Argument | None:
    type_: Any = definition.type
    default = definition.default_value  # the default as it is (Undefined: none)
    if definition.default is not None or not (default is Undefined or isinstance(default, _IMMUTABLE)):
        return None  # an external default graphql-core coerces, or a mutable one: left to it
    non_null = isinstance(type_, GraphQLNonNull)
    if node is None:
        if is_required_argument(definition):
            return None  # refused by validation
        return _Argument(name, non_null, default)  # of any type: its default, or left out
    if not isinstance(get_nullable_type(type_), GraphQLScalarType):
        return None  # a list, an enum or an input object given a value: left to graphql-core
    if isinstance(node, VariableNode):
        return _Argument(name, non_null, default, variable=node.name.value)
    if isinstance(node, ListValueNode | ObjectValueNode):
        literal = _literal(get_nullable_type(type_), node)
        return None if literal is None else _Argument(name, non_null, default, literal=literal)
    constant = coerce_input_literal(node, type_)
    if constant is Undefined or not isinstance(constant, _IMMUTABLE) or (constant is None and non_null):
        return None
    return _Argument(name, non_null, default, constant=constant)


def _literal(scalar: Any, node: ListValueNode | ObjectValueNode) -> Callable[[dict[str, Any]], Any] | None:
    """What coerce_input_literal answers for `node` as a `scalar`, as a function of the coerced variables.

    None (left to graphql-core) for a scalar that parses literals its own way.
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
            return Undefined  # request goes to the executor, counted where it falls back

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


class VariablesExecutor(DefaultExecutionContext):
    """Strawberry's executor, refusing before anything runs a variable that is null where a value is needed.

    (`$r: ID = 5` may stand at `runId: ID!`; an explicit null for it is a BAD_USER_INPUT
    request error naming the variable, not a masked fault at the field.) The schema's
    `execution_context_class`, so every path that runs graphql-core has it.
    """

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
