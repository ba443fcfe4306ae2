"""The compiled page plan answers exactly what graphql-core answers.

Queries are generated over the schema (aliases, repeated fields, inline and
named fragments, fragments on the union, `__typename`, @skip/@include with
literals and variables, every runLog argument, bad arguments), and pages are
generated rows (every kind, null and unreadable details, unknown kinds, null
step ids and phases), written into a real database (SQLite and MariaDB, the
`tables` backends) and read back by the store as any request reads them. Each
query runs on two schemas built the same way, one with the plan and one with
graphql-core alone, and the two answers must be the same JSON, key order
included, errors included.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import gc
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis_graphql
import orjson
import pytest
import sqlalchemy as sa
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

from gql import store
from gql.api.context import Context
from gql.api.execution import PageExecutor
from gql.api.schema import build_schema
from gql.compat.graphql import FieldDetails, subfields
from gql.compat.strawberry import graphql_schema
from gql.domain import writes
from gql.domain.auth import Caller, Policy, Role
from gql.domain.detail_codec import dump_detail
from gql.edge import graphiql
from gql.edge.answers import MaskUnexpected
from gql.kinds import Kind
from gql.settings import Settings
from gql.store.db import create_engine, event_run_log, event_runs

from .conftest import Backend, sent_statements
from .details_examples import EXAMPLES

FAST = build_schema([MaskUnexpected], fast_path=True)
SLOW = build_schema([MaskUnexpected], fast_path=False)
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
        # An odd id names a run in event_runs (RUNS); an even one, or not a number, does not.
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
        page_parts.append("pageInfo { hasNextPage endCursor hasPreviousPage }")
    if draw(st.booleans()):
        # The page's run and what pruning took: plain data too (read before the page is completed).
        page_parts.append("run { id status terminal endedAt updatedAt } pruned { lines through prunedAt }")
    if draw(st.booleans()):
        page_parts.append("__typename")
    if draw(st.booleans()):
        page_parts.append(f"nodes {{ {draw(object_selection(line_type, query))} }}")
    variables: dict[str, Any] = {
        "runId": draw(st.sampled_from(["7", "7", "7", 7, "abc", "0"])),
        "kinds": draw(st.none() | st.lists(st.sampled_from([k.name for k in Kind]), max_size=3)),
        "limit": draw(st.none() | st.integers(-5, 3000)),
        "after": draw(
            st.none()
            | st.sampled_from(["bogus", store.encode_cursor(_line_at(START), store.cursor_scope(7, None))])
        ),
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


# The runs the events system has: an odd `blockingRunId` names one, an even
# one or one that is not a number does not.
RUNS = (37, 39, 41)


class Stored:
    """Generated lines and runs, written into a real database that both schemas read.

    Nothing of the store is replaced: each answer is read by `store.read_page`
    and `store.find_runs` from SQLite or MariaDB (the `tables` backends).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.runs_table = True
        self.lookups = 0  # statements that read event_runs, counted as they are sent
        self.url = backend.url  # what the schemas' engine connects to
        self.read_timeout = Settings().read_timeout
        self.deleted: Path | None = None  # an SQLite file deleted once the engine is open

    def put(self, lines: list[store.Line], runs: str | None = None) -> None:
        """The table holds `lines` and nothing else; `runs="broken"`: event_runs is gone."""
        sync = self.backend.sync
        with sync.begin() as conn:
            conn.execute(event_run_log.delete())
            if lines:
                conn.execute(
                    event_run_log.insert(),
                    [
                        {
                            "id": line.id,
                            "run_id": line.run_id,
                            "step_id": line.step_id,
                            "kind": line.kind,
                            "phase": line.phase,
                            "detail": line.detail,
                            "at": store.as_naive_utc(line.at),
                        }
                        for line in lines
                    ],
                )
        if runs == "broken" and self.runs_table:
            event_runs.drop(sync)
            self.runs_table = False
        elif runs != "broken":
            if not self.runs_table:
                event_runs.create(sync)
                self.runs_table = True
            with sync.begin() as conn:
                conn.execute(event_runs.delete())
                updated = store.as_naive_utc(START)
                conn.execute(
                    event_runs.insert(),
                    [{"id": i, "status": "live", "ended_at": None, "updated_at": updated} for i in RUNS],
                )

    def context(self, engine: Any, caller: Caller, policy: Policy) -> Context:
        settings = Settings(read_timeout=self.read_timeout)
        return Context(
            engine=engine,
            settings=settings,
            writer=writes.Writer(engine, settings),
            policy=policy,
            caller=caller,
            request_id="r1",
        )


@pytest.fixture
def stored(tables: Backend) -> Stored:
    return Stored(tables)


