"""Property-based tests: generated operations, variables and raw bodies thrown at the HTTP app.

Operations come from hypothesis-graphql, which builds them from the schema
itself (valid ones, and ones with exactly one schema violation); variables and
bodies come from strategies of our own. Whatever arrives: never a 500, never
an error that shows the server's insides, never an unexpected (masked) error
on a healthy database, and never an error from `writeRunLog` for an operation
that passes validation; a write answered true is stored as sent.

The number of examples per test is RUNLOG_FUZZ_EXAMPLES (default 25, so the
suite stays fast); for a long run:

    RUNLOG_FUZZ_EXAMPLES=2000 scripts/test tests/test_fuzz.py
"""

from __future__ import annotations

import datetime
import json
import os
import string
from collections.abc import Callable
from typing import Any

import graphql
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import Mode, mutations, nodes, queries

from gql.api.schema import export_sdl
from gql.kinds import Kind

from .conftest import ADMIN, Api, Backend
from .details_examples import EXAMPLES
from .leaks import assert_clean_errors, leaks

settings.register_profile(
    "runlog-fuzz",
    max_examples=int(os.environ.get("RUNLOG_FUZZ_EXAMPLES", "25")),
    # Timings on a shared two-core machine say nothing about correctness.
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("runlog-fuzz")

SDL = export_sdl()
WRITE = (
    "mutation W($runId: ID!, $kind: String!, $stepId: ID, $phase: Int, $detail: JSON) {"
    " writeRunLog(runId: $runId, kind: $kind, stepId: $stepId, phase: $phase, detail: $detail) }"
)

# ── strategies ───────────────────────────────────────────────────────────────

_offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: datetime.timezone(datetime.timedelta(minutes=m)))
_datetimes = st.one_of(
    st.datetimes(),
    st.datetimes(timezones=_offsets),  # offsets near year 1 or 9999 cross the calendar's edge in UTC
)
_names = st.one_of(
    st.sampled_from(sorted({key for detail in EXAMPLES.values() for key in detail})),
    st.from_regex(r"\A[_A-Za-z][_0-9A-Za-z]{0,8}\Z"),
)


def _field(item: tuple[str, graphql.ValueNode]) -> graphql.ObjectFieldNode:
    return graphql.ObjectFieldNode(name=graphql.NameNode(value=item[0]), value=item[1])


_json_leaf_nodes = st.one_of(
    st.integers(-(2**70), 2**70).map(nodes.Int),
    st.floats(allow_nan=False, allow_infinity=False).map(nodes.Float),
    st.text(max_size=20).map(nodes.String),
    st.booleans().map(nodes.Boolean),
    st.just(nodes.Null),
)
_json_nodes = st.recursive(
    _json_leaf_nodes,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(nodes.List),
        st.dictionaries(_names, inner, max_size=5).map(
            lambda d: nodes.Object([_field(i) for i in d.items()])
        ),
    ),
    max_leaves=12,
)
CUSTOM_SCALARS = {
    "DateTime": st.one_of(_datetimes.map(lambda d: d.isoformat()), st.text(max_size=30)).map(nodes.String),
    "JSON": _json_nodes,
}

_json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=30),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_names, inner, max_size=5)),
    max_leaves=15,
)


@st.composite
def _details(draw: st.DrawFn, kind: str) -> Any:
    """A detail for `kind`: as a writer sends it, with one field spoilt, or anything at all."""
    known = {k.value: k for k in Kind}.get(kind)
    choice = ["example", "example", "spoilt", "anything"][draw(st.integers(0, 3))]
    if known is None or choice == "anything":
        return draw(_json_values)
    detail = dict(EXAMPLES[known])
    if choice == "spoilt":
        detail[draw(st.sampled_from([*detail, "extra"]))] = draw(_json_values)
    return detail


@st.composite
def write_variables(draw: st.DrawFn) -> dict[str, Any]:
    """Variables for `WRITE`: mostly a line a writer could send, the rest anything."""

    def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
        # Hypothesis leans towards the simplest choice (0, the first branch);
        # a die keeps the mix at about three good values to one bad.
        return draw(bad if draw(st.integers(0, 3)) == 3 else good)

    kind = mostly(st.sampled_from([k.value for k in Kind]), st.text(max_size=20))
    ids = st.one_of(
        st.integers(-5, 2**33), st.text(string.digits, min_size=1, max_size=12), st.text(max_size=8)
    )
    variables = {
        "runId": mostly(st.integers(1, 1000), ids),
        "kind": kind,
        "stepId": mostly(st.one_of(st.none(), st.integers(1, 1000)), ids),
        "phase": draw(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))),
        "detail": mostly(_details(kind), st.none()),
    }
    # Now and then a variable of the wrong type altogether: refused when the
    # variables are coerced, before any resolver runs.
    if draw(st.integers(0, 19)) == 19:
        variables[draw(st.sampled_from(sorted(variables)))] = draw(_json_values)
    return variables


