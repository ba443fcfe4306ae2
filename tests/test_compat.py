"""gql/compat: each reach into a library's non-public API, checked against the installed version.

A test per reach fails when the library changes what the reach relies on.
`test_the_reaches_are_these` is the list of them (count them there), and
`test_no_module_outside_gql_compat_reaches_into_a_library` that no other
module of gql/ makes one.
"""

from __future__ import annotations

import ast
import asyncio
import enum
import importlib
import importlib.util
import inspect
import pathlib
from typing import Any, ClassVar

import graphql
import pytest
import sqlalchemy as sa
import strawberry
import uvicorn
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
from sqlalchemy.ext.asyncio import create_async_engine
from strawberry.extensions import SchemaExtension
from strawberry.http.async_base_view import AsyncBaseHTTPView

from gql import compat
from gql.compat import alembic as alembic_compat
from gql.compat import graphql as graphql_compat
from gql.compat import sqlalchemy as sqlalchemy_compat
from gql.compat import strawberry as strawberry_compat
from gql.compat import uvicorn as uvicorn_compat
from gql.query_shape import OVERLAP_BUDGET
from gql.schema import build_schema
from gql.view import RunLogGraphQL

from .conftest import Backend

GQL = pathlib.Path(__file__).resolve().parent.parent / "gql"


def test_the_reaches_are_these() -> None:
    """The inventory: one name per reach. Adding one means adding it here, with a test below."""
    found = {
        module.__name__.rpartition(".")[2]: sorted(module.__all__)
        for module in (
            alembic_compat,
            graphql_compat,
            sqlalchemy_compat,
            strawberry_compat,
            uvicorn_compat,
        )
    }
    assert found == {
        "alembic": ["adopt_and_upgrade_steps", "upgrade_steps"],
        "graphql": [
            "CompletesObjects",
            "FieldDetails",
            "LEFT",
            "bound_overlap_check",
            "collect_root_fields",
            "collect_subfields",
            "deferred_or_fragment_arguments",
            "has_middleware",
            "overlap_check_aborted",
        ],
        "sqlalchemy": ["pool_waiting"],
        "strawberry": [
            "DefaultExecutionContext",
            "graphql_schema",
            "is_default_resolver",
            "parse_and_validate",
            "resolve_info",
            "strawberry_definition",
        ],
        "uvicorn": [
            "HTTPProtocolBase",
            "HTTPTOOLS_HOOKS",
            "HTTP_HOOKS",
            "SUPERVISOR_HOOKS",
            "WEBSOCKET_HOOKS",
            "WebSocketProtocolBase",
            "supervisor_class",
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
        "prometheus_client.exposition",
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
        "strawberry.execution",
        "strawberry.extensions",
        "strawberry.http",
        "strawberry.http.exceptions",
        "strawberry.http.websocket_origin",
        "strawberry.scalars",
        "strawberry.schema.exceptions",
        # The handlers a view's `graphql_transport_ws_handler_class` and
        # `graphql_ws_handler_class` name, and their messages.
        "strawberry.subscriptions.protocols.graphql_transport_ws.handlers",
        "strawberry.subscriptions.protocols.graphql_transport_ws.types",
        "strawberry.subscriptions.protocols.graphql_ws.handlers",
        "strawberry.subscriptions.protocols.graphql_ws.types",
        "strawberry.types",
        # Strawberry's type definitions (lists, optionals, enums, Maybe),
        # which `get_object_definition`'s fields are made of.
        "strawberry.types.base",
        "strawberry.types.enum",
        "strawberry.types.nodes",
        "strawberry.types.unset",
        "typing_extensions",
        "uvicorn",
    }
)
# Underscore names that are documented API: namedtuple's `_replace`,
# SQLAlchemy's `Row._mapping`, Python's enum `_name_`/`_value_` (sunder
# names, excluded by their shape), and argparse's `_SubParsersAction`
# (the standard library's, in type annotations only).
DOCUMENTED_UNDERSCORE = frozenset({"_replace", "_mapping", "_SubParsersAction"})


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
        seen_info.append(strawberry_compat.resolve_info(info))
        return CompatThing(plain=count, colour=CompatColour.RED)


