"""The page plan's compiler: `Compiler(executor).compile(page_type, fields)` makes a selection one function.

The function completes a page as graphql-core would, or raises `Unplanned`; a selection
it cannot cover raises `NotCompilable` while compiling.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import Any

from graphql import (
    GraphQLBoolean,
    GraphQLID,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLString,
    GraphQLUnionType,
    is_enum_type,
    is_scalar_type,
)
from graphql.pyutils import Undefined
from strawberry.resolvers import is_default_resolver

from ...compat.graphql import Fields, subfields
from ...domain.detail_codec import read_values, stored_fields
from ...domain.details import DETAIL_TYPES, LOADED
from ...store import Line

PAGE_TYPE_NAME = "RunLogPage"


class Unplanned(Exception):
    """The plan met something it does not handle; graphql-core completes the page instead."""


class NotCompilable(Exception):
    """The selection has something the plan does not cover (a resolver, a middleware...)."""


# ── the compiler ─────────────────────────────────────────────────────────────

# Leaf types whose coercion of an exact Python type is the identity; any other
# value goes through the type's own `coerce_output_value`.
_IDENTITY_WHEN: dict[Any, str] = {
    GraphQLString: "type({v}) is str",
    GraphQLID: "type({v}) is str",
    GraphQLBoolean: "type({v}) is bool",
    GraphQLInt: "type({v}) is int and -2147483648 <= {v} <= 2147483647",
}


def _leaf(gtype: Any, value: Any) -> Any:
    """graphql-core's complete_leaf_value for a value that needs coercion; anything odd gives up."""
    if value is None or value is Undefined:
        raise Unplanned
    completed = gtype.coerce_output_value(value)
    if completed is None or completed is Undefined:
        raise Unplanned
    return completed


def _give_up(*_: Any) -> Any:
    raise Unplanned


# How the compiler reads a field: an expression to complete, or the lines
# that set the field's local to its completed value.
Read = str | list[str]


