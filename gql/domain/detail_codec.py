"""How a line's detail is checked, written and read as the JSON text a line stores.

The pydantic models are derived from gql/domain/details.py's Strawberry types, so a field
added there is checked, stored and served. Extra keys: refused on write, ignored on read.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

import pydantic
import strawberry
from graphql import Undefined
from strawberry.scalars import JSON
from strawberry.types import get_object_definition

# pydantic reads a TypedDict only from typing_extensions before Python 3.12.
from typing_extensions import TypedDict

from ..ids import id_problem, parse_id
from ..kinds import Kind
from .details import DETAIL_TYPES, LOADED, NAMES_A_RUN, UnreadableDetail

# ── checking and reading ─────────────────────────────────────────────────────


class DetailError(ValueError):
    """A detail that does not fit its kind's type; the message says where."""


@dataclass(frozen=True)
class _Codec:
    """How one strawberry type is checked and built from JSON."""

    # A TypedDict, extra keys ignored, by GraphQL names into Python ones: pydantic builds a
    # dict faster than a model, and this runs on every line of every page.
    reader: Any
    writer: type[pydantic.BaseModel]  # refuses extra keys
    build: Callable[[dict[str, Any]], Any]  # the reader's dict to the strawberry type
    read_json: Callable[[str | bytes], dict[str, Any]]  # pydantic-core's own, no wrapper
    # How `build` takes each stored field, by Python name, for the compiled plan to do the same.
    stored: dict[str, StoredField]


@dataclass(frozen=True)
class StoredField:
    """One stored field of a detail type, as read: its default, if it may be left out, and its conversion."""

    default: Any  # `...` when the field is required
    convert: Callable[[Any], Any] | None  # None when pydantic's value is served as it is


def _graphql_name(field: Any) -> str:
    if field.graphql_name:
        return str(field.graphql_name)
    head, *rest = str(field.python_name).split("_")
    return head + "".join(part.title() for part in rest)


def _optional_of(tp: Any) -> Any:
    """The `X` of a Python annotation `X | None`, else None."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [arg for arg in args if arg is not type(None)]
        if len(rest) > 1:
            raise TypeError(f"no JSON mapping for detail field type {tp!r}")
        return rest[0]
    return None


def _pydantic_type(tp: Any, forbid: bool, codecs: dict[type, _Codec]) -> tuple[Any, Callable[[Any], Any]]:
    """Map a detail field's Python annotation to a strict pydantic type and a builder for its value."""
    if (of := _optional_of(tp)) is not None:
        inner, build = _pydantic_type(of, forbid, codecs)
        if build is _same:
            return inner | None, _same
        return inner | None, lambda v: None if v is None else build(v)
    if typing.get_origin(tp) is list:
        inner, build = _pydantic_type(typing.get_args(tp)[0], forbid, codecs)
        return list[inner], lambda v: [build(x) for x in v]  # type: ignore[valid-type]
    if tp is strawberry.ID:
        # A writer may send an id as a number or a string; GraphQL serves it as a string.
        if forbid:  # the writer's dump (`canonical_detail`) says it as it is served
            return Annotated[pydantic.StrictStr | pydantic.StrictInt, pydantic.PlainSerializer(str)], str
        return pydantic.StrictStr | pydantic.StrictInt, str
    if tp is JSON:
        return Any, _same
    if tp is str:
        return pydantic.StrictStr, _same
    if tp is bool:
        return pydantic.StrictBool, _same
    if tp is int:
        # GraphQL's Int is 32-bit signed; a larger number could be stored but not served.
        return Annotated[pydantic.StrictInt, pydantic.Field(ge=-(2**31), lt=2**31)], _same
    if tp is float:
        return float, _same
    if tp is datetime.datetime:
        if forbid:  # as for ids: the writer's dump says the time as it is served, in UTC
            return Annotated[datetime.datetime, pydantic.PlainSerializer(_as_utc_text)], _as_utc
        return datetime.datetime, _as_utc
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp, _same
    if get_object_definition(tp) is not None:
        codec = _codec(tp, codecs)
        model = codec.writer if forbid else codec.reader
        return model, codec.build
    raise TypeError(f"no JSON mapping for detail field type {tp!r}")