def test_graphql_schema_is_the_schema_strawberry_executes_against() -> None:
    schema = build_schema()
    found = strawberry_compat.graphql_schema(schema)
    assert isinstance(found, GraphQLSchema)
    assert found.query_type is not None and found.query_type.name == "Query"
    assert "RunLogPage" in found.type_map
    assert validate(found, parse("{ __typename }")) == []


def test_resolve_info_is_graphql_cores_info_with_field_nodes_and_fragments() -> None:
    seen_info.clear()
    schema = strawberry.Schema(query=CompatQuery)
    result = schema.execute_sync("query { thing { ...F } } fragment F on CompatThing { plain }")
    assert result.errors is None
    (raw,) = seen_info
    assert raw.field_nodes[0].name.value == "thing"
    assert list(raw.fragments) == ["F"]


def test_default_execution_context_is_strawberrys_default() -> None:
    schema = strawberry.Schema(query=CompatQuery)
    assert schema.execution_context_class is strawberry_compat.DefaultExecutionContext
    assert issubclass(strawberry_compat.DefaultExecutionContext, Executor)


def test_strawberry_definition_maps_graphql_core_back_to_strawberry() -> None:
    gschema = strawberry_compat.graphql_schema(strawberry.Schema(query=CompatQuery))
    thing = gschema.type_map["CompatThing"]
    assert isinstance(thing, GraphQLObjectType)
    assert strawberry_compat.strawberry_definition(thing.extensions).origin is CompatThing
    assert strawberry_compat.strawberry_definition(thing.fields["plain"].extensions).python_name == "plain"
    query = gschema.type_map["CompatQuery"]
    assert isinstance(query, GraphQLObjectType)
    argument = strawberry_compat.strawberry_definition(query.fields["thing"].args["count"].extensions)
    assert argument.python_name == "count"
    # gql/engine/page_plan.py and gql/details.py read an enum's Python class as the
    # definition's `origin`, which is what Strawberry's enum type wraps.
    colour = gschema.type_map["CompatColour"]
    assert strawberry_compat.strawberry_definition(colour.extensions).origin is CompatColour
    assert colour.wrapped_cls is CompatColour  # type: ignore[attr-defined]
    assert strawberry_compat.strawberry_definition(None) is None


def test_is_default_resolver_tells_an_attribute_read_from_a_resolver() -> None:
    gschema = strawberry_compat.graphql_schema(strawberry.Schema(query=CompatQuery))
    thing = gschema.type_map["CompatThing"]
    assert isinstance(thing, GraphQLObjectType)
    assert strawberry_compat.is_default_resolver(thing.fields["plain"].resolve)
    assert not strawberry_compat.is_default_resolver(thing.fields["resolved"].resolve)


class _Hooks(SchemaExtension):
    """Records the hooks a request's pipeline runs, and what parsing and validation left."""

    seen: ClassVar[list[str]] = []

    def on_operation(self) -> Any:
        _Hooks.seen.append("operation")
        yield

    def on_parse(self) -> Any:
        yield
        _Hooks.seen.append(f"parsed {self.execution_context.graphql_document is not None}")

    def on_validate(self) -> Any:
        yield
        errors = self.execution_context.pre_execution_errors or []
        _Hooks.seen.append(f"validated, {len(errors)} errors")

    def on_execute(self) -> Any:
        _Hooks.seen.append("execute")
        yield


def test_parse_and_validate_runs_the_pipeline_up_to_execution_and_no_further() -> None:
    schema = strawberry.Schema(query=CompatQuery, extensions=[_Hooks])
    seen_info.clear()
    _Hooks.seen.clear()
    asyncio.run(schema.execute("query Q { thing { plain } }", operation_name="Q"))
    executed = list(_Hooks.seen)
    assert executed[-1] == "execute" and len(seen_info) == 1
    _Hooks.seen.clear()
    asyncio.run(strawberry_compat.parse_and_validate(schema, "query Q { thing { plain } }", "Q"))
    assert _Hooks.seen == executed[:-1] == ["operation", "parsed True", "validated, 0 errors"]
    assert len(seen_info) == 1  # the resolver did not run
    _Hooks.seen.clear()
    asyncio.run(strawberry_compat.parse_and_validate(schema, "{ thing { nope } }", None))
    assert _Hooks.seen == ["operation", "parsed True", "validated, 1 errors"]


