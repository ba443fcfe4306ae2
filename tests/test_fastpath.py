"""The compiled page plan answers exactly what graphql-core answers.

Queries are generated over the schema (aliases, repeated fields, inline and
named fragments, fragments on the union, `__typename`, @skip/@include with
literals and variables, every runLog argument, bad arguments), and pages are
generated rows (every kind, null and unreadable details, unknown kinds, null
step ids and phases). Each query runs on two schemas built the same way, one
with the plan and one with graphql-core alone, and the two answers must be the
same JSON, key order included, errors included.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import hypothesis_graphql
import orjson
import pytest
from graphql import (
    ArgumentNode,
    GraphQLObjectType,
    GraphQLUnionType,
    NullValueNode,
    OperationDefinitionNode,
    StringValueNode,
    Visitor,
    parse,
    print_ast,
    visit,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gql import fastpath, graphiql, store
from gql.app import _MaskUnexpected
from gql.auth import Caller, Policy, Role
from gql.details import dump_detail
from gql.kinds import Kind
from gql.schema import Context, build_schema
from gql.settings import Settings

from .conftest import Backend
from .details_examples import EXAMPLES

FAST = build_schema([_MaskUnexpected], fast_path=True)
SLOW = build_schema([_MaskUnexpected], fast_path=False)
TYPES = FAST._schema.type_map
UNION = TYPES["RunLogDetail"]
assert isinstance(UNION, GraphQLUnionType)

READER = "reader-token-0123456789"
START = datetime.datetime(2026, 4, 1, tzinfo=datetime.UTC)

# ── rows ─────────────────────────────────────────────────────────────────────


def _thin(example: dict[str, Any], keep: list[bool]) -> dict[str, Any]:
    """The example with some optional keys left out (read back as null)."""
    required = {"to", "text", "concurrencyKey", "blockingRunId", "condition", "matched", "via", "caps"}
    return {k: v for (k, v), kept in zip(example.items(), keep, strict=False) if kept or k in required}


@st.composite
def stored_detail(draw: st.DrawFn, kind: str) -> str | None:
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return None
    if choice == 1:
        return draw(st.sampled_from(["not json {", "[1, 2]", '{"to": 3}', "null", '"text"', "{}"]))
    known = store_kind(kind)
    if known is None:
        return '{"to": "mars"}'
    example = EXAMPLES[known]
    if known is Kind.RUN_BLOCKED:
        # An odd id names a run the fake store has; an even one, or not a number, does not.
        example = {**example, "blockingRunId": draw(st.sampled_from([37, 38, "41", "x"]))}
    keep = draw(st.lists(st.booleans(), min_size=len(example), max_size=len(example)))
    return dump_detail(_thin(example, keep))


def store_kind(name: str) -> Kind | None:
    try:
        return Kind(name)
    except ValueError:
        return None


@st.composite
def rows(draw: st.DrawFn) -> list[store.Line]:
    count = draw(st.integers(0, 30))
    lines = []
    for i in range(count):
        kind = draw(st.sampled_from([k.value for k in Kind] + ["run.teleported"]))
        lines.append(
            store.Line(
                id=1000 - i,
                run_id=7,
                step_id=draw(st.none() | st.integers(1, 2**31 - 1)),
                kind=kind,
                phase=draw(st.none() | st.integers(-(2**31), 2**31 - 1)),
                detail=draw(stored_detail(kind)),
                at=START - datetime.timedelta(milliseconds=draw(st.integers(0, 10**9))),
            )
        )
    return lines


# ── queries ──────────────────────────────────────────────────────────────────


class Query:
    """A query being written: its fragments and the variables its directives read."""

    def __init__(self) -> None:
        self.fragments: list[str] = []
        self.variables: dict[str, bool] = {}


@st.composite
def directive(draw: st.DrawFn, query: Query) -> str:
    which = draw(st.integers(0, 5))
    if which < 3:
        return ""
    name = draw(st.sampled_from(["skip", "include"]))
    if which == 3:
        return f" @{name}(if: {draw(st.sampled_from(['true', 'false']))})"
    variable = f"c{len(query.variables)}"
    query.variables[variable] = draw(st.booleans())
    return f" @{name}(if: ${variable})"


def _alias(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["", "", "", "a: ", "b: ", "x1: "]))


def _named(gtype: Any) -> Any:
    while hasattr(gtype, "of_type"):
        gtype = gtype.of_type
    return gtype


@st.composite
def object_selection(draw: st.DrawFn, gtype: GraphQLObjectType, query: Query, depth: int = 0) -> str:
    names = sorted(gtype.fields)
    picked = draw(st.lists(st.sampled_from([*names, "__typename"]), min_size=1, max_size=len(names) + 2))
    parts = []
    for name in picked:
        alias = _alias(draw) if name != "__typename" else draw(st.sampled_from(["", "t: "]))
        inner = _named(gtype.fields[name].type) if name != "__typename" else None
        sub = ""
        if isinstance(inner, GraphQLObjectType):
            sub = " { " + draw(object_selection(inner, query, depth + 1)) + " }"
        elif isinstance(inner, GraphQLUnionType):
            sub = " { " + draw(union_selection(inner, query)) + " }"
        parts.append(f"{alias}{name}{draw(directive(query))}{sub}")
    if not parts:
        parts.append("__typename")
    return " ".join(parts)


@st.composite
def union_selection(draw: st.DrawFn, union: GraphQLUnionType, query: Query) -> str:
    parts = []
    if draw(st.booleans()):
        parts.append(f"{draw(st.sampled_from(['', 't: ']))}__typename")
    members = draw(st.lists(st.sampled_from(list(union.types)), max_size=6))
    for member in members:
        body = draw(object_selection(member, query))
        how = draw(st.integers(0, 3))
        if how == 0:
            name = f"F{len(query.fragments)}"
            query.fragments.append(f"fragment {name} on {member.name} {{ {body} }}")
            parts.append(f"...{name}{draw(directive(query))}")
        else:
            parts.append(f"... on {member.name}{draw(directive(query))} {{ {body} }}")
    if draw(st.booleans()):
        parts.append(f"... on {union.name} {{ __typename }}")
    if draw(st.booleans()):
        parts.append("... { __typename }")
    return " ".join(parts) or "__typename"


@st.composite
def page_queries(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    query = Query()
    line_type = TYPES["RunLogLine"]
    assert isinstance(line_type, GraphQLObjectType)
    nodes = draw(object_selection(line_type, query))
    page_parts = [f"{_alias(draw)}nodes{draw(directive(query))} {{ {nodes} }}"]
    if draw(st.booleans()):
        page_parts.append("pageInfo { hasNextPage endCursor }")
    if draw(st.booleans()):
        page_parts.append("__typename")
    if draw(st.booleans()):
        page_parts.append(f"nodes {{ {draw(object_selection(line_type, query))} }}")
    variables: dict[str, Any] = {
        "runId": draw(st.sampled_from(["7", "7", "7", 7, "abc", "0"])),
        "kinds": draw(st.none() | st.lists(st.sampled_from([k.name for k in Kind]), max_size=3)),
        "limit": draw(st.none() | st.integers(-5, 3000)),
        "after": draw(st.none() | st.sampled_from(["bogus", store.encode_cursor(_line_at(START))])),
    }
    variables.update(query.variables)
    definitions = "".join(f", ${name}: Boolean!" for name in query.variables)
    root = f"{_alias(draw)}runLog(runId: $runId, kinds: $kinds, limit: $limit, after: $after)"
    extra = " __typename" if draw(st.booleans()) else ""
    text = (
        f"query Q($runId: ID!, $kinds: [RunLogKind!], $limit: Int, $after: String{definitions}) "
        f"{{ {root} {{ {' '.join(page_parts)} }}{extra} }} " + " ".join(query.fragments)
    )
    return text, variables


def _line_at(at: datetime.datetime) -> store.Line:
    return store.Line(id=500, run_id=7, step_id=None, kind="note", phase=None, detail=None, at=at)


# ── running both ─────────────────────────────────────────────────────────────


def _context(caller: Caller, policy: Policy) -> Context:
    return Context(
        engine=None,  # type: ignore[arg-type]
        settings=Settings(),
        policy=policy,
        caller=caller,
        request_id="r1",
    )


@pytest.fixture
def fake_store(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The store, replaced by the generated page (both schemas read the same one)."""
    state: dict[str, Any] = {"lines": [], "fail": False, "runs": None}

    async def read_page(
        engine: Any, *, run_id: int, kinds: Any, limit: int, after: Any, **reading: Any
    ) -> store.Page:
        if state["fail"]:
            raise OSError("the database is away")
        lines = state["lines"]
        if kinds is not None:
            lines = [line for line in lines if line.kind in kinds]
        return store.Page(lines=lines[:limit], has_next=len(lines) > limit)

    async def find_runs(engine: Any, ids: Any) -> dict[int, store.Run]:
        state["lookups"] = state.get("lookups", 0) + 1
        if state["runs"] == "away":
            raise OSError("the database is away")  # a refusal the caller can act on
        if state["runs"] == "broken":
            raise RuntimeError("no such table: event_runs")  # masked
        return {i: store.Run(id=i, status="live", ended_at=None, updated_at=START) for i in ids if i % 2 == 1}

    monkeypatch.setattr(store, "read_page", read_page)
    monkeypatch.setattr(store, "find_runs", find_runs)
    return state


