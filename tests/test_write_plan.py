"""The write plan (gql/engine/write_plan.py) answers a `writeRunLog` mutation exactly as the executor does.

Two apps share one database: one as served (`create_app()`, whose prepared
path hands a mutation of `writeRunLog` fields alone to its write plan), one
sending every request through Strawberry's full pipeline (`prepared=False`).
Each request goes twice to the first (the first time prepares its text, the
second is answered by the plan when it has one) and once to the second,
with the same X-Request-Id. The answers must be the same bytes with the same
headers, each must store the same lines, and log the same records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import strawberry
from graphql import OperationDefinitionNode, get_argument_values, get_variable_values, parse, validate
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from gql.app import create_app
from gql.compat.strawberry import graphql_schema
from gql.engine.coercion import Coercion
from gql.engine.write_plan import WRITE_FIELD, write_plan
from gql.schema import build_schema

from .conftest import ADMIN, Backend

WRITER = "writer-token-0123456789"
READER = "reader-token-0123456789"
WRITE_NOTE = (Path(__file__).resolve().parent.parent / "gql" / "operations" / "WriteNote.graphql").read_text()

EVERY_ARGUMENT = (
    "mutation Every($runId: ID!, $kind: String!, $stepId: ID, $phase: Int, $detail: JSON, $key: String) {"
    " writeRunLog(runId: $runId, kind: $kind, stepId: $stepId, phase: $phase, detail: $detail,"
    " idempotencyKey: $key) }"
)
ALIASES = (
    "mutation Two($runId: ID!, $text: String) {"
    ' first: writeRunLog(runId: $runId, kind: "note", detail: {text: $text, actor: "a"})'
    ' second: writeRunLog(runId: $runId, kind: "nope", phase: 3)'
    ' writeRunLog(runId: 8, kind: "note") }'
)
LITERALS = (
    'mutation { writeRunLog(runId: 7, kind: "run.status", stepId: "3", phase: -2,'
    ' detail: {from: "scheduled", to: "live", reason: null}) }'
)
NULLS = 'mutation { writeRunLog(runId: "7", kind: "note", stepId: null, phase: null, detail: null) }'
DEFAULTS = (
    'mutation Defaults($runId: ID! = 7, $phase: Int = 3, $kind: String = "note") {'
    " writeRunLog(runId: $runId, kind: $kind, phase: $phase) }"
)
SKIPPED = (
    "mutation Skip($skip: Boolean!) {"
    ' a: writeRunLog(runId: 7, kind: "note") @skip(if: $skip) b: writeRunLog(runId: 7, kind: "note") }'
)
TYPENAME = 'mutation { __typename writeRunLog(runId: 7, kind: "note") }'
MIXED = 'mutation { writeRunLog(runId: 7, kind: "note") pruneTerminal(before: "2000-01-01T00:00:00Z") }'
FRAGMENT = 'mutation { ...W } fragment W on Mutation { writeRunLog(runId: 7, kind: "note") }'

# (what, body, token, whether the plan answers it)
CASES: list[tuple[str, dict[str, Any], str | None, bool]] = [
    (
        "WriteNote",
        {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "hi", "actor": "ops"}},
        WRITER,
        True,
    ),
    ("WriteNote, no actor", {"query": WRITE_NOTE, "variables": {"runId": 7, "text": "hi"}}, WRITER, True),
    (
        "WriteNote, actor null",
        {
            "query": WRITE_NOTE,
            "variables": {"runId": "7", "text": "", "actor": None},
            "operationName": "WriteNote",
        },
        WRITER,
        True,
    ),
    (
        "WriteNote, extra variable",
        {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "x", "y": 1}},
        WRITER,
        True,
    ),
    (
        "WriteNote, a run id that is no id",
        {"query": WRITE_NOTE, "variables": {"runId": "seven", "text": "x"}},
        WRITER,
        True,
    ),
    ("WriteNote, run 0", {"query": WRITE_NOTE, "variables": {"runId": "0", "text": "x"}}, WRITER, True),
    (
        "WriteNote, too big",
        {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "é" * 40_000}},
        WRITER,
        True,
    ),
    ("WriteNote, no token", {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "x"}}, None, True),
    ("WriteNote, a reader", {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "x"}}, READER, True),
    ("WriteNote, no text", {"query": WRITE_NOTE, "variables": {"runId": "7"}}, WRITER, False),
    ("WriteNote, text null", {"query": WRITE_NOTE, "variables": {"runId": "7", "text": None}}, WRITER, False),
    (
        "WriteNote, text a number",
        {"query": WRITE_NOTE, "variables": {"runId": "7", "text": 5}},
        WRITER,
        False,
    ),
    (
        "WriteNote, run id a float",
        {"query": WRITE_NOTE, "variables": {"runId": 7.5, "text": "x"}},
        WRITER,
        False,
    ),
    (
        "WriteNote, run id a bool",
        {"query": WRITE_NOTE, "variables": {"runId": True, "text": "x"}},
        WRITER,
        False,
    ),
    (
        "WriteNote, run id a list",
        {"query": WRITE_NOTE, "variables": {"runId": ["7"], "text": "x"}},
        WRITER,
        False,
    ),
    ("WriteNote, variables null", {"query": WRITE_NOTE, "variables": None}, WRITER, False),
    (
        "every argument",
        {
            "query": EVERY_ARGUMENT,
            "variables": {
                "runId": "7",
                "kind": "run.status",
                "stepId": 4,
                "phase": 2,
                "detail": {"to": "live"},
            },
        },
        WRITER,
        True,
    ),
    (
        "every argument, keyed",
        {
            "query": EVERY_ARGUMENT,
            "variables": {"runId": "7", "kind": "note", "detail": {"text": "k"}, "key": "k1"},
        },
        WRITER,
        True,
    ),
    (
        "a detail that is no object",
        {"query": EVERY_ARGUMENT, "variables": {"runId": "7", "kind": "note", "detail": [1]}},
        WRITER,
        True,
    ),
    (
        "a phase past 32 bits",
        {"query": EVERY_ARGUMENT, "variables": {"runId": "7", "kind": "note", "phase": 2**31}},
        WRITER,
        False,
    ),
    (
        "a phase as text",
        {"query": EVERY_ARGUMENT, "variables": {"runId": "7", "kind": "note", "phase": "3"}},
        WRITER,
        False,
    ),
    ("a kind null", {"query": EVERY_ARGUMENT, "variables": {"runId": "7", "kind": None}}, WRITER, False),
    ("aliases", {"query": ALIASES, "variables": {"runId": "9", "text": "two"}}, WRITER, True),
    ("aliases, text left out", {"query": ALIASES, "variables": {"runId": "9"}}, WRITER, True),
    ("literals", {"query": LITERALS}, WRITER, True),
    ("nulls", {"query": NULLS}, WRITER, True),
    ("defaults", {"query": DEFAULTS, "variables": {}}, WRITER, True),
    ("defaults, phase null", {"query": DEFAULTS, "variables": {"phase": None}}, WRITER, True),
    ("defaults, kind null", {"query": DEFAULTS, "variables": {"kind": None}}, WRITER, False),
    ("a directive", {"query": SKIPPED, "variables": {"skip": True}}, WRITER, False),
    ("__typename", {"query": TYPENAME}, WRITER, False),
    ("with pruneTerminal", {"query": MIXED}, ADMIN, False),
    ("a fragment", {"query": FRAGMENT}, WRITER, False),
]


class Pair:
    """The same settings served as shipped, and through Strawberry alone."""

    def __init__(self, backend: Backend) -> None:
        settings = backend.settings(reader_tokens=(READER,), writer_tokens=(WRITER,))
        self.backend = backend
        self.planned = TestClient(create_app(settings))
        self.full = TestClient(create_app(settings, prepared=False))
        self.by_plan = 0  # requests the write plan answered
        view = self.planned.app.routes[0].endpoint  # type: ignore[attr-defined]
        run_writes = view.run_writes

        async def counting(*args: Any) -> Any:
            self.by_plan += 1
            return await run_writes(*args)

        view.run_writes = counting

    def __enter__(self) -> Pair:
        self.planned.__enter__()
        self.full.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.full.__exit__(*exc)
        self.planned.__exit__(*exc)

    def compare(
        self, caplog: pytest.LogCaptureFixture, body: dict[str, Any], token: str | None
    ) -> tuple[Any, bool]:
        """Send `body` to both; assert the same answers, lines and logs; answer it, and if the plan did."""
        raw = json.dumps(body).encode()
        headers = {"content-type": "application/json", "x-request-id": "same-request-id"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        seen = []
        planned = False
        for client in (self.planned, self.planned, self.full):
            before_plan = self.by_plan
            (last,) = self.backend.rows("SELECT COALESCE(MAX(id), 0) FROM event_run_log")
            caplog.clear()
            response = client.post("/graphql", content=raw, headers=headers)
            stored = self.backend.rows(
                "SELECT run_id, step_id, kind, phase, detail FROM event_run_log WHERE id > :last ORDER BY id",
                last=last[0],
            )
            # What the write logs; the plan's own fall-backs are logged by the
            # app that has one alone (tests/test_fallbacks.py).
            logged = [
                (r.name, r.levelno, r.getMessage())
                for r in caplog.records
                if r.name.startswith("gql") and r.name != "gql.fallback"
            ]
            seen.append(
                (response.status_code, sorted(response.headers.items()), response.content, stored, logged)
            )
            if client is self.planned:
                planned = self.by_plan > before_plan
        assert seen[0] == seen[1] == seen[2]
        return json.loads(seen[2][2]), planned


@pytest.fixture
def pair(tables: Backend) -> Iterator[Pair]:
    with Pair(tables) as made:
        yield made


@pytest.mark.parametrize(("what", "body", "token", "by_plan"), CASES, ids=[case[0] for case in CASES])
def test_a_write_is_answered_stored_and_logged_alike_with_and_without_the_plan(
    pair: Pair,
    caplog: pytest.LogCaptureFixture,
    what: str,
    body: dict[str, Any],
    token: str | None,
    by_plan: bool,
) -> None:
    if "key" in (body.get("variables") or {}):
        # A key stores its line once: each of the three sends needs its own.
        body = {**body, "variables": {**body["variables"]}}
        answers = []
        for n, client in enumerate((pair.planned, pair.planned, pair.full)):
            body["variables"]["key"] = f"key-{n}"
            with caplog.at_level(logging.INFO, logger="gql"):
                response = client.post("/graphql", json=body, headers={"authorization": f"Bearer {WRITER}"})
            answers.append(response.content)
        assert answers == [b'{"data":{"writeRunLog":true}}'] * 3
        assert len(pair.backend.rows("SELECT id FROM event_run_log")) == 3
        assert pair.by_plan == 1
        return
    with caplog.at_level(logging.INFO, logger="gql"):
        answer, planned = pair.compare(caplog, body, token)
    assert planned is by_plan, (what, answer)
    assert "data" in answer or "errors" in answer


def test_the_shipped_write_note_takes_the_write_plan(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    """What the generated clients send for WriteNote never reaches graphql-core's executor once prepared."""
    body = {"query": WRITE_NOTE, "variables": {"runId": "7", "text": "from the admin surface"}}
    body["operationName"] = "WriteNote"
    answer, planned = pair.compare(caplog, body, WRITER)
    assert answer == {"data": {"writeRunLog": True}}
    assert planned
    stored = pair.backend.rows("SELECT run_id, kind, detail FROM event_run_log")
    assert [(r.run_id, r.kind, json.loads(r.detail)) for r in stored] == [
        (7, "note", {"text": "from the admin surface", "actor": None})
    ] * 3