def _both(
    stored: Stored, text: str, variables: dict[str, Any], caller: Caller, policy: Policy
) -> tuple[str, str]:
    async def run() -> tuple[str, str]:
        engine = create_engine(stored.backend.settings(database_url=stored.url))
        if stored.deleted is not None:
            stored.deleted.unlink()

        def note(statement: str) -> None:
            stored.lookups += "event_runs" in statement

        answers = []
        try:
            for schema in (FAST, SLOW):
                context = stored.context(engine, caller, policy)
                with sent_statements(engine, before=note):
                    result = await schema.execute(text, variables, context_value=context)
                body = {"data": result.data}
                if result.errors:
                    body["errors"] = [error.formatted for error in result.errors]
                # The service writes bodies with orjson: the same JSON as json.dumps, key order included.
                assert json.loads(orjson.dumps(body)) == json.loads(json.dumps(body))
                assert list(orjson.loads(orjson.dumps(body))) == list(body)
                answers.append(json.dumps(body))
        finally:
            await engine.dispose()
        return answers[0], answers[1]

    with _no_collection():
        return asyncio.run(run())


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection of this process while both schemas read (and none is asked for).

    A full collection of a test worker's heap (the suite's modules, and
    hypothesis's record of every example, which grows as they run) takes
    seconds on a loaded machine. Inside a read it counted against the read's
    deadline as if the database were slow: one side answered "did not
    answer in time" where the other answered. The garbage is collected
    between examples instead.
    """
    collections: list[int] = []

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(counted)
    try:
        yield
    finally:
        gc.callbacks.remove(counted)
        if enabled:
            gc.enable()
    assert not collections, f"collections of generations {collections} ran inside the reads"


OPEN = Policy.from_settings(Settings())
ANYONE = Caller(roles=frozenset(), authenticated=False)


# Examples per test: RUNLOG_FUZZ_EXAMPLES, as for the fuzz (100 here by default; 300 and 200 took
# 56 s of this file's 67). A long run: RUNLOG_FUZZ_EXAMPLES=2000 scripts/test tests/test_page_plan.py
COMPARED = settings(
    max_examples=int(os.environ.get("RUNLOG_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@COMPARED
@given(
    lines=rows(),
    query=page_queries(),
    # How the page's blocking runs are found, or why not ("broken": the
    # events system's table is gone). A lookup that times out is
    # test_a_failed_lookup_...'s: it takes the read timeout each time.
    runs=st.sampled_from([None, None, None, "broken"]),
)
def test_the_plan_answers_what_graphql_core_answers(
    stored: Stored, lines: list[store.Line], query: tuple[str, dict[str, Any]], runs: str | None
) -> None:
    stored.put(lines, runs)
    text, variables = query
    with _clock_stopped(), completions() as seen:
        fast, slow = _both(stored, text, variables, ANYONE, OPEN)
    assert fast == slow
    if '"data": null' not in fast and runs is None:
        assert seen["planned"] == 1, "the plan was not used"


@contextlib.contextmanager
def completions() -> Iterator[collections.Counter[str]]:
    """How pages were completed while the block ran: by their plan ("planned"), or left to graphql-core."""
    seen: collections.Counter[str] = collections.Counter()
    complete = PageExecutor.complete_object

    def counted(self: PageExecutor, *args: Any) -> Any:
        completed = complete(self, *args)
        seen["left" if completed is self.LEFT else "planned"] += 1
        return completed

    PageExecutor.complete_object = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        PageExecutor.complete_object = complete  # type: ignore[method-assign]


@contextlib.contextmanager
def _clock_stopped() -> Iterator[None]:
    """The two paths read at different times: a cursor of a recent line (or of
    an empty first page) holds the read's time, so it is held still for both."""
    settled = store.settled_before(0)
    original = store.settled_before
    store.settled_before = lambda _window: settled  # type: ignore[assignment]
    try:
        yield
    finally:
        store.settled_before = original  # type: ignore[assignment]


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


@COMPARED
@given(lines=rows(), text=GENERATED)
def test_the_plan_answers_what_graphql_core_answers_for_hypothesis_graphql_queries(
    stored: Stored, lines: list[store.Line], text: str
) -> None:
    """Queries from hypothesis-graphql (it works with graphql-core 3.3), as a second opinion."""
    stored.put(lines)
    text = _readable(text)
    with _clock_stopped():
        fast, slow = _both(stored, text, {}, ANYONE, OPEN)
    assert fast == slow