def _both(text: str, variables: dict[str, Any], caller: Caller, policy: Policy) -> tuple[str, str]:
    async def run() -> tuple[str, str]:
        answers = []
        for schema in (FAST, SLOW):
            result = await schema.execute(text, variables, context_value=_context(caller, policy))
            body = {"data": result.data}
            if result.errors:
                body["errors"] = [error.formatted for error in result.errors]
            # The service writes bodies with orjson: the same JSON as json.dumps, key order included.
            assert json.loads(orjson.dumps(body)) == json.loads(json.dumps(body))
            assert list(orjson.loads(orjson.dumps(body))) == list(body)
            answers.append(json.dumps(body))
        return answers[0], answers[1]

    return asyncio.run(run())


OPEN = Policy.from_settings(Settings())
ANYONE = Caller(roles=frozenset(), authenticated=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=rows(),
    query=page_queries(),
    runs=st.sampled_from([None, None, None, "away", "broken"]),
)
def test_the_plan_answers_what_graphql_core_answers(
    fake_store: dict[str, Any], lines: list[store.Line], query: tuple[str, dict[str, Any]], runs: str | None
) -> None:
    fake_store["lines"] = lines
    fake_store["runs"] = runs  # how the page's blocking runs are found, or why not
    text, variables = query
    fastpath.STATS.reset()
    fast, slow = _both(text, variables, ANYONE, OPEN)
    assert fast == slow
    if '"data": null' not in fast and runs is None:
        assert fastpath.STATS.planned == 1, "the plan was not used"