# ── the plan's coercion against graphql-core's ───────────────────────────────

_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=False),
        st.text(max_size=6),
        st.sampled_from(["7", "note", "0", "2147483648"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
# A JSON literal with variables at every depth, one with a default and some
# without, beside constants of every kind: the plan reads it once into
# functions (write_plan._literal).
NESTED = (
    "mutation Nested($runId: ID!, $a: JSON, $text: String, $phase: Int = 2) {"
    ' writeRunLog(runId: $runId, kind: "note",'
    ' detail: {list: [$a, 1, "x", {deep: $text}, null, 2.5, true, DONE], n: $phase, e: [], o: {}}) }'
)
DOCUMENTS = [WRITE_NOTE, EVERY_ARGUMENT, ALIASES, DEFAULTS, LITERALS, NULLS, NESTED]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.sampled_from(DOCUMENTS),
    variables=st.dictionaries(
        st.sampled_from(["runId", "text", "actor", "kind", "stepId", "phase", "detail", "key", "a"]), _values
    ),
)
def test_the_plan_reads_variables_and_arguments_as_graphql_core_does(
    text: str, variables: dict[str, Any]
) -> None:
    definitions = build_schema()
    schema = graphql_schema(definitions)
    document = parse(text)
    assert validate(schema, document) == []
    (operation,) = document.definitions
    plan = write_plan(definitions, operation)  # type: ignore[arg-type]
    assert plan is not None
    field = schema.mutation_type.fields[WRITE_FIELD]  # type: ignore[union-attr]
    # The resolver's keywords, by Strawberry's own naming of its arguments.
    resolver = definitions.get_field_for_type(WRITE_FIELD, "Mutation")
    assert resolver is not None
    names = {definitions.config.name_converter.from_argument(a): a.python_name for a in resolver.arguments}
    expected: list[tuple[str, dict[str, Any]]] | None = []
    coerced = get_variable_values(schema, operation.variable_definitions or (), variables)  # type: ignore[attr-defined]
    if isinstance(coerced, list):
        expected = None
    else:
        for node in operation.selection_set.selections:  # type: ignore[attr-defined]
            try:
                values = get_argument_values(field, node, coerced)
            except Exception:
                expected = None
                break
            key = node.alias.value if node.alias else node.name.value
            expected.append((key, {names[name]: value for name, value in values.items()}))  # type: ignore[union-attr]
    assert plan.arguments(variables) == expected


# Page queries: the read plan's coercion is the same `Coercion`, laid out
# (leaf-typed variables, lists of them) or graphql-core's (a list literal).
PAGE_QUERIES = [
    "query A($runId: ID!, $limit: Int, $after: String, $before: String, $phase: [Int!], $stepId: [ID!]) {"
    " runLog(runId: $runId, limit: $limit, after: $after, before: $before, phase: $phase, stepId: $stepId)"
    " { nodes { id } } }",
    "query B($runId: ID!, $limit: Int = 3, $since: DateTime) {"
    ' runLog(runId: $runId, limit: $limit, after: "x", since: $since) { nodes { id } } }',
    "query C($runId: ID!, $kinds: [RunLogKind!], $wait: Int) {"
    " runLog(runId: $runId, kinds: $kinds, wait: $wait) { nodes { id } } }",
    # A nullable variable with a default may stand at runId: ID!, and be sent null.
    'query F($runId: ID = "7", $limit: Int) { runLog(runId: $runId, limit: $limit) { nodes { id } } }',
    'query D { runLog(runId: "7", limit: 2, kinds: [NOTE]) { nodes { id } } }',
    "query E($kinds: [RunLogKind!]! = [NOTE], $runId: ID = 7) {"
    " runLog(runId: $runId, kinds: $kinds) { nodes { id } } }",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.sampled_from(PAGE_QUERIES + DOCUMENTS),
    variables=st.dictionaries(
        st.sampled_from(
            [
                "runId",
                "limit",
                "after",
                "before",
                "kinds",
                "wait",
                "phase",
                "stepId",
                "since",
                "text",
                "actor",
                "a",
            ]
        ),
        _values
        | st.lists(
            st.sampled_from(["NOTE", "RUN_STATUS", "nope", 3, None, "2026-12-03T10:00:00Z"]), max_size=2
        )
        | st.sampled_from(["2026-12-03T10:00:00Z", "2026-12-03", [[1]], ["7", 7, 2.0]]),
    ),
)
@example(text=PAGE_QUERIES[3], variables={"runId": None})  # null where ID! is needed
@example(text=PAGE_QUERIES[3], variables={})  # the default
def test_a_coercion_laid_out_once_gives_graphql_cores_values(text: str, variables: dict[str, Any]) -> None:
    schema = build_schema()._schema
    document = parse(text)
    assert validate(schema, document) == []
    (operation,) = document.definitions
    root = schema.query_type if operation.operation.value == "query" else schema.mutation_type  # type: ignore[attr-defined]
    fields = [
        (root.fields[node.name.value], node)  # type: ignore[union-attr]
        for node in operation.selection_set.selections  # type: ignore[attr-defined]
    ]
    coercion = Coercion(schema, operation, fields)  # type: ignore[arg-type]
    # A list literal, and a list default (a fresh list a request), are left to graphql-core.
    assert (coercion.steps is None) == (text in PAGE_QUERIES[4:])
    assert coercion.coerce(variables) == coercion.coerce_in_general(variables)


def test_the_shipped_operations_but_those_with_list_literals_take_the_laid_out_coercion() -> None:
    schema = build_schema()._schema
    laid_out = {}
    for path in sorted((Path(__file__).resolve().parent.parent / "gql" / "operations").glob("*.graphql")):
        definitions = parse(path.read_text()).definitions
        operations = [d for d in definitions if isinstance(d, OperationDefinitionNode)]
        if not operations or operations[0].operation.value == "subscription":
            continue  # fragments.graphql; the subscriptions are the websocket's
        (operation,) = operations
        root = schema.query_type if operation.operation.value == "query" else schema.mutation_type  # type: ignore[attr-defined]
        fields = [(root.fields[n.name.value], n) for n in operation.selection_set.selections]  # type: ignore[attr-defined,union-attr]
        laid_out[path.stem] = Coercion(schema, operation, fields).steps is not None  # type: ignore[arg-type]
    left = sorted(name for name, steps in laid_out.items() if not steps)
    assert left == ["RunHead", "RunHolds", "RunKindCounts"]  # their `kinds: []` literal
    assert {"RunLog", "RunLogPage", "RunLogByKinds", "WriteNote"} <= laid_out.keys()


@strawberry.type
class _MaybeQuery:
    ok: bool = True


@strawberry.type
class _OptionalWrite:
    @strawberry.mutation(name=WRITE_FIELD)
    def write(self, run_id: strawberry.ID | None) -> bool:
        return True


@strawberry.type
class _MaybeWrite:
    @strawberry.mutation(name=WRITE_FIELD)
    def write(self, run_id: strawberry.Maybe[strawberry.ID]) -> bool:
        return True


def test_an_argument_strawberry_wraps_in_some_is_left_to_strawberry() -> None:
    """A `Maybe` argument reaches its resolver as `Some(value)`, which the plan cannot hand over."""
    (operation,) = parse(f"mutation {{ {WRITE_FIELD}(runId: 1) }}").definitions
    assert isinstance(operation, OperationDefinitionNode)
    optional, maybe = (
        strawberry.Schema(query=_MaybeQuery, mutation=m) for m in (_OptionalWrite, _MaybeWrite)
    )
    assert write_plan(optional, operation) is not None
    assert write_plan(maybe, operation) is None