def _same(value: Any) -> Any:
    return value


def _as_utc(value: datetime.datetime) -> datetime.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC)


def _as_utc_text(value: datetime.datetime) -> str:
    return _as_utc(value).isoformat()


def _codec(tp: type, codecs: dict[type, _Codec]) -> _Codec:
    if tp in codecs:
        return codecs[tp]
    definition = get_object_definition(tp, strict=True)
    annotations = typing.get_type_hints(tp)  # a field's type as Python says it, by Python name
    builders: dict[str, Callable[[Any], Any]] = {}
    defaults: dict[str, Any] = {}  # a stored field's value when the stored detail leaves it out
    readable: dict[str, Any] = {}
    writable: dict[str, Any] = {}
    for field in definition.fields:
        if field.base_resolver is not None or field.metadata.get(LOADED):
            continue  # computed or looked up, never stored
        alias = _graphql_name(field)
        annotation = annotations[field.python_name]
        default = None if _optional_of(annotation) is not None else ...
        if field.default is not dataclasses.MISSING:
            # Older lines stored without a field added since read with its default.
            default = field.default
        read_type, build = _pydantic_type(annotation, False, codecs)
        builders[field.python_name] = build
        annotated: Any = Annotated[read_type, pydantic.Field(validation_alias=alias)]
        if default is ...:
            readable[field.python_name] = annotated
        else:
            if not isinstance(default, _IMMUTABLE):
                # Shared by every line read without the field.
                raise TypeError(
                    f"{definition.name}.{field.python_name}: a stored field's default must be immutable"
                )
            defaults[field.python_name] = default
            readable[field.python_name] = NotRequired[annotated]
        write_type, _ = _pydantic_type(annotation, True, codecs)
        writable[field.python_name] = (write_type, pydantic.Field(default, alias=alias))
    # A TypedDict made from a name and fields at run time (typing's functional form).
    make_typed_dict: Any = TypedDict
    reader = make_typed_dict(f"{definition.name}Read", readable)
    reader.__pydantic_config__ = pydantic.ConfigDict(extra="ignore", strict=True)
    writer = pydantic.create_model(
        f"{definition.name}Write",
        __config__=pydantic.ConfigDict(extra="forbid", strict=True, populate_by_name=False),
        **writable,
    )

    # Only the fields that need converting are touched, on every line of every page.
    converters = tuple((name, fn) for name, fn in builders.items() if fn is not _same)
    every = len(builders)
    stored = {
        name: StoredField(defaults.get(name, ...), None if fn is _same else fn)
        for name, fn in builders.items()
    }

    def construct(values: dict[str, Any]) -> Any:
        if len(values) != every:
            values = {**defaults, **values}
        for name, fn in converters:
            values[name] = fn(values[name])
        return tp(**values)

    read_json = pydantic.TypeAdapter(reader).validator.validate_json
    codec = _Codec(reader=reader, writer=writer, build=construct, read_json=read_json, stored=stored)
    codecs[tp] = codec
    return codec


# What a default shared by every line read without its field may be.
_IMMUTABLE = (type(None), str, int, float, bool, enum.Enum)


_codecs: dict[type, _Codec] = {}
_BY_KIND: dict[Kind, _Codec] = {kind: _codec(tp, _codecs) for kind, tp in DETAIL_TYPES.items()}
# What reading a line needs, by stored kind name: read on every line of every page.
_READERS: dict[str, tuple[Callable[[Any], Any], Callable[[str | bytes], Any]]] = {
    kind.value: (codec.build, codec.read_json) for kind, codec in _BY_KIND.items()
}


def stored_fields(tp: type) -> dict[str, StoredField]:
    """The stored fields of detail type `tp` (or of a type a detail holds), by Python name."""
    return _codecs[tp].stored


def _describe(error: pydantic.ValidationError) -> str:
    """Say which field is wrong and how, in the detail's own (GraphQL) names."""
    parts = []
    for item in error.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "detail"
        kind = item["type"]
        if kind == "missing":
            parts.append(f"{where} is required")
        elif kind == "extra_forbidden":
            parts.append(f"{where} is not a field of this kind's detail")
        elif kind == "json_invalid":
            parts.append(f"not JSON ({item['msg'].removeprefix('Invalid JSON: ')})")
        else:
            msg = item["msg"]
            parts.append(f"{where}: {msg[:1].lower()}{msg[1:]}")
    more = error.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


