"""A plan's variables and arguments, coerced as graphql-core's executor coerces them.

`Coercion(schema, operation, fields).coerce(variables)` answers the coerced variables and
each field's arguments, or None when anything does not coerce (the executor then gives the error).
An operation of leaf-typed variables gets graphql-core's steps laid out once; any other takes
graphql-core's `get_variable_values` and `get_argument_values` on each request.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from graphql import (
    Executor,
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
    get_named_type,
    get_nullable_type,
    get_variable_values,
    is_leaf_type,
    is_non_null_type,
    is_required_argument,
    print_ast,
    type_from_ast,
    value_from_ast_untyped,
)

# What a request's values come to: the coerced variables, and each field's
# arguments by GraphQL name. None: something does not coerce.
Coerced = tuple[dict[str, Any], list[dict[str, Any]]]
_IMMUTABLE = (type(None), bool, int, float, str)


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
        # graphql-core's steps for this operation, laid out; None: its functions on each request.
        # Served, they took a quarter of what graphql-core's did (docs/performance.md).
        self.steps = _steps(schema, operation, self.fields)

    def coerce(self, inputs: dict[str, Any] | None) -> Coerced | None:
        """The coerced variables and each field's arguments; None when anything does not coerce."""
        if self.steps is None:
            return self.coerce_in_general(inputs)
        variables, fields = self.steps
        coerced: dict[str, Any] = {}
        found = []
        try:
            for variable in variables:
                variable.coerce(inputs or {}, coerced)
            for arguments in fields:
                values = {}
                for argument in arguments:
                    value = argument.value(coerced)
                    if value is not Undefined:
                        values[argument.name] = value
                found.append(values)
        except _Refused:
            return None
        return coerced, found

    def coerce_in_general(self, inputs: dict[str, Any] | None) -> Coerced | None:
        """`coerce` by graphql-core's functions."""
        variables = get_variable_values(self.schema, self.operation.variable_definitions or (), inputs or {})
        if isinstance(variables, list):
            return None
        try:
            found = [get_argument_values(field, node, variables) for field, node in self.fields]
        except GraphQLError:
            return None
        return variables.coerced, found


class _Refused(Exception):
    """A value graphql-core would refuse: the request goes to the executor, for its error."""


@dataclass(frozen=True, slots=True)
class _Variable:
    """A leaf-typed variable (or a list of one), read as graphql-core's `coerce_variable_values` reads it."""

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
        # A leaf type nests no deeper than its lists: no depth to check, as graphql-core does.
        value = coerce_input_value(value, self.type)
        if value is Undefined:
            raise _Refused
        coerced[self.name] = value


@dataclass(frozen=True, slots=True)
class _Argument:
    """One argument of a field, read as graphql-core's `coerce_argument` reads it."""

    name: str  # its out_name, as graphql-core keys it
    non_null: bool
    default: Any  # Undefined when it has none
    # Read from a variable, a constant, or a JSON literal's function (at most one is set).
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
            if self.non_null and self.default is Undefined:
                raise _Refused
            return self.default
        value = variables[self.variable]
        if value is None and self.non_null:
            raise _Refused
        return value


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
        for name, declared in field.args.items():
            argument = _argument(declared.out_name or name, declared, given.get(name))
            if argument is None:
                return None
            read.append(argument)
        arguments.append(tuple(read))
    return tuple(variables), tuple(arguments)


def _variable(schema: GraphQLSchema, definition: VariableDefinitionNode) -> _Variable | None:
    type_: Any = type_from_ast(schema, definition.type)
    if type_ is None or definition.directives or not is_leaf_type(get_named_type(type_)):
        return None
    default = Undefined
    if definition.default_value is not None:
        default = coerce_input_literal(definition.default_value, type_)
        if default is Undefined or not isinstance(default, _IMMUTABLE):
            return None  # a fresh copy per request, as graphql-core makes: left to it
    return _Variable(definition.variable.name.value, type_, isinstance(type_, GraphQLNonNull), default)


def _argument(name: str, definition: GraphQLArgument, node: ValueNode | None) -> _Argument | None:
    type_: Any = definition.type
    default = definition.default_value  # the default as it is (Undefined: none)
    if definition.default is not None or not (default is Undefined or isinstance(default, _IMMUTABLE)):
        return None  # an external default graphql-core coerces, or a mutable one: left to it
    non_null = isinstance(type_, GraphQLNonNull)
    if node is None:
        if is_required_argument(definition):
            return None  # refused by validation
        return _Argument(name, non_null, default)  # its default, or left out
    if isinstance(node, VariableNode):
        return _Argument(name, non_null, default, variable=node.name.value)
    if not isinstance(get_nullable_type(type_), GraphQLScalarType):
        return None  # a list, an enum or an input object given a literal: left to graphql-core
    if isinstance(node, ListValueNode | ObjectValueNode):
        literal = _literal(get_nullable_type(type_), node)
        return None if literal is None else _Argument(name, non_null, default, literal=literal)
    constant = coerce_input_literal(node, type_)
    if constant is Undefined or not isinstance(constant, _IMMUTABLE) or (constant is None and non_null):
        return None
    return _Argument(name, non_null, default, constant=constant)


def _literal(scalar: GraphQLScalarType, node: ValueNode) -> Callable[[dict[str, Any]], Any] | None:
    """What `coerce_input_literal` answers for `node` as a `scalar`, as a function of the coerced variables.

    None (left to graphql-core) for a scalar that reads literals its own way.
    """
    if (
        scalar.coerce_input_literal is not None
        or "parse_literal" in vars(scalar)
        or type(scalar).parse_literal is not GraphQLScalarType.parse_literal
    ):
        return None
    read = _untyped(node)
    coerce = scalar.coerce_input_value

    def value(variables: dict[str, Any]) -> Any:
        try:
            return coerce(read(variables))
        except Exception:  # as coerce_input_literal: not a value; the executor says why
            return Undefined

    return value


def _untyped(node: ValueNode) -> Callable[[dict[str, Any]], Any]:
    """`value_from_ast_untyped(node, variables)`, as a function of the variables."""
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