def _readable(text: str) -> str:
    """A generated query made to read run 7 from its newest line, whatever it asked for."""

    class Rewrite(Visitor):
        def enter_argument(self, node: ArgumentNode, *_: Any) -> Any:
            if node.name.value == "runId":
                return ArgumentNode(name=node.name, value=StringValueNode(value="7"))
            if node.name.value == "after":
                return ArgumentNode(name=node.name, value=NullValueNode())
            return None

    return print_ast(visit(parse(text), Rewrite()))


GENERATED = hypothesis_graphql.queries(
    FAST.as_str(),
    fields=["runLog"],
    custom_scalars={
        "DateTime": st.just("2026-01-01T00:00:00Z").map(hypothesis_graphql.nodes.String),
        "JSON": st.just("x").map(hypothesis_graphql.nodes.String),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=rows(), text=GENERATED)
def test_the_plan_answers_what_graphql_core_answers_for_hypothesis_graphql_queries(
    fake_store: dict[str, Any], lines: list[store.Line], text: str
) -> None:
    """Queries from hypothesis-graphql (it works with graphql-core 3.3), as a second opinion."""
    fake_store["lines"] = lines
    text = _readable(text)
    fast, slow = _both(text, {}, ANYONE, OPEN)
    assert fast == slow


def test_the_plan_is_used_for_the_benchmarks_every_detail_field_query(
    fake_store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphql import build_client_schema, introspection_from_schema

    from bench import operations

    # The benchmark builds it by introspecting the running service; here, this schema.
    monkeypatch.setattr(
        operations, "introspect", lambda port: build_client_schema(introspection_from_schema(FAST._schema))
    )
    query = operations.every_detail_field(port=0).text
    assert "blockingRun" in query

    fake_store["lines"] = [
        store.Line(
            id=100 + i,
            run_id=7,
            step_id=i or None,
            kind=kind.value,
            phase=i,
            detail=dump_detail(EXAMPLES[kind]),
            at=START,
        )
        for i, kind in enumerate(Kind)
    ]
    fastpath.STATS.reset()
    fast, slow = _both(query, {"runId": "7", "limit": 2000}, ANYONE, OPEN)
    assert fast == slow
    assert fastpath.STATS.planned == 1 and fastpath.STATS.unplanned == 0
    assert '"__typename": "CleanupRetryDetail"' in fast


def _blocked(run_id: Any) -> store.Line:
    detail = dump_detail({"blockingRunId": run_id, "concurrencyKey": "k"})
    return _line_at(START)._replace(kind="run.blocked", detail=detail)


BLOCKING = (
    "{ runLog(runId: 7) { nodes { detail { ... on RunBlockedDetail { blockingRun { id status } } } } } }"
)


def test_blocking_runs_are_looked_up_in_one_query_and_planned(fake_store: dict[str, Any]) -> None:
    fake_store["lines"] = [_blocked(37), _blocked(39), _blocked(37), _blocked(38)]
    fastpath.STATS.reset()
    fast, slow = _both(BLOCKING, {}, ANYONE, OPEN)
    assert fast == slow
    assert json.loads(fast)["data"]["runLog"]["nodes"] == [
        {"detail": {"blockingRun": {"id": "37", "status": "live"}}},
        {"detail": {"blockingRun": {"id": "39", "status": "live"}}},
        {"detail": {"blockingRun": {"id": "37", "status": "live"}}},
        {"detail": {"blockingRun": None}},  # the events system has no run 38
    ]
    assert fake_store["lookups"] == 2  # one per schema, for the four lines
    assert fastpath.STATS.planned == 1 and fastpath.STATS.not_compilable == 0  # SLOW has no plan


def test_a_page_that_does_not_select_blocking_runs_does_not_look_them_up(fake_store: dict[str, Any]) -> None:
    fake_store["lines"] = [_blocked(37)]
    without = "{ runLog(runId: 7) { nodes { detail { ... on RunBlockedDetail { concurrencyKey } } } } }"
    _both(without, {}, ANYONE, OPEN)
    assert "lookups" not in fake_store
    # Whether a query asks is remembered per operation: another one, at the
    # same path, is asked afresh, both ways round.
    for text, lookups in ((BLOCKING, 2), (without, 2), (BLOCKING, 4), (without, 4)):
        _both(text, {}, ANYONE, OPEN)
        assert fake_store["lookups"] == lookups


@pytest.mark.parametrize("runs", ["away", "broken"])
def test_a_failed_lookup_is_an_error_on_each_blocking_run_and_the_lines_stay(
    fake_store: dict[str, Any], runs: str
) -> None:
    fake_store["lines"] = [_blocked(37), _blocked(39)]
    fake_store["runs"] = runs
    fast, slow = _both(BLOCKING, {}, ANYONE, OPEN)
    assert fast == slow
    body = json.loads(fast)
    assert body["data"]["runLog"]["nodes"] == [{"detail": {"blockingRun": None}}] * 2
    code = "DATABASE_UNAVAILABLE" if runs == "away" else "INTERNAL_SERVER_ERROR"
    assert [(e["path"], e["extensions"]["code"]) for e in body["errors"]] == [
        (["runLog", "nodes", i, "detail", "blockingRun"], code) for i in (0, 1)
    ]


def test_a_value_the_plan_does_not_expect_is_completed_by_graphql_core(fake_store: dict[str, Any]) -> None:
    """A null where the schema says non-null: graphql-core's (masked) error, located, from the same page."""
    broken = _line_at(START)._replace(kind="note", at=None)
    fake_store["lines"] = [broken, _line_at(START)]  # the last line makes the cursor
    fastpath.STATS.reset()
    fast, slow = _both("{ runLog(runId: 7) { nodes { id at } } }", {}, ANYONE, OPEN)
    assert fast == slow
    assert '"path": ["runLog", "nodes", 0, "at"]' in fast and "INTERNAL_SERVER_ERROR" in fast
    assert fastpath.STATS.unplanned == 1


@pytest.mark.parametrize("problem", ["unauthenticated", "forbidden", "database"])
def test_refusals_and_failures_are_the_same_errors(fake_store: dict[str, Any], problem: str) -> None:
    policy = Policy.from_settings(Settings(reader_tokens=(READER,)))
    caller = ANYONE
    if problem == "forbidden":
        caller = Caller(roles=frozenset({Role.WRITER}), authenticated=True)
    if problem == "database":
        caller = Caller(roles=frozenset({Role.READER}), authenticated=True)
        fake_store["fail"] = True
    text = "query { log: runLog(runId: 7) { nodes { id detail { __typename } } } }"
    fast, slow = _both(text, {}, caller, policy)
    assert fast == slow
    assert '"errors"' in fast and '"data": null' in fast


def test_a_query_text_is_parsed_and_validated_once_with_the_apps_limits(
    make_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's extensions (limits included) keep the same rules, so the caches hit."""
    import graphql
    import strawberry.schema.schema as strawberry_schema

    validated: list[Any] = []
    parsed: list[Any] = []
    validate = strawberry_schema.validate_document
    parse = strawberry_schema.parse

    def counting_validate(*args: Any) -> Any:
        validated.append(args)
        return validate(*args)

    def counting_parse(*args: Any, **kwargs: Any) -> graphql.DocumentNode:
        parsed.append(args)
        return parse(*args, **kwargs)

    monkeypatch.setattr(strawberry_schema, "validate_document", counting_validate)
    monkeypatch.setattr(strawberry_schema, "parse", counting_parse)
    api = make_api()
    for run_id in ("1", "2", "3"):
        api.data("query($r: ID!) { runLog(runId: $r, limit: 5) { nodes { id } } }", {"r": run_id})
    assert len(parsed) == 1 and len(validated) == 1
    # A text that fails validation is answered the same way every time.
    first, second = (api.post("{ runLog(runId: 1) { nodes { nope } } }") for _ in range(2))
    assert first == second and "Cannot query field 'nope'" in first["errors"][0]["message"]


# ── the shipped operations ───────────────────────────────────────────────────


def _shipped() -> list[tuple[str, str]]:
    """Every operation in gql/operations, as a whole document with the fragments it uses."""
    fragments = graphiql._fragments()
    files = sorted(
        p.name for p in graphiql.OPERATIONS_DIR.glob("*.graphql") if p.name != graphiql.FRAGMENTS_FILE
    )
    assert files, "no operations found"
    return [(name, graphiql._document(name, fragments)) for name in files]


def _variables(document: str) -> dict[str, Any]:
    """A value for every variable the operation requires, by its type; the rest left out."""
    (operation,) = [d for d in parse(document).definitions if isinstance(d, OperationDefinitionNode)]
    values = {"ID": "7", "String": "a note", "Int": 2000, "Boolean": True, "RunLogKind": "RUN_BLOCKED"}
    variables: dict[str, Any] = {}
    for definition in operation.variable_definitions:
        written = print_ast(definition.type)
        if not written.endswith("!") or definition.default_value is not None:
            continue
        value = values[written.strip("[]!")]
        variables[definition.variable.name.value] = [value] if written.startswith("[") else value
    return variables


@pytest.mark.parametrize(("name", "document"), _shipped(), ids=[name for name, _ in _shipped()])
def test_every_shipped_operation_takes_the_fast_path(
    tables: Backend, make_api: Any, monkeypatch: pytest.MonkeyPatch, name: str, document: str
) -> None:
    """Each page of a shipped query is completed by the plan, blocking runs included;
    every shipped operation, the mutation too, is parsed and validated once and
    then answered as a prepared text."""
    import strawberry.schema.schema as strawberry_schema

    from gql.app import RunLogGraphQL

    prepared: list[bool] = []
    run_prepared = RunLogGraphQL.run_prepared

    async def counting_prepared(self: RunLogGraphQL, request: Any) -> Any:
        response = await run_prepared(self, request)
        prepared.append(response is not None)
        return response

    monkeypatch.setattr(RunLogGraphQL, "run_prepared", counting_prepared)

    tables.add_run(37, "live", None, "2026-01-01 00:00:00")
    api = make_api()
    for kind in Kind:
        assert api.write(7, kind.value, EXAMPLES[kind])
    checked: list[Any] = []
    for step in ("parse", "validate_document"):
        original = getattr(strawberry_schema, step)

        def counting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            checked.append(args)
            return _original(*args, **kwargs)

        monkeypatch.setattr(strawberry_schema, step, counting)
    variables = _variables(document)
    is_query = parse(document).definitions[0].operation.value == "query"  # type: ignore[attr-defined]
    answers = []
    for _ in range(3):
        fastpath.STATS.reset()
        body = api.post(document, variables)
        assert "errors" not in body, body
        answers.append(body)
        if is_query:
            assert (fastpath.STATS.planned, fastpath.STATS.unplanned, fastpath.STATS.not_compilable) == (
                1,
                0,
                0,
            )
    assert len(checked) <= 2, "the text was parsed or validated again"
    assert prepared[-2:] == [True, True], "the text was not answered as a prepared text"
    if "blockingRun" in document:
        blocked = [n for n in answers[0]["data"]["runLog"]["nodes"] if n["kind"] == "RUN_BLOCKED"]
        assert blocked and blocked[0]["detail"]["blockingRun"] == {
            "id": "37",
            "status": "live",
            "terminal": False,
        }
