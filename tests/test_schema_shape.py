"""The detail types: one per kind, named per the contract, described, and mutually compatible."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLUnionType,
    parse,
)

from gql.api.schema import build_schema
from gql.kinds import Kind

SCHEMA = build_schema()._schema
OPERATIONS = Path(__file__).resolve().parent.parent / "gql" / "operations"


def _pascal(wire_name: str) -> str:
    return "".join(part.title() for part in wire_name.split(".")) + "Detail"


def _detail_types() -> list[GraphQLObjectType]:
    union = SCHEMA.type_map["RunLogDetail"]
    assert isinstance(union, GraphQLUnionType)
    return list(union.types)


def test_the_union_has_one_type_per_kind_named_after_it_plus_unreadable() -> None:
    names = [t.name for t in _detail_types()]
    assert names == [_pascal(kind.value) for kind in Kind] + ["UnreadableDetail"]


def test_a_field_name_shared_by_detail_types_has_one_type_everywhere() -> None:
    seen: dict[str, set[str]] = defaultdict(set)
    for detail in _detail_types():
        for name, field in detail.fields.items():
            seen[name].add(str(field.type))
    conflicting = {name: types for name, types in seen.items() if len(types) > 1}
    assert conflicting == {}


def test_every_type_field_argument_and_enum_value_is_described() -> None:
    missing = []
    for name, named in SCHEMA.type_map.items():
        if name.startswith("__") or name in ("String", "Int", "Boolean", "ID", "Float"):
            continue
        described = isinstance(named, GraphQLNamedType) and named.description
        if not described and name not in ("Query", "Mutation", "Subscription"):
            missing.append(name)
        for field_name, field in getattr(named, "fields", {}).items():
            if not field.description:
                missing.append(f"{name}.{field_name}")
            for arg_name, arg in getattr(field, "args", {}).items():
                if not arg.description:
                    missing.append(f"{name}.{field_name}({arg_name})")
        for value_name, value in getattr(named, "values", {}).items():
            if not value.description:
                missing.append(f"{name}.{value_name}")
    assert missing == []


def test_the_shipped_fragments_select_every_field_of_every_detail_type() -> None:
    """GraphiQL's tabs and both generated clients select a detail through RunLogLineFields:
    a detail type it has no fragment for, or a field its fragment leaves out, would
    reach them as a bare `__typename` (docs/development.md, "Adding a kind")."""
    document = parse((OPERATIONS / "fragments.graphql").read_text(encoding="utf-8"))
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    [detail] = [
        s
        for s in fragments["RunLogLineFields"].selection_set.selections
        if isinstance(s, FieldNode) and s.name.value == "detail"
    ]
    assert detail.selection_set is not None
    spread = {
        fragments[s.name.value].type_condition.name.value: fragments[s.name.value]
        for s in detail.selection_set.selections
        if isinstance(s, FragmentSpreadNode)
    }
    missing = []
    for detail_type in _detail_types():
        fragment = spread.get(detail_type.name)
        if fragment is None:
            missing.append(f"no fragment on {detail_type.name} spread in RunLogLineFields.detail")
            continue
        selected = {s.name.value for s in fragment.selection_set.selections if isinstance(s, FieldNode)}
        missing += [f"{detail_type.name}.{name}" for name in detail_type.fields if name not in selected]
    assert missing == []