_json_bodies = st.one_of(
    _json_values.map(json.dumps),
    st.fixed_dictionaries(
        {"query": st.one_of(st.text(max_size=60), _json_values)},
        optional={"variables": _json_values, "operationName": _json_values, "extensions": _json_values},
    ).map(json.dumps),
)
RAW_BODIES = st.tuples(
    st.one_of(st.binary(max_size=200), _json_bodies.map(str.encode), st.text(max_size=200).map(str.encode)),
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "application/graphql-response+json",
            "text/plain",
            "multipart/form-data; boundary=x",
            "application/x-www-form-urlencoded",
        ]
    ),
)

# ── checks ───────────────────────────────────────────────────────────────────


def checked(response: Any, sent: set[str]) -> dict[str, Any] | None:
    """The response's JSON after the checks every response must pass.

    `sent` gathers the words of `leaks` that the test's client sent: in a response, whatever its
    status, such a word is a leak unless the client sent it (a page shows what was written).
    """
    assert response.status_code < 500, response.text
    sent.update(leaks(response.request.content.decode(errors="replace")))
    leaked = [found for found in leaks(response.text) if found not in sent]
    assert not leaked, (leaked, response.text)
    if response.status_code != 200:
        return None
    body: dict[str, Any] = response.json()
    assert_clean_errors(body)
    for error in body.get("errors") or []:
        code = error.get("extensions", {}).get("code")
        # A healthy database: nothing unexpected, nothing unavailable.
        assert code not in ("INTERNAL_SERVER_ERROR", "DATABASE_UNAVAILABLE"), error
    return body


def write_keys(document: str) -> set[str]:
    """The response keys of the writeRunLog fields in a mutation."""
    keys = set()
    for definition in graphql.parse(document).definitions:
        if isinstance(definition, graphql.OperationDefinitionNode):
            for selection in definition.selection_set.selections:
                if isinstance(selection, graphql.FieldNode) and selection.name.value == "writeRunLog":
                    keys.add((selection.alias or selection.name).value)
    return keys


@pytest.fixture
def fuzzed(tables: Backend, make_api: Callable[..., Api]) -> Api:
    """The app with open reads and writes, some runs, and an admin token for the prune."""
    tables.add_run(1, "completed", "2025-01-01 00:00:00", "2025-01-01 00:00:00")
    tables.add_run(2, "live", None, "2025-01-01 00:00:00")
    return make_api()


# ── tests ────────────────────────────────────────────────────────────────────


def test_generated_valid_operations_never_fail_unexpectedly(fuzzed: Api) -> None:
    sent: set[str] = set()

    @FUZZ
    @given(
        st.one_of(queries(SDL, custom_scalars=CUSTOM_SCALARS), mutations(SDL, custom_scalars=CUSTOM_SCALARS))
    )
    def run(document: str) -> None:
        response = fuzzed.client.post(
            "/graphql", json={"query": document}, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        body = checked(response, sent)
        assert body is not None
        writes = write_keys(document)
        for error in body.get("errors") or []:
            # A write that passed validation answers a boolean, never an error.
            assert not (error.get("path") and error["path"][0] in writes), error
        if writes and "errors" not in body:
            assert all(isinstance(body["data"][key], bool) for key in writes)
        event("refused" if body.get("data") is None else "answered")

    run()


def test_generated_invalid_operations_are_refused_cleanly(fuzzed: Api) -> None:
    sent: set[str] = set()

    @FUZZ
    @given(
        st.one_of(
            queries(SDL, custom_scalars=CUSTOM_SCALARS, mode=Mode.NEGATIVE),
            mutations(SDL, custom_scalars=CUSTOM_SCALARS, mode=Mode.NEGATIVE),
        )
    )
    def run(document: str) -> None:
        response = fuzzed.client.post(
            "/graphql", json={"query": document}, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        body = checked(response, sent)
        assert body is not None and body.get("data") is None and body["errors"]

    run()


def test_generated_writes_answer_a_boolean_and_true_means_stored_as_sent(
    fuzzed: Api, tables: Backend
) -> None:
    sent: set[str] = set()

    @FUZZ
    @given(write_variables())
    def run(variables: dict[str, Any]) -> None:
        before = tables.scalar("SELECT MAX(id) FROM event_run_log") or 0
        body = checked(fuzzed.client.post("/graphql", json={"query": WRITE, "variables": variables}), sent)
        assert body is not None
        stored = tables.rows("SELECT run_id, kind, detail FROM event_run_log WHERE id > :id", id=before)
        if "errors" in body:
            # Only the variables' coercion may refuse it, before any resolver.
            assert "data" not in body
            assert all("path" not in e and e["message"].startswith("Variable '$") for e in body["errors"])
            assert stored == []
            event("refused while coercing the variables")
            return
        event(f"answered {body['data']['writeRunLog']}")
        if body["data"]["writeRunLog"]:
            ((run_id, kind, detail),) = stored
            assert (str(run_id), kind) == (str(variables["runId"]).lstrip("0") or "0", variables["kind"])
            assert (None if detail is None else json.loads(detail)) == variables["detail"]
        else:
            assert stored == []

    run()


def test_generated_raw_bodies_never_get_a_500(fuzzed: Api) -> None:
    sent: set[str] = set()

    @FUZZ
    @given(RAW_BODIES)
    def run(raw: tuple[bytes, str]) -> None:
        content, content_type = raw
        checked(fuzzed.client.post("/graphql", content=content, headers={"Content-Type": content_type}), sent)

    run()