def test_the_plan_is_used_for_the_benchmarks_every_detail_field_query(
    stored: Stored, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphql import build_client_schema, introspection_from_schema

    from bench import operations

    # The benchmark builds it by introspecting the running service; here, this schema.
    monkeypatch.setattr(
        operations, "introspect", lambda port: build_client_schema(introspection_from_schema(FAST._schema))
    )
    query = operations.every_detail_field(port=0).text
    assert "blockingRun" in query

    lines = [
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
    stored.put(lines)
    with completions() as seen:
        fast, slow = _both(stored, query, {"runId": "7", "limit": 2000}, ANYONE, OPEN)
    assert fast == slow
    assert seen == {"planned": 1}  # SLOW has no plan to count
    assert '"__typename": "CleanupRetryDetail"' in fast


def _blocked(run_id: Any, line_id: int = 500) -> store.Line:
    detail = dump_detail({"blockingRunId": run_id, "concurrencyKey": "k"})
    return _line_at(START)._replace(id=line_id, kind="run.blocked", detail=detail)


BLOCKING = (
    "{ runLog(runId: 7) { nodes { detail { ... on RunBlockedDetail { blockingRun { id status } } } } } }"
)


def test_blocking_runs_are_looked_up_in_one_query_and_planned(stored: Stored) -> None:
    stored.put([_blocked(37, 504), _blocked(39, 503), _blocked(37, 502), _blocked(38, 501)])
    with completions() as seen:
        fast, slow = _both(stored, BLOCKING, {}, ANYONE, OPEN)
    assert fast == slow
    assert json.loads(fast)["data"]["runLog"]["nodes"] == [
        {"detail": {"blockingRun": {"id": "37", "status": "live"}}},
        {"detail": {"blockingRun": {"id": "39", "status": "live"}}},
        {"detail": {"blockingRun": {"id": "37", "status": "live"}}},
        {"detail": {"blockingRun": None}},  # the events system has no run 38
    ]
    assert stored.lookups == 2  # one per schema, for the four lines
    assert seen == {"planned": 1}  # SLOW has no plan to count


def test_a_page_that_does_not_select_blocking_runs_does_not_look_them_up(stored: Stored) -> None:
    stored.put([_blocked(37)])
    without = "{ runLog(runId: 7) { nodes { detail { ... on RunBlockedDetail { concurrencyKey } } } } }"
    _both(stored, without, {}, ANYONE, OPEN)
    assert stored.lookups == 0
    # Whether a query asks is remembered per operation: another one, at the
    # same path, is asked afresh, both ways round.
    for text, lookups in ((BLOCKING, 2), (without, 2), (BLOCKING, 4), (without, 4)):
        _both(stored, text, {}, ANYONE, OPEN)
        assert stored.lookups == lookups


def _failed_lookup(fast: str, slow: str, code: str) -> None:
    assert fast == slow
    body = json.loads(fast)
    assert body["data"]["runLog"]["nodes"] == [{"detail": {"blockingRun": None}}] * 2
    assert [(e["path"], e["extensions"]["code"]) for e in body["errors"]] == [
        (["runLog", "nodes", i, "detail", "blockingRun"], code) for i in (0, 1)
    ]


def test_a_failed_lookup_is_an_error_on_each_blocking_run_and_the_lines_stay(stored: Stored) -> None:
    # The events system's table is gone: a fault of this deployment, masked.
    stored.put([_blocked(37, 502), _blocked(39, 501)], runs="broken")
    _failed_lookup(*_both(stored, BLOCKING, {}, ANYONE, OPEN), "INTERNAL_SERVER_ERROR")


def test_a_lookup_past_the_read_timeout_is_unavailable_on_each_blocking_run(mariadb: Backend) -> None:
    # Another session holds event_runs: the page is read, its runs are not
    # by the deadline, and the caller is told the database is unavailable.
    mariadb.create_tables()
    stored = Stored(mariadb)
    stored.read_timeout = 0.5
    stored.put([_blocked(37, 502), _blocked(39, 501)])
    with mariadb.sync.connect() as locker:
        locker.exec_driver_sql("LOCK TABLES event_runs WRITE")
        try:
            answers = _both(stored, BLOCKING, {}, ANYONE, OPEN)
        finally:
            locker.exec_driver_sql("UNLOCK TABLES")
    _failed_lookup(*answers, "DATABASE_UNAVAILABLE")


def test_a_value_the_plan_does_not_expect_is_completed_by_graphql_core(
    stored: Stored, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A null where the schema says non-null: graphql-core's (masked) error, located, from the same page.

    No stored row reads as a line without `at` (a row's odd `at` gets a
    stand-in), so the line is broken after it is read: the plan's own way
    out is what is tested, on a page read from the database.
    """
    stored.put([_line_at(START)._replace(id=501), _line_at(START)._replace(id=500)])
    read_page = store.read_page

    async def broken(*args: Any, **kwargs: Any) -> store.Page:
        page = await read_page(*args, **kwargs)
        lines = [line._replace(at=None) if line.id == 501 else line for line in page.lines]
        return dataclasses.replace(page, lines=lines)

    monkeypatch.setattr(store, "read_page", broken)
    with completions() as seen:
        fast, slow = _both(stored, "{ runLog(runId: 7) { nodes { id at } } }", {}, ANYONE, OPEN)
    assert fast == slow
    assert '"path": ["runLog", "nodes", 0, "at"]' in fast and "INTERNAL_SERVER_ERROR" in fast
    assert seen == {"left": 1}  # the plan gave up


@pytest.mark.parametrize("problem", ["unauthenticated", "forbidden", "database"])
def test_refusals_and_failures_are_the_same_errors(stored: Stored, problem: str, tmp_path: Any) -> None:
    policy = Policy.from_settings(Settings(reader_tokens=(READER,)))
    caller = ANYONE
    stored.put([_line_at(START)])
    if problem == "forbidden":
        caller = Caller(roles=frozenset({Role.WRITER}), authenticated=True)
    if problem == "database":
        caller = Caller(roles=frozenset({Role.READER}), authenticated=True)
        # A database that is not there: a closed port, a file deleted while the service runs.
        if stored.backend.name == "mariadb":
            stored.url = (
                sa.make_url(stored.url).set(port=_closed_port()).render_as_string(hide_password=False)
            )
        else:
            stored.deleted = tmp_path / "deleted.db"
            stored.deleted.touch()
            stored.url = f"sqlite+aiosqlite:///{stored.deleted}"
    text = "query { log: runLog(runId: 7) { nodes { id detail { __typename } } } }"
    fast, slow = _both(stored, text, {}, caller, policy)
    assert fast == slow
    assert '"errors"' in fast and '"data": null' in fast
    if problem == "database":
        assert '"DATABASE_UNAVAILABLE"' in fast


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: a connect is refused


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
    parsed.clear()
    validated.clear()
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
    documents = [
        (
            name,
            graphiql.with_fragments((graphiql.OPERATIONS_DIR / name).read_text(encoding="utf-8"), fragments),
        )
        for name in files
    ]
    # A subscription (RunLogTail) is served over the websocket, one line at a
    # time: the plan compiles pages, and completing one line is graphql-core's.
    return [(name, text) for name, text in documents if _kind(text) != "subscription"]


def _kind(document: str) -> str:
    (operation,) = [d for d in parse(document).definitions if isinstance(d, OperationDefinitionNode)]
    return operation.operation.value


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
    every shipped operation, the mutation too, is parsed and validated once."""
    import strawberry.schema.schema as strawberry_schema

    tables.add_run(37, "live", None, "2026-01-01 00:00:00")
    api = make_api()
    for kind in Kind:
        assert api.write(7, kind.value, EXAMPLES[kind])
    # The long poll's page (RunLogWait) reads from the oldest line, so there
    # are newer lines and it answers at once.
    nodes = api.data("{ runLog(runId: 7, limit: 2000) { nodes { cursor } } }")["runLog"]["nodes"]
    oldest = nodes[-1]["cursor"]
    checked: list[Any] = []
    for step in ("parse", "validate_document"):
        original = getattr(strawberry_schema, step)

        def counting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            checked.append(args)
            return _original(*args, **kwargs)

        monkeypatch.setattr(strawberry_schema, step, counting)
    variables = _variables(document)
    if "before" in variables:
        variables["before"] = oldest
    is_query = parse(document).definitions[0].operation.value == "query"  # type: ignore[attr-defined]
    answers = []
    for _ in range(3):
        with completions() as seen:
            body = api.post(document, variables)
        assert "errors" not in body, body
        answers.append(body)
        if is_query:
            # The plan completes runLog pages; runsInFlight's page of runs is graphql-core's.
            assert seen == ({"planned": 1} if "runLog(" in document else {})
    assert len(checked) <= 2, "the text was parsed or validated again"
    if "blockingRun" in document and "nodes" in answers[0]["data"].get("runLog", {}):
        blocked = [n for n in answers[0]["data"]["runLog"]["nodes"] if n["kind"] == "RUN_BLOCKED"]
        assert blocked and blocked[0]["detail"]["blockingRun"] == {
            "id": "37",
            "status": "live",
            "terminal": False,
        }


def test_a_page_under_a_resolver_middleware_has_no_plan() -> None:
    """A middleware must see every field: graphql-core completes the page (Strawberry passes none)."""

    def middleware(resolve: Any, source: Any, info: Any, **args: Any) -> Any:
        return resolve(source, info, **args)

    gschema = graphql_schema(FAST)
    document = parse("{ runLog(runId: 7) { nodes { cursor } } }")
    for given_middleware, planned in (([middleware], False), (None, True)):
        executor = FAST.execution_context_class.build(gschema, document, middleware=given_middleware)
        root = [FieldDetails(executor.operation, None, None)]  # the operation's, as graphql-core's root
        (group,) = subfields(executor, gschema.query_type, root).values()
        plan = executor.page_plan(gschema.type_map["RunLogPage"], group)
        assert callable(plan) is planned
        if not planned:
            assert plan[0] == "middleware"
