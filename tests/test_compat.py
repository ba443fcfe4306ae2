"""gql/compat: each reach into a library's non-public API, checked against the installed version.

A test per reach fails when the library changes what the reach relies on.
`test_the_reaches_are_these` is the list of them (count them there), and
`test_no_module_outside_gql_compat_reaches_into_a_library` that no other
module of gql/ makes one.
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import inspect
import pathlib
import typing
from typing import Any, ClassVar

import graphql
import strawberry
from graphql import (
    GraphQLField,
    GraphQLInt,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLString,
    parse,
    validate,
)
from graphql.execution import Executor
from strawberry.resolvers import is_default_resolver

from gql import compat
from gql.api.query_shape import OVERLAP_BUDGET
from gql.api.schema import build_schema
from gql.compat import graphql as graphql_compat
from gql.compat import strawberry as strawberry_compat

GQL = pathlib.Path(__file__).resolve().parent.parent / "gql"


def test_the_reaches_are_these() -> None:
    """The inventory: one name per reach. Adding one means adding it here, with a test below.

    A helper or `*_HOOKS` tuple outside `__all__` works through the entry its module names for it.
    """
    found = {
        module.__name__.rpartition(".")[2]: sorted(module.__all__)
        for module in (
            graphql_compat,
            strawberry_compat,
        )
    }
    assert found == {
        "graphql": [
            "CompletesObjects",
            "FieldDetails",
            "bound_overlap_check",
            "subfields",
        ],
        "strawberry": [
            "BaseGraphQLTransportWSHandler",
            "BaseGraphQLWSHandler",
            "VIEW_HOOKS",
            "WebSocketAdapterBase",
            "graphql_schema",
        ],
    }
    modules = {p.stem for p in pathlib.Path(compat.__file__).parent.glob("*.py")} - {"__init__"}
    assert modules == set(found), "a module of gql/compat is missing from the inventory"


# ── nothing else reaches in ──────────────────────────────────────────────────

# The libraries gql/ builds on, by their top-level package.
LIBRARIES = frozenset(
    {
        "aiomysql",
        "aiosqlite",
        "alembic",
        "cross_web",
        "graphql",
        "greenlet",
        "h11",
        "httptools",
        "opentelemetry",
        "orjson",
        "prometheus_client",
        "pydantic",
        "pymysql",
        "sqlalchemy",
        "starlette",
        "strawberry",
        "typing_extensions",
        "uvicorn",
        "websockets",
    }
)
# The library modules gql/ may import outside gql/compat: each library's
# top-level package and the modules its documentation has users import from.
PUBLIC_MODULES = frozenset(
    {
        "alembic",  # alembic's `op` and `context`, in revisions
        "alembic.config",
        "alembic.runtime.environment",
        "alembic.runtime.migration",
        "alembic.script",
        "cross_web",
        "graphql",
        "graphql.language",  # graphql-core documents its subpackages' exports
        "graphql.pyutils",
        "opentelemetry",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.instrumentation.asgi",
        "opentelemetry.metrics",
        "opentelemetry.sdk.resources",
        "opentelemetry.sdk.trace",
        "opentelemetry.sdk.trace.export",
        "opentelemetry.trace",
        "orjson",
        "prometheus_client",
        "prometheus_client.core",  # the custom collectors' metric families ("Custom Collectors")
        "prometheus_client.exposition",
        "prometheus_client.registry",  # `Collector`, the base the same page's example extends
        "pydantic",
        "pymysql.constants",  # the converters a connection's `conv` is made of
        "pymysql.converters",
        "sqlalchemy",
        "sqlalchemy.dialects",
        "sqlalchemy.dialects.mysql",
        "sqlalchemy.dialects.sqlite",
        "sqlalchemy.engine",
        "sqlalchemy.exc",
        "sqlalchemy.ext.asyncio",
        "starlette.applications",
        "starlette.exceptions",
        "starlette.middleware",
        "starlette.middleware.cors",
        "starlette.requests",
        "starlette.responses",
        "starlette.routing",
        "starlette.types",
        "starlette.websockets",
        "strawberry",
        "strawberry.asgi",
        "strawberry.exceptions",
        "strawberry.extensions",
        "strawberry.resolvers",  # `is_default_resolver`, in its `__all__`
        "strawberry.http",
        # Strawberry's "Adding an integration" imports from it; its `__all__` names the
        # websocket adapter's exceptions.
        "strawberry.http.exceptions",
        "strawberry.scalars",
        "strawberry.types",
        "typing_extensions",
        "uvicorn",
    }
)
# Underscore names that are documented API: namedtuple's `_replace`,
# SQLAlchemy's `Row._mapping`, Python's enum `_name_`/`_value_` (sunder
# names, excluded by their shape), argparse's `_SubParsersAction`
# (the standard library's, in type annotations only), and Strawberry's
# `Info._raw_info`, graphql-core's info behind it ("If you need to access the
# original info object you can do so by accessing the `_raw_info` attribute":
# Strawberry's docs, breaking-changes/0.233.0).
DOCUMENTED_UNDERSCORE = frozenset({"_replace", "_mapping", "_SubParsersAction", "_raw_info"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and not name.endswith("_")


def _reaches(path: pathlib.Path) -> list[str]:
    """What `path` does that only gql/compat may: see the test below."""
    tree = ast.parse(path.read_text(), str(path))
    shown = path.relative_to(GQL.parent) if path.is_relative_to(GQL.parent) else path.name
    found: list[str] = []
    library_names: set[str] = set()  # names bound to a library's module
    for node in ast.walk(tree):
        where = f"{shown}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in LIBRARIES:
                if node.module not in PUBLIC_MODULES:
                    found.append(f"{where} imports from {node.module}")
                library_names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    if alias.name not in PUBLIC_MODULES:
                        found.append(f"{where} imports {alias.name}")
                    library_names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not on_self and node.attr not in DOCUMENTED_UNDERSCORE:
                found.append(f"{where} reads .{node.attr}")
        elif isinstance(node, ast.Call):
            # getattr(x, "_name"), and x.__dict__.get("_name") or the like.
            function = node.func
            if isinstance(function, ast.Name) and function.id in ("getattr", "hasattr", "setattr"):
                called, named = function.id, node.args[1:2]
            elif isinstance(function, ast.Attribute) and function.attr == "get":
                called, named = "get", node.args[:1]
            else:
                continue
            value = named[0].value if named and isinstance(named[0], ast.Constant) else None
            if isinstance(value, str) and _private(value):
                found.append(f"{where} {called}(..., {value!r})")
    for node in ast.walk(tree):
        # A library module's global overwritten (`module.NAME = ...`).
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in library_names
                ):
                    where = f"{shown}:{node.lineno}"
                    found.append(f"{where} sets {target.value.id}.{target.attr}")
    return found


def _inherited_private_names() -> list[str]:
    """Underscore members of a library's class that a gql/ subclass reads or overrides (`self._x`)."""
    found = []
    for path in sorted(GQL.rglob("*.py")):
        if "compat" in path.parts or path.name == "__main__.py" or "migrations" in path.parts:
            continue  # run as scripts, or by Alembic (their classes are Alembic's to subclass: none)
        module = importlib.import_module(".".join(path.relative_to(GQL.parent).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or not isinstance(getattr(module, node.name, None), type):
                continue
            mro = getattr(module, node.name).__mro__[1:]
            bases = [b for b in mro if b.__module__.split(".")[0] in LIBRARIES]
            for member in ast.walk(node):
                name = None
                if isinstance(member, ast.Attribute) and isinstance(member.value, ast.Name):
                    name = member.attr if member.value.id in ("self", "cls") else None
                elif isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = member.name
                if name is not None and _private(name) and any(_defines(b, name) for b in bases):
                    found.append(f"{path.relative_to(GQL.parent)}:{member.lineno} {node.name}.{name}")
    return found


def _defines(cls: type, name: str) -> bool:
    """Whether `cls` has `name` as a member, or sets it on its instances (`self.name =` in its code)."""
    if name in vars(cls):
        return True
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # a class without Python source (a C extension's)
        return False
    return f"self.{name} =" in source or f"self.{name}: " in source


# graphql-core's Executor: "created with the `build` class method ... You can pass a subclass
# as `executor_class`", and these attributes, each documented in its docstring. What it calls
# "the methods used internally for executing and completing fields" are gql/compat's.
EXECUTOR_DOCUMENTED = {"build", "schema", "operation", "fragments", "variable_values", "middleware_manager"}


# What gql/ may override or read on a library class it subclasses, by the
# library class it names as its base: the hooks that class's documentation
# invites overriding, and the members gql/compat names for the classes it
# hands out. (overridden, read): `read` None for a documented class, whose
# public members may all be read.
def _hooks() -> dict[str, tuple[frozenset[str], frozenset[str] | None]]:
    # The ASGI view's documented hooks ("Extending the view") and its `schema` option; a base
    # view's, in "Adding an integration": `run`, `get_sub_response`, `create_response`,
    # `request_adapter_class`, and the request adapter's `content_type`.
    view = {"get_context", "get_root_value", "process_result", "decode_json", "encode_json"}
    view |= {"on_ws_connect", "render_graphql_ide", "schema"}
    view |= {"run", "get_sub_response", "create_response", "request_adapter_class"}
    extension = {"on_operation", "on_validate", "on_parse", "on_execute", "on_stream_result", "resolve"}
    extension |= {"get_results"}
    documented: dict[str, set[str]] = {
        "strawberry.extensions.base_extension.SchemaExtension": extension,
        "graphql.error.graphql_error.GraphQLError": set(),
        "strawberry.extensions.query_depth_limiter.QueryDepthLimiter": set(),
        "strawberry.schema.schema.Schema": {"process_errors"},
        "cross_web.request._starlette.StarletteRequestAdapter": {"content_type"},
        # graphql-core's Executor: `build` and the attributes its docstring documents.
        "graphql.execution.executor.Executor": EXECUTOR_DOCUMENTED,
    }
    compat_named: dict[str, tuple[set[str], set[str]]] = {
        "strawberry.asgi.GraphQL": (
            view | set(strawberry_compat.VIEW_HOOKS),
            view | set(strawberry_compat.VIEW_HOOKS),
        ),
        "strawberry.asgi.ASGIWebSocketAdapter": (set(strawberry_compat.WEBSOCKET_ADAPTER_HOOKS),) * 2,
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers.BaseGraphQLTransportWSHandler": (
            set(strawberry_compat.TRANSPORT_WS_HOOKS),
        )
        * 2,
        "strawberry.subscriptions.protocols.graphql_ws.handlers.BaseGraphQLWSHandler": (
            set(strawberry_compat.WS_HOOKS),
        )
        * 2,
    }
    found = {name: (frozenset(o), None) for name, o in documented.items()}
    found.update({name: (frozenset(o), frozenset(r)) for name, (o, r) in compat_named.items()})
    return found


def _library_class(cls: type) -> type | None:
    return next((b for b in cls.__mro__ if b.__module__.split(".")[0] in LIBRARIES), None)


def _overrides_and_reads(hooks: dict[str, tuple[frozenset[str], frozenset[str] | None]]) -> list[str]:
    """What a gql/ subclass of a library class overrides or reads (`self.x`) that `hooks` does not name."""
    found = []
    for path in sorted(GQL.rglob("*.py")):
        if "compat" in path.parts or path.name == "__main__.py" or "migrations" in path.parts:
            continue
        module = importlib.import_module(".".join(path.relative_to(GQL.parent).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
            if (
                not isinstance(node, ast.ClassDef)
                or not isinstance(cls, type)
                or cls.__module__ != module.__name__
            ):
                continue
            base = _library_class(cls)
            if base is None:
                continue
            qualified = f"{base.__module__}.{base.__qualname__}"
            if qualified not in hooks:
                found.append(
                    f"{path.relative_to(GQL.parent)}:{node.lineno} {node.name} subclasses {qualified}"
                )
                continue
            overridden, read = hooks[qualified]
            library = [b for b in cls.__mro__ if b.__module__.split(".")[0] in LIBRARIES]
            for member in node.body:
                names: list[str] = []
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names = [member.name]
                elif isinstance(member, ast.Assign):
                    names = [t.id for t in member.targets if isinstance(t, ast.Name)]
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    names = [member.target.id]
                for name in names:
                    if name.startswith("__") or not any(name in vars(b) for b in library):
                        continue
                    if name not in overridden:
                        found.append(
                            f"{path.relative_to(GQL.parent)}:{member.lineno} {node.name} overrides {name}"
                        )
            if read is None:
                continue
            own = {n for b in cls.__mro__ if b.__module__.startswith("gql.") for n in vars(b)}
            for member in ast.walk(node):
                if (
                    isinstance(member, ast.Attribute)
                    and isinstance(member.value, ast.Name)
                    and member.value.id == "self"
                    and member.attr not in read
                    and member.attr not in own
                    and any(_defines(b, member.attr) for b in library)
                ):
                    found.append(
                        f"{path.relative_to(GQL.parent)}:{member.lineno} {node.name} reads {member.attr}"
                    )
    return found


def test_no_library_class_is_overridden_or_read_beyond_its_documented_hooks_outside_gql_compat() -> None:
    """A gql/ subclass of a library's class overrides and reads only what the library documents
    as a hook, or what gql/compat names (and checks against the installed version)."""
    assert _overrides_and_reads(_hooks()) == []


def test_the_override_scan_finds_an_unlisted_override() -> None:
    hooks = _hooks()
    overridden, read = hooks["strawberry.asgi.GraphQL"]
    hooks["strawberry.asgi.GraphQL"] = (overridden - {"reject_websocket"}, read)
    hooks["strawberry.extensions.base_extension.SchemaExtension"] = (frozenset(), None)
    found = [reach.partition(" ")[2] for reach in _overrides_and_reads(hooks)]
    assert "RunLogGraphQL overrides reject_websocket" in found
    assert "RequestLimits overrides on_execute" in found
    del hooks["graphql.error.graphql_error.GraphQLError"]
    assert "ClientError subclasses graphql.error.graphql_error.GraphQLError" in [
        reach.partition(" ")[2] for reach in _overrides_and_reads(hooks)
    ]


def test_no_module_outside_gql_compat_reaches_into_a_library() -> None:
    """No underscore name of another object, import from a library's undocumented module,
    `getattr` of an underscore name, overwritten library global, or library base's
    underscore member, anywhere in gql/ but gql/compat."""
    found = [
        reach
        for path in sorted(GQL.rglob("*.py"))
        if "compat" not in path.relative_to(GQL).parts
        for reach in _reaches(path)
    ]
    found += _inherited_private_names()
    assert found == []


def test_the_scan_finds_what_it_looks_for(tmp_path: pathlib.Path) -> None:
    """The scan above is not vacuous: each kind of reach it looks for is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from graphql.execution.collect_fields import FieldDetails\n"
        "from strawberry.types.base import StrawberryList\n"
        "from graphql.validation.rules import overlapping_fields_can_be_merged as o\n"
        "schema._schema\n"
        "getattr(pool, '_max_overflow', None)\n"
        "vars(pool).get('_queue')\n"
        "o.MAX_COMPLEXITY_BUDGET = 1\n"
        "line._replace(id=1)\n"
    )
    # And a library's private attribute through `self`, in a subclass.
    assert _defines(strawberry.Schema, "_schema")
    assert not _defines(strawberry.Schema, "_not_strawberrys")
    found = [reach.partition(" ")[2] for reach in _reaches(sample)]
    assert found == [
        "imports from graphql.execution.collect_fields",
        "imports from strawberry.types.base",
        "imports from graphql.validation.rules",
        "reads ._schema",
        "getattr(..., '_max_overflow')",
        "get(..., '_queue')",
        "sets o.MAX_COMPLEXITY_BUDGET",
    ]


# ── Strawberry ───────────────────────────────────────────────────────────────


@strawberry.enum
class CompatColour(enum.Enum):
    RED = "red"


@strawberry.type
class CompatThing:
    plain: int
    colour: CompatColour

    @strawberry.field
    def resolved(self) -> int:
        return 1


seen_info: list[Any] = []


@strawberry.type
class CompatQuery:
    @strawberry.field
    def thing(self, info: strawberry.Info, count: int = 1) -> CompatThing:
        seen_info.append(info._raw_info)
        return CompatThing(plain=count, colour=CompatColour.RED)


def test_graphql_schema_is_the_schema_strawberry_executes_against() -> None:
    schema = build_schema()
    found = strawberry_compat.graphql_schema(schema)
    assert isinstance(found, GraphQLSchema)
    assert found.query_type is not None and found.query_type.name == "Query"
    assert "RunLogPage" in found.type_map
    assert validate(found, parse("{ __typename }")) == []


def test_strawberrys_documented_raw_info_is_graphql_cores_info_with_field_nodes_and_fragments() -> None:
    seen_info.clear()
    schema = strawberry.Schema(query=CompatQuery)
    result = schema.execute_sync("query { thing { ...F } } fragment F on CompatThing { plain }")
    assert result.errors is None
    (raw,) = seen_info
    assert raw.field_nodes[0].name.value == "thing"
    assert list(raw.fragments) == ["F"]


def test_strawberry_executes_on_a_graphql_core_executor_with_its_extensions_and_variables() -> None:
    """`Schema(execution_context_class=)` takes graphql-core's documented Executor, as VariablesExecutor
    is: Strawberry passes the request's extensions to its constructor, and Info reads its variables."""
    made: list[Any] = []

    class Plain(Executor):
        def __init__(self, *args: Any, operation_extensions: Any = None, **kwargs: Any) -> None:
            made.append(operation_extensions)
            super().__init__(*args, **kwargs)

    seen: list[Any] = []

    @strawberry.type
    class Query:
        @strawberry.field
        def echo(self, info: strawberry.Info, n: int) -> int:
            seen.append(info.variable_values)
            return n

    schema = strawberry.Schema(query=Query, execution_context_class=Plain)
    result = schema.execute_sync(
        "query Q($n: Int!) { echo(n: $n) }", variable_values={"n": 3}, operation_extensions={"x": 1}
    )
    assert result.errors is None and result.data == {"echo": 3}
    assert made == [{"x": 1}]
    assert seen == [{"n": 3}]


def test_strawberrys_public_lookups_map_graphql_core_names_back_to_definitions() -> None:
    """gql/api/execution's plans read a type's Python class, a field's attribute and an argument's keyword
    through `Schema.get_type_by_name`, `get_field_for_type` and the name converter's `from_argument`."""
    schema = strawberry.Schema(query=CompatQuery)
    assert schema.get_type_by_name("CompatThing").origin is CompatThing  # type: ignore[union-attr]
    plain = schema.get_field_for_type("plain", "CompatThing")
    assert plain is not None and plain.python_name == "plain"
    thing = schema.get_field_for_type("thing", "CompatQuery")
    assert thing is not None
    (count,) = thing.arguments
    assert schema.config.name_converter.from_argument(count) == "count" and count.python_name == "count"
    # An enum's Python class is its definition's `origin` (compiler.leaf).
    assert schema.get_type_by_name("CompatColour").origin is CompatColour  # type: ignore[union-attr]
    assert schema.get_field_for_type("missing", "CompatThing") is None


def test_strawberrys_public_is_default_resolver_tells_an_attribute_read_from_a_resolver() -> None:
    """gql/api/execution/compiler.py plans only the fields Strawberry's public call says read an attribute."""
    gschema = strawberry_compat.graphql_schema(strawberry.Schema(query=CompatQuery))
    thing = gschema.type_map["CompatThing"]
    assert isinstance(thing, GraphQLObjectType)
    assert is_default_resolver(thing.fields["plain"].resolve)
    assert not is_default_resolver(thing.fields["resolved"].resolve)


def test_strawberrys_view_adapters_and_handlers_have_what_gql_overrides_and_reads() -> None:
    from cross_web import StarletteRequestAdapter
    from strawberry.asgi import GraphQL

    for cls, hooks in (
        (GraphQL, strawberry_compat.VIEW_HOOKS),
        (strawberry_compat.WebSocketAdapterBase, strawberry_compat.WEBSOCKET_ADAPTER_HOOKS),
        (strawberry_compat.BaseGraphQLTransportWSHandler, strawberry_compat.TRANSPORT_WS_HOOKS),
        (strawberry_compat.BaseGraphQLWSHandler, strawberry_compat.WS_HOOKS),
    ):
        missing = [name for name in hooks if not _has(cls, name)]
        assert missing == [], cls
    # The view names its adapters and handlers: what gql/edge/view.py sets.
    assert GraphQL.websocket_adapter_class is strawberry_compat.WebSocketAdapterBase
    assert typing.get_origin(GraphQL.graphql_ws_handler_class) is strawberry_compat.BaseGraphQLWSHandler
    assert (
        typing.get_origin(GraphQL.graphql_transport_ws_handler_class)
        is strawberry_compat.BaseGraphQLTransportWSHandler
    )
    assert (
        issubclass(StarletteRequestAdapter, object)
        and GraphQL.request_adapter_class is StarletteRequestAdapter
    )
    # Their signatures, as gql/ calls and overrides them.
    assert list(inspect.signature(GraphQL.run).parameters) == ["self", "request", "context", "root_value"]
    handler = strawberry_compat.BaseGraphQLWSHandler
    assert all(inspect.iscoroutinefunction(getattr(handler, n)) for n in ("handle", "handle_start"))


def _has(cls: type, name: str) -> bool:
    """Whether `cls` or a base of it has `name` as a member or sets it on its instances."""
    return any(_defines(base, name) for base in cls.__mro__ if base is not object)


# ── graphql-core ─────────────────────────────────────────────────────────────

_PAGE = GraphQLObjectType("Page", {"n": GraphQLField(GraphQLInt), "s": GraphQLField(GraphQLString)})
_SCHEMA = GraphQLSchema(
    GraphQLObjectType("Query", {"page": GraphQLField(_PAGE, resolve=lambda *_: {"n": 1})})
)


class _Completing(graphql_compat.CompletesObjects, Executor):
    completed_type = "Page"
    seen: ClassVar[list[Any]] = []

    def complete_object(
        self, return_type: GraphQLObjectType, field_details_list: list[Any], result: Any
    ) -> Any:
        collected = graphql_compat.subfields(self, return_type, field_details_list)
        _Completing.seen.append(
            (
                [type(d) for d in field_details_list],
                graphql_compat.deferred_or_fragment_arguments(field_details_list),
                list(collected),
            )
        )
        return {"n": 42} if result["n"] == 1 else self.LEFT


def _execute(text: str, **kwargs: Any) -> Any:
    _Completing.seen.clear()
    return graphql.execute(_SCHEMA, parse(text), executor_class=_Completing, **kwargs)


def test_completes_objects_overrides_graphql_cores_complete_object_value() -> None:
    parameters = list(inspect.signature(Executor.complete_object_value).parameters)
    assert parameters == [
        "self",
        "return_type",
        "field_details_list",
        "info",
        "path",
        "result",
        "position_context",
    ]
    assert _execute("{ page { n } }").data == {"page": {"n": 42}}
    [(kinds, deferred, collected)] = _Completing.seen
    assert kinds == [graphql_compat.FieldDetails]
    assert deferred is False
    assert collected == ["n"]


def test_subfields_honours_skip_and_aliases() -> None:
    _execute("query($no: Boolean!) { page { a: n s @skip(if: $no) } }", variable_values={"no": True})
    assert _Completing.seen[0][2] == ["a"]


def test_left_hands_the_value_back_to_graphql_core() -> None:
    schema = GraphQLSchema(
        GraphQLObjectType("Query", {"page": GraphQLField(_PAGE, resolve=lambda *_: {"n": 2, "s": "x"})})
    )
    _Completing.seen.clear()
    result = graphql.execute(schema, parse("{ page { n s } }"), executor_class=_Completing)
    assert result.data == {"page": {"n": 2, "s": "x"}}


def test_graphql_cores_executor_documents_what_gql_overrides_and_reads() -> None:
    """What EXECUTOR_DOCUMENTED names is on graphql-core's Executor, which gql/api/execution extends."""
    assert graphql.Executor is Executor and "Executor" in graphql.__all__
    documented = inspect.getsource(Executor)
    for name in EXECUTOR_DOCUMENTED - {"build"}:
        assert name in Executor.__annotations__, name
        assert f":param {name}:" in documented, name
    assert ":meth:`build`" in (Executor.__doc__ or "")
    assert "middlewares" in graphql.MiddlewareManager.__slots__
    build = inspect.signature(Executor.build)
    assert list(build.parameters)[:2] == ["schema", "document"]
    built = Executor.build(_SCHEMA, parse("{ page { n } }"))
    assert isinstance(built, Executor) and built.operation.operation.value == "query"
    assert isinstance(Executor.build(_SCHEMA, parse("query($x: Int!) { page { n } }")), list)


def test_field_details_hold_defer_usage_and_fragment_arguments() -> None:
    assert graphql_compat.FieldDetails._fields == ("node", "defer_usage", "fragment_variable_values")


def test_bound_overlap_check_bounds_the_rule_and_its_error_is_recognised() -> None:
    from graphql.validation.rules import overlapping_fields_can_be_merged as rule

    document = parse("{ " + " ".join("n: n" for _ in range(50)) + " }")  # within either budget
    schema = GraphQLSchema(GraphQLObjectType("Query", {"n": GraphQLField(GraphQLInt)}))
    before = rule.MAX_COMPLEXITY_BUDGET
    try:
        graphql_compat.bound_overlap_check(10)
        assert rule.MAX_COMPLEXITY_BUDGET == 10
        errors = validate(schema, document)
    finally:
        graphql_compat.bound_overlap_check(before)
    assert [graphql_compat.overlap_check_aborted(e) for e in errors] == [True]
    assert validate(schema, document) == []
    assert not graphql_compat.overlap_check_aborted(graphql.GraphQLError("Cannot query field 'x'"))
    assert before in (OVERLAP_BUDGET, 500_000)