def test_process_errors_is_all_strawberrys_private_process_errors_does_here() -> None:
    """run_prepared calls the public `process_errors`; Strawberry's `_process_errors` would only
    drop field suggestions as well, which this schema's config does not ask for."""
    schema = build_schema()
    assert schema.config.disable_field_suggestions is False
    error = graphql.GraphQLError("Cannot query field 'x' on type 'Query'. Did you mean 'y'?")
    schema._process_errors([error])
    assert error.message == "Cannot query field 'x' on type 'Query'. Did you mean 'y'?"


def test_the_views_handle_errors_hook_is_strawberrys_empty_one() -> None:
    """run_prepared does not call `_handle_errors`: a hook this view leaves empty."""
    assert RunLogGraphQL._handle_errors is AsyncBaseHTTPView._handle_errors
    response: dict[str, Any] = {"data": None}
    view: Any = object.__new__(RunLogGraphQL)
    assert view._handle_errors([graphql.GraphQLError("x")], response) is None
    assert response == {"data": None}


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
        collected = graphql_compat.collect_subfields(self, return_type, field_details_list)
        _Completing.seen.append(
            (
                [type(d) for d in field_details_list],
                graphql_compat.has_middleware(self),
                graphql_compat.deferred_or_fragment_arguments(field_details_list),
                list(collected),
            )
        )
        return {"n": 42} if result["n"] == 1 else graphql_compat.LEFT


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
    [(kinds, middleware, deferred, collected)] = _Completing.seen
    assert kinds == [graphql_compat.FieldDetails]
    assert (middleware, deferred) == (False, False)
    assert collected == ["n"]


def test_collect_subfields_honours_skip_and_aliases() -> None:
    _execute("query($no: Boolean!) { page { a: n s @skip(if: $no) } }", variable_values={"no": True})
    assert _Completing.seen[0][3] == ["a"]


def test_collect_root_fields_groups_the_root_as_execution_does() -> None:
    document = parse("query($no: Boolean!) { a: page { n } a: page { s } page @skip(if: $no) { n } }")
    executor = Executor.build(_SCHEMA, document, raw_variable_values={"no": True})
    assert isinstance(executor, Executor)
    grouped = graphql_compat.collect_root_fields(executor)
    assert list(grouped) == ["a"]
    assert [d.node.selection_set.selections[0].name.value for d in grouped["a"]] == ["n", "s"]
    # The very groups the executor completes: the same field nodes.
    _execute("query($no: Boolean!) { a: page { n } }", variable_values={"no": True})
    completing = Executor.build(_SCHEMA, parse("{ page { n } }"))
    assert isinstance(completing, Executor)
    (group,) = graphql_compat.collect_root_fields(completing).values()
    assert group[0].node is completing.operation.selection_set.selections[0]


def test_has_middleware_sees_a_resolver_middleware() -> None:
    def middleware(resolve: Any, source: Any, info: Any, **args: Any) -> Any:
        return resolve(source, info, **args)

    _execute("{ page { n } }", middleware=[middleware])
    assert _Completing.seen[0][1] is True


def test_left_hands_the_value_back_to_graphql_core() -> None:
    schema = GraphQLSchema(
        GraphQLObjectType("Query", {"page": GraphQLField(_PAGE, resolve=lambda *_: {"n": 2, "s": "x"})})
    )
    _Completing.seen.clear()
    result = graphql.execute(schema, parse("{ page { n s } }"), executor_class=_Completing)
    assert result.data == {"page": {"n": 2, "s": "x"}}


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


# ── uvicorn ──────────────────────────────────────────────────────────────────


def _has(cls: type, name: str) -> bool:
    """Whether `cls` or a base of it has `name` as a member or sets it on its instances."""
    return any(_defines(base, name) for base in cls.__mro__ if base is not object)


def _http_protocols() -> list[type]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    found: list[type] = [H11Protocol]
    if importlib.util.find_spec("httptools") is not None:  # uvicorn's parser when installed
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        found.append(HttpToolsProtocol)
    return found


def test_uvicorns_http_protocols_have_what_server_py_overrides_and_reads() -> None:
    assert uvicorn_compat.HTTPProtocolBase in _http_protocols()
    for protocol in _http_protocols():
        missing = [name for name in uvicorn_compat.HTTP_HOOKS if not _has(protocol, name)]
        assert missing == [], protocol
        assert list(inspect.signature(protocol.send_400_response).parameters) == ["self", "msg"]
        methods = ("on_response_complete", "shutdown", "connection_made", "data_received", "connection_lost")
        assert all(callable(getattr(protocol, name)) for name in methods)