class Compiler:
    """Writes one Python function per (object type, selection), from schema names only, and compiles them."""

    def __init__(self, executor: Any) -> None:
        # The executor compiling (page_plan.PageExecutor): its subfields are collected as it collects them.
        self.executor = executor
        # Strawberry's public lookups, from a graphql-core name back to its Python definition.
        self.definitions = executor.strawberry_schema
        self.names: dict[str, Any] = {
            "_leaf": _leaf,
            "Unplanned": Unplanned,
            "_give_up": _give_up,
            "_Undefined": Undefined,
            "_read_values": read_values,
        }
        self.source: list[str] = []
        self.counter = itertools.count()
        # Dispatch tables (by class, or by kind), filled with the functions once they exist.
        self.tables: list[tuple[dict[Any, Any], dict[Any, str]]] = []
        self.page_origin: type | None = None

    def compile(
        self, page_type: GraphQLObjectType, field_details_list: Fields
    ) -> Callable[[Any, Any], dict[str, Any]]:
        self.page_origin = self.origin(page_type)
        entry = self.object_function(page_type, field_details_list)
        self.text = "\n".join(self.source)
        exec(compile(self.text, "<runLog plan>", "exec"), self.names)  # noqa: S102 -- source written here, from schema names only
        for resolved, table in self.tables:
            resolved.update({cls: self.names[function] for cls, function in table.items()})
        function: Callable[[Any, Any], dict[str, Any]] = self.names[entry]
        return function

    def name(self, value: Any, prefix: str) -> str:
        key = f"{prefix}{next(self.counter)}"
        self.names[key] = value
        return key

    def object_function(self, gtype: GraphQLObjectType, field_details_list: Fields) -> str:
        """A function completing a strawberry object of `gtype`, read as the default resolver reads it."""
        cls = self.name(self.origin(gtype), "C")
        page = gtype.name == PAGE_TYPE_NAME

        def read(name: str, field_def: Any, python_name: str, details: Fields, target: str) -> Read:
            if page and name == "nodes":
                return [f"{target} = {self.nodes(field_def, details)}"]
            self.check_default_resolver(gtype, name, field_def)
            return f"o.{python_name}"

        return self.fields_function(gtype, field_details_list, "o", f"type(o) is not {cls}", read)

    def line_function(self, gtype: GraphQLObjectType, field_details_list: Fields) -> str:
        """A function completing a page's line from its stored row `r` and cursor `c` (`line_sources`)."""
        sources = getattr(self.page_origin, "line_sources", None)
        if sources is None:
            raise NotCompilable(f"{PAGE_TYPE_NAME} does not say how its lines are read")
        self.origin(gtype)

        def read(name: str, field_def: Any, python_name: str, details: Fields, target: str) -> Read:
            self.check_default_resolver(gtype, name, field_def)
            if python_name == "detail":
                return self.complete_detail(target, field_def.type, details)
            source = sources.get(python_name)
            if source is None:
                raise NotCompilable(f"{gtype.name}.{name} has no source in a stored line")
            expression, names = source
            self.names.update(names)
            return str(expression)

        line = self.name(Line, "C")
        return self.fields_function(gtype, field_details_list, "r, c", f"type(r) is not {line}", read)

    def values_function(self, gtype: GraphQLObjectType, field_details_list: Fields) -> str:
        """A function completing a detail of `gtype` from the values `detail_codec.read_values` read."""
        stored = stored_fields(self.origin(gtype))

        def read(name: str, field_def: Any, python_name: str, _details: Fields, _target: str) -> Read:
            self.check_default_resolver(gtype, name, field_def)
            if self.field(gtype, name).metadata.get(LOADED):
                return f"pg.loaded({python_name!r}, o)"
            how = stored.get(python_name)
            if how is None:
                raise NotCompilable(f"{gtype.name}.{name} is not stored")
            value = f"o[{python_name!r}]"
            if how.default is not ...:
                value = f"o.get({python_name!r}, {self.name(how.default, 'V')})"
            if how.convert is not None:
                value = f"{self.name(how.convert, 'X')}({value})"
            return value

        return self.fields_function(gtype, field_details_list, "o", "type(o) is not dict", read)

    def origin(self, gtype: GraphQLObjectType) -> type:
        origin = getattr(self.definitions.get_type_by_name(gtype.name), "origin", None)
        if not isinstance(origin, type):
            raise NotCompilable(f"{gtype.name} is not a Strawberry type")
        if gtype.is_type_of is not None:
            raise NotCompilable(f"{gtype.name} has is_type_of")
        return origin

    def field(self, gtype: GraphQLObjectType, name: str) -> Any:
        """The Strawberry field `gtype.name` is made from (None for one Strawberry did not make)."""
        return self.definitions.get_field_for_type(name, gtype.name)

    def check_default_resolver(self, gtype: GraphQLObjectType, name: str, field_def: Any) -> None:
        if not is_default_resolver(field_def.resolve):
            raise NotCompilable(f"{gtype.name}.{name} has a resolver")
        if getattr(self.field(gtype, name), "default_resolver", getattr) is not getattr:
            raise NotCompilable("the schema has a custom default resolver")

    def fields_function(
        self,
        gtype: GraphQLObjectType,
        field_details_list: Fields,
        parameters: str,
        refused: str,
        read: Callable[[str, Any, str, Fields, str], Read],
    ) -> str:
        """A function of `parameters` and the page `pg` answering the selected fields of `gtype`.

        `read(name, field_def, python_name, details, local)` gives an expression, or lines setting `local`.
        """
        grouped = subfields(self.executor, gtype, field_details_list)
        function = f"o{next(self.counter)}"
        body = [f"def {function}({parameters}, pg):", f"    if {refused}:", "        raise Unplanned"]
        keys: list[tuple[str, str]] = []
        for index, (response_key, details) in enumerate(grouped.items()):
            node = details[0].node
            field_name = node.name.value
            local = f"k{index}"
            keys.append((response_key, local))
            if field_name == "__typename":
                body.append(f"    {local} = {gtype.name!r}")
                continue
            if node.arguments:
                raise NotCompilable(f"{gtype.name}.{field_name} has arguments")
            field_def = gtype.fields.get(field_name)
            if field_def is None:
                raise NotCompilable(f"{gtype.name} has no field {field_name}")
            python_name = getattr(self.field(gtype, field_name), "python_name", None)
            if not isinstance(python_name, str) or not python_name.isidentifier():
                raise NotCompilable(f"{gtype.name}.{field_name} has no attribute name")
            found = read(field_name, field_def, python_name, details, local)
            if isinstance(found, str):
                body.append(f"    v = {found}")
                found = self.complete("v", local, field_def.type, details)
            body.extend("    " + line for line in found)
        items = ", ".join(f"{key!r}: {local}" for key, local in keys)
        body.append(f"    return {{{items}}}")
        self.source.extend([*body, ""])
        return function

    def nodes(self, field_def: Any, details: Fields) -> str:
        """The page's `nodes`, completed: each stored line by a `line_function`."""
        gtype = field_def.type
        if not (
            isinstance(gtype, GraphQLNonNull)
            and isinstance(gtype.of_type, GraphQLList)
            and isinstance(gtype.of_type.of_type, GraphQLNonNull)
            and isinstance(gtype.of_type.of_type.of_type, GraphQLObjectType)
        ):
            raise NotCompilable(f"{PAGE_TYPE_NAME}.nodes is not a list of objects")
        function = self.line_function(gtype.of_type.of_type.of_type, details)
        return f"[{function}(r, c, pg) for r, c in zip(o.lines, o.line_cursors)]"

    def complete_detail(self, target: str, gtype: Any, details: Fields) -> list[str]:
        """Lines setting `target` to the stored line `r`'s detail, as `detail_codec.read_values` reads it."""
        if not isinstance(gtype, GraphQLUnionType):
            raise NotCompilable(f"a line's detail is a {gtype}, not a union")
        by_kind: dict[str, str] = {}
        for kind, tp in DETAIL_TYPES.items():
            member = next((m for m in gtype.types if self.origin(m) is tp), None)
            if member is None:
                raise NotCompilable(f"{tp.__name__} is not a member of {gtype.name}")
            by_kind[kind.value] = self.values_function(member, details)
        table: dict[str, Any] = {}
        self.tables.append((table, by_kind))
        values = self.name(table, "K")
        objects = self.name(self.union_dispatch(gtype, details), "D")
        return [
            "v = _read_values(r.kind, r.detail)",
            "if v is None:",
            f"    {target} = None",
            "elif type(v) is dict:",
            f"    {target} = {values}.get(r.kind, _give_up)(v, pg)",
            "else:  # UnreadableDetail",
            f"    {target} = {objects}.get(type(v), _give_up)(v, pg)",
        ]

    def complete(self, value: str, target: str, gtype: Any, details: Fields) -> list[str]:
        """Lines that set `target` to `value` completed as `gtype`, or raise Unplanned."""
        nullable = not isinstance(gtype, GraphQLNonNull)
        inner = gtype if nullable else gtype.of_type
        leaf = self.leaf(value, inner, nullable)
        if leaf is not None:
            return [f"{target} = {leaf}"]
        if nullable:
            return [
                f"if {value} is None:",
                f"    {target} = None",
                "else:",
                *("    " + line for line in self.complete_nullable(value, target, inner, details)),
            ]
        if isinstance(inner, GraphQLObjectType | GraphQLList):
            # The exact-type check in what follows refuses None too.
            return self.complete_nullable(value, target, inner, details)
        return [
            f"if {value} is None:",
            "    raise Unplanned",
            *self.complete_nullable(value, target, inner, details),
        ]

    def leaf(self, value: str, gtype: Any, nullable: bool) -> str | None:
        """One expression completing a standard scalar or an enum, or None for other types."""
        # A Strawberry enum's definition names its Python enum (`origin`).
        definition = self.definitions.get_type_by_name(gtype.name) if is_enum_type(gtype) else None
        wrapped = getattr(definition, "origin", None)
        slow = f"_leaf({self.name(gtype, 'T')}, {value})"
        if nullable:
            slow = f"(None if {value} is None else {slow})"
        if isinstance(wrapped, enum.EnumMeta):
            # Strawberry's coercion scans the values: asked once per member, keyed by name (hashed in C).
            every: list[enum.Enum] = list(wrapped)
            names = self.name({m._name_: gtype.coerce_output_value(m) for m in every}, "M")
            return f"{names}[{value}._name_] if type({value}) is {self.name(wrapped, 'W')} else {slow}"
        fast = _IDENTITY_WHEN.get(gtype)
        if fast is not None:
            return f"{value} if {fast.format(v=value)} else {slow}"
        return None

    def complete_nullable(self, value: str, target: str, gtype: Any, details: Fields) -> list[str]:
        """As `complete`, for a value known not to be None."""
        if isinstance(gtype, GraphQLList):
            item = f"i{next(self.counter)}"
            of_type = gtype.of_type
            if isinstance(of_type, GraphQLNonNull) and isinstance(of_type.of_type, GraphQLObjectType):
                # The object function's exact-class check refuses None too.
                function = self.object_function(of_type.of_type, details)
            else:
                function = self.item_function(of_type, details)
            return [
                f"if type({value}) is not list:",
                "    raise Unplanned",
                f"{target} = [{function}({item}, pg) for {item} in {value}]",
            ]
        if is_scalar_type(gtype) or is_enum_type(gtype):
            coerce = self.name(gtype.coerce_output_value, "F")
            return [
                f"{target} = {coerce}({value})",
                f"if {target} is None or {target} is _Undefined:",
                "    raise Unplanned",
            ]
        if isinstance(gtype, GraphQLUnionType):
            dispatch = self.name(self.union_dispatch(gtype, details), "D")
            return [f"{target} = {dispatch}.get(type({value}), _give_up)({value}, pg)"]
        if isinstance(gtype, GraphQLObjectType):
            function = self.object_function(gtype, details)
            return [f"{target} = {function}({value}, pg)"]
        raise NotCompilable(f"no plan for a value of type {gtype}")

    def item_function(self, gtype: Any, details: Fields) -> str:
        """A function completing one list item (lists are completed item by item)."""
        function = f"e{next(self.counter)}"
        lines = self.complete("x", "r", gtype, details)
        self.source.extend(
            [f"def {function}(x, pg):", *("    " + line for line in lines), "    return r", ""]
        )
        return function

    def union_dispatch(self, union: GraphQLUnionType, details: Fields) -> dict[type, Any]:
        """Exact class → completion function, for each member type of the union."""
        origins: list[tuple[type, GraphQLObjectType]] = []
        for member in union.types:
            origin = getattr(self.definitions.get_type_by_name(member.name), "origin", None)
            if not isinstance(origin, type):
                raise NotCompilable(f"{member.name} is not a Strawberry type")
            origins.append((origin, member))
        for origin, _ in origins:
            for other, _member in origins:
                if other is not origin and issubclass(origin, other):
                    # Strawberry picks the first member matched; an exact-class table could differ.
                    raise NotCompilable(f"{union.name} has members that subclass each other")
        table = {origin: self.object_function(member, details) for origin, member in origins}
        resolved: dict[type, Any] = {}
        self.tables.append((resolved, table))
        return resolved