# Detail fields that name a run (marked NAMES_A_RUN), by kind.
_RUN_ID_FIELDS: dict[Kind, tuple[tuple[str, str], ...]] = {
    kind: names
    for kind, tp in DETAIL_TYPES.items()
    if (
        names := tuple(
            (field.python_name, _graphql_name(field))
            for field in get_object_definition(tp, strict=True).fields
            if field.metadata.get(NAMES_A_RUN)
        )
    )
}


def check_detail(kind: Kind, text: str) -> None:
    """Raise DetailError unless `text` is JSON that fits `kind`'s type exactly and can be read back."""
    try:
        model = _BY_KIND[kind].writer.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise DetailError(f"detail does not fit {kind.value}: {_describe(exc)}") from None
    for name, alias in _RUN_ID_FIELDS.get(kind, ()):
        value = getattr(model, name)
        if value is not None and parse_id(value) is None:
            raise DetailError(f"detail does not fit {kind.value}: {id_problem(alias, value)}")
    read = read_detail(kind.value, text)
    if isinstance(read, UnreadableDetail):
        raise DetailError(f"detail could not be read back as written: {read.problem}")


def canonical_detail(kind: Kind, text: str) -> str:
    """`text`, a detail `check_detail` accepted, as one JSON text for every way of writing it (7 or "7")."""
    model = _BY_KIND[kind].writer.model_validate_json(text)
    return json.dumps(
        model.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def read_detail(kind_name: str, text: str | bytes | None) -> Any:
    """Build the typed detail for a stored line (text or bytes); never raises on bad data."""
    values = read_values(kind_name, text)
    if type(values) is not dict:
        return values
    try:
        return _READERS[kind_name][0](values)
    except (ValueError, OverflowError) as exc:  # a datetime out of range, say
        return _unreadable(text or "", f"does not fit {kind_name}: {exc}")


def read_values(kind_name: str, text: str | bytes | None) -> dict[str, Any] | UnreadableDetail | None:
    """As `read_detail`, but a detail that fits comes back as pydantic's values by Python name, not yet built.

    No default is filled in and nothing converted: `stored_fields` says how.
    """
    if text is None:
        return None
    read = _READERS.get(kind_name)
    if read is None:
        return _unreadable(text, f"kind {kind_name!r} is not known to this server")
    try:
        values: dict[str, Any] = read[1](text)
    except pydantic.ValidationError as exc:
        return _unreadable(text, f"does not fit {kind_name}: {_describe(exc)}")
    except (ValueError, OverflowError) as exc:
        return _unreadable(text, f"does not fit {kind_name}: {exc}")
    return values


def _unreadable(stored: str | bytes, problem: str) -> UnreadableDetail:
    if isinstance(stored, str):
        return UnreadableDetail(text=stored, problem=problem)
    try:
        return UnreadableDetail(text=stored.decode(), problem=problem)
    except UnicodeDecodeError as exc:
        return UnreadableDetail(
            # U+FFFD in place of each byte that is not UTF-8, so the rest still reads.
            text=stored.decode(errors="replace"),
            problem=f"is not UTF-8 text: byte {exc.start} is 0x{stored[exc.start]:02x}",
        )


def dump_detail(detail: Any) -> str:
    """The JSON text a detail is stored as; ValueError if it cannot be JSON."""
    try:
        return _DETAIL_ENCODER.encode(detail)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        # A detail nested about a thousand deep: the request's JSON parser,
        # higher on the stack, read it; the encoder, deeper, cannot.
        raise ValueError("it nests too deeply to be written as JSON") from None


def _undefined(value: Any) -> None:
    # A JSON literal naming a variable the request left out (`{actor: $actor}`)
    # reaches us as graphql-core's Undefined: the caller gave no value, so null.
    if value is Undefined:
        return None
    raise TypeError(f"{type(value).__name__} is not JSON")


# What json.dumps would build on every call.
_DETAIL_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_undefined
)