def test_uvicorns_httptools_protocol_has_what_the_host_rules_override_and_read() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    missing = [name for name in uvicorn_compat.HTTPTOOLS_HOOKS if not _has(HttpToolsProtocol, name)]
    assert missing == []
    # The scope's headers are the protocol's own list, so a Host replaced there is the app's.
    assert '"headers": self.headers' in inspect.getsource(HttpToolsProtocol.on_message_begin)
    # An exception from the callback reaches uvicorn as an HttpParserError, answered by send_400_response.
    assert "except httptools.HttpParserError" in inspect.getsource(HttpToolsProtocol.data_received)


def test_h11_refuses_a_missing_or_second_host_itself() -> None:
    import h11

    for headers in ([], [("Host", "a.example"), ("Host", "b.example")]):
        with pytest.raises(h11.LocalProtocolError, match="Host"):
            h11.Request(method="GET", target="/", headers=headers)


def test_uvicorns_http_protocol_reads_limit_concurrency_from_the_instance() -> None:
    # gql/server.py makes it a property: uvicorn must read it on the instance, per request.
    for protocol in _http_protocols():
        assert "self.limit_concurrency" in inspect.getsource(protocol)


def test_uvicorns_websocket_protocol_has_what_server_py_overrides_and_reads() -> None:
    protocol = uvicorn_compat.WebSocketProtocolBase
    missing = [name for name in uvicorn_compat.WEBSOCKET_HOOKS if not _has(protocol, name)]
    assert missing == []
    assert inspect.iscoroutinefunction(protocol.send)
    assert list(inspect.signature(protocol.keepalive_timeout).parameters) == ["self"]


def test_the_supervisor_is_uvicorns_and_has_what_cli_py_overrides() -> None:
    supervisor = uvicorn_compat.supervisor_class()
    assert supervisor.__module__.startswith("uvicorn.supervisors")
    missing = [name for name in uvicorn_compat.SUPERVISOR_HOOKS if not _has(supervisor, name)]
    assert missing == []
    assert list(inspect.signature(supervisor).parameters)[:2] == ["config", "sockets"]
    assert callable(uvicorn.Config.bind_socket)


# ── SQLAlchemy ───────────────────────────────────────────────────────────────


def test_pool_waiting(backend: Backend) -> None:
    async def main() -> list[int]:
        engine = create_async_engine(backend.url, pool_size=1, max_overflow=2, pool_timeout=30)
        pool = engine.sync_engine.pool
        waiting = [sqlalchemy_compat.pool_waiting(pool)]
        try:
            held = [await engine.connect() for _ in range(3)]  # the pool's size and overflow
            more = asyncio.ensure_future(engine.connect())
            for _ in range(10_000):  # until the fourth is waiting on the pool's queue
                if sqlalchemy_compat.pool_waiting(pool):
                    break
                await asyncio.sleep(0)
            waiting.append(sqlalchemy_compat.pool_waiting(pool))
            await held[0].close()
            await (await more).close()
            for conn in held[1:]:
                await conn.close()
            waiting.append(sqlalchemy_compat.pool_waiting(pool))
            return waiting
        finally:
            await engine.dispose()

    assert asyncio.run(main()) == [0, 1, 0]
    # A pool of another kind has no queue to wait on.
    assert sqlalchemy_compat.pool_waiting(sa.pool.NullPool(lambda: None)) == 0


# ── Alembic ──────────────────────────────────────────────────────────────────


def test_the_steps_alembics_stamp_and_upgrade_run() -> None:
    from gql.migrations import HEAD
    from gql.migrations.runner import scripts

    script = scripts()
    steps = alembic_compat.upgrade_steps(script, None)
    assert [step.revision.revision for step in steps] == sorted(s.revision for s in script.walk_revisions())
    assert alembic_compat.upgrade_steps(script, HEAD) == []
    adopted = alembic_compat.adopt_and_upgrade_steps(script, "0004")
    later = sorted(s.revision for s in script.walk_revisions() if s.revision > "0004")
    assert [type(step).__name__ for step in adopted] == ["StampStep"] + ["RevisionStep"] * len(later)
    assert [step.revision.revision for step in adopted[1:]] == later
