"""The workload: the operations the clients ship, as the clients send them.

Every operation in `gql/operations/*.graphql` is a case, with no list of them
here: an operation added there is benchmarked by the next run. Its text is what
the TypeScript client sends (`print(document)` of the operation and the
fragments it uses, in the order graphql-codegen puts them; `tests/test_bench.py`
checks that against `clients/ts/src/generated/graphql.ts`), and its variables
are filled from their names and types (`VALUES`). An operation with a required
variable the bench has no value for is skipped, and the report says so.

Beside the shipped operations, `every_detail_field` builds, from the running
service's introspection, a page query that selects every field of every detail
type (nested objects and `blockingRun` included), so a field added to a detail
is read by the benchmark too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    TypeNode,
    VariableDefinitionNode,
    build_client_schema,
    get_introspection_query,
    parse,
    print_ast,
)
from graphql.language import ListTypeNode, NonNullTypeNode

from gql.api.page import RUN_STATE_FIELDS
from gql.kinds import Kind
from tests import local

OPERATIONS = Path(__file__).resolve().parent.parent / "gql" / "operations"

HOT_RUN = 2  # the run every read reads
WRITE_RUN = 9999  # the run every write writes to: the reads' run stays as filled
RARE_KIND = Kind.CLEANUP_RETRY  # one line in a hundred
NOTE_TEXT = "checked the spawn points by hand"
# See Workload.holds; RunHead (the run page's) is RunHolds and RunKindCounts in one call.
HOLDS_OPERATIONS = ("RunHolds", "RunHead", "RunsInFlight")
COUNTS_OPERATIONS = ("RunKindCounts",)  # see Workload.counts


@dataclass(frozen=True)
class Operation:
    """One operation as a client sends it."""

    name: str
    kind: str  # "query", "mutation" or "subscription"
    text: str
    variables: tuple[VariableDefinitionNode, ...]
    origin: str  # the file it came from, or "introspection"
    skip: str | None = None  # why the bench cannot send it, when it cannot
    # With --against: what the revision is sent in its place (`as_at_revision`); None, this same text.
    at_revision: Operation | None = None

    @property
    def live(self) -> bool:
        """A subscription or a long poll (`$wait`): it waits for lines by design (see Workload.live)."""
        return self.kind == "subscription" or any(d.variable.name.value == "wait" for d in self.variables)

    def values(self, limit: int, after: str | None = None) -> dict[str, Any]:
        """The variables for one request of a case: `limit` lines a page, the page `after`."""
        case = Case(limit=limit, after=after, write=self.kind == "mutation")
        values: dict[str, Any] = {}
        for definition in self.variables:
            name = definition.variable.name.value
            make = VALUES.get(name)
            if make is None:
                continue  # optional, or refused in `_unfillable`
            value = make(case, definition.type)
            if value is not _OMIT:
                values[name] = value
        return values

    def body(self, limit: int, after: str | None = None) -> str:
        """The request body, as the TypeScript client writes it (`JSON.stringify`)."""
        payload = {"query": self.text, "variables": self.values(limit, after)}
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)

    def has_variable(self, name: str) -> bool:
        return any(d.variable.name.value == name for d in self.variables)


@dataclass(frozen=True)
class Case:
    limit: int
    after: str | None
    write: bool


_OMIT = object()


def _kind(case: Case, declared: TypeNode) -> Any:
    """A kind to filter on (a rare one, as `RunLogKind`), or to write (`note`, as a wire name)."""
    if _type_name(declared) == "RunLogKind":
        return [RARE_KIND.name] if _is_list(declared) else RARE_KIND.name
    return [Kind.NOTE.value] if _is_list(declared) else Kind.NOTE.value


# A variable's value by its name (and the type the operation declares it with).
VALUES: dict[str, Callable[[Case, TypeNode], Any]] = {
    "runId": lambda c, _: str(WRITE_RUN if c.write else HOT_RUN),
    "limit": lambda c, _: c.limit,
    "after": lambda c, _: _OMIT if c.after is None else c.after,
    "kinds": _kind,
    "kind": _kind,
    "text": lambda c, _: NOTE_TEXT,
    "actor": lambda c, _: "gm.alice",
    # A write's step and phase; a read's filters (lists) are left out, so its page is the unfiltered one.
    "stepId": lambda c, d: _OMIT if _is_list(d) else "4",
    "phase": lambda c, d: _OMIT if _is_list(d) else 2,
    "detail": lambda c, _: {"text": NOTE_TEXT, "actor": "gm.alice"},
}


def _is_list(node: TypeNode) -> bool:
    if isinstance(node, NonNullTypeNode):
        node = node.type
    return isinstance(node, ListTypeNode)


def _type_name(node: TypeNode) -> str:
    while isinstance(node, NonNullTypeNode | ListTypeNode):
        node = node.type
    return str(node.name.value)  # type: ignore[attr-defined]


def _unfillable(definitions: tuple[VariableDefinitionNode, ...]) -> str | None:
    """Why the bench cannot fill these variables, or None when it can."""
    missing = [
        f"${d.variable.name.value}: {print_ast(d.type)}"
        for d in definitions
        if d.variable.name.value not in VALUES
        and isinstance(d.type, NonNullTypeNode)
        and d.default_value is None
    ]
    if not missing:
        return None
    names = ", ".join(missing)
    return f"no value for the required variable(s) {names}: add them to VALUES in bench/operations.py"


# ── the shipped operations ───────────────────────────────────────────────────


def shipped(folder: Path = OPERATIONS) -> list[Operation]:
    """Every operation in `folder`, each with the fragments it uses, as the TypeScript client prints it."""
    return shipped_in({path.name: path.read_text() for path in sorted(folder.glob("*.graphql"))})


def shipped_in(files: dict[str, str], where: str = "") -> list[Operation]:
    """Every operation in `files` (a `.graphql` file's name: its text), as `shipped` builds them.

    `where` goes before each operation's origin: a revision's (`cb6a918:RunLog.graphql`).
    """
    definitions = [
        (f"{where}{name}", d) for name, text in sorted(files.items()) for d in parse(text).definitions
    ]
    fragments = {d.name.value: d for _, d in definitions if isinstance(d, FragmentDefinitionNode)}
    operations = []
    for origin, definition in definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        used: list[FragmentDefinitionNode] = []
        _collect(definition.selection_set, fragments, used)
        document = DocumentNode(definitions=(definition, *used))
        variables = tuple(definition.variable_definitions or ())
        operations.append(
            Operation(
                name=definition.name.value if definition.name else f"(anonymous in {origin})",
                kind=definition.operation.value,
                text=print_ast(document),
                variables=variables,
                origin=origin,
                skip=_unfillable(variables),
            )
        )
    return operations


def _collect(
    selection_set: SelectionSetNode | None,
    fragments: dict[str, FragmentDefinitionNode],
    used: list[FragmentDefinitionNode],
) -> None:
    """Add the fragments `selection_set` spreads, each after the ones it spreads itself.

    That is the order graphql-codegen's typed documents list them in, so the
    printed text is the one the TypeScript client sends.
    """
    if selection_set is None:
        return
    for selection in selection_set.selections:
        if isinstance(selection, FragmentSpreadNode):
            fragment = fragments[selection.name.value]
            if fragment not in used:
                _collect(fragment.selection_set, fragments, used)
                if fragment not in used:
                    used.append(fragment)
        else:
            _collect(getattr(selection, "selection_set", None), fragments, used)


def as_at_revision(ours: Operation, theirs: list[Operation], label: str) -> Operation:
    """What to send the revision (`--against`) for `ours`: its own operation of that name.

    A revision serves its own schema, so it is sent the operation it shipped
    under that name, its variables filled from `VALUES` as this tree's are
    (the same run, limit and cursor; the filters left out). When it shipped
    none, or one the bench cannot fill, the result's `skip` says why.
    """
    found = next((op for op in theirs if op.name == ours.name), None)
    if found is None:
        why = f"{label} ships no operation {ours.name}"
        return Operation(ours.name, ours.kind, "", (), label, skip=why)
    if found.kind != ours.kind:
        why = f"{label}'s {ours.name} is a {found.kind}, this tree's a {ours.kind}"
        return dataclasses.replace(found, skip=why)
    return found


# ── every field of every detail type, from the running service ──────────────


def introspect(port: int) -> GraphQLSchema:
    """The running service's schema, as a client sees it through introspection."""
    response = local.post(
        f"http://127.0.0.1:{port}/graphql", json={"query": get_introspection_query()}, timeout=30
    )
    response.raise_for_status()
    return build_client_schema(response.json()["data"])


def every_detail_field(port: int) -> Operation:
    """The page query selecting every field of every detail type, as the service at `port` has them."""
    return every_detail_field_of(introspect(port))


def every_detail_field_of(schema: GraphQLSchema) -> Operation:
    """A page query selecting every field of the line, of every detail type and of what they link to."""
    line = schema.get_type("RunLogLine")
    page = schema.get_type("RunLogPage")
    assert isinstance(line, GraphQLObjectType) and isinstance(page, GraphQLObjectType)
    details = [
        t
        for name, t in sorted(schema.type_map.items())
        if isinstance(t, GraphQLObjectType) and (name.endswith("Detail")) and not name.startswith("__")
    ]
    detail_field = line.fields["detail"]
    union = _named(detail_field.type)
    assert isinstance(union, GraphQLUnionType), "RunLogLine.detail is no longer a union"
    members = {t.name for t in union.types}
    spreads = " ".join(
        f"... on {t.name} {{ {_all_fields(t, depth=3)} }}" for t in details if t.name in members
    )
    nodes = " ".join(
        f"detail {{ __typename {spreads} }}" if name == "detail" else _select(name, f.type, depth=3)
        for name, f in line.fields.items()
        if not f.args or name == "detail"
    )
    page_info = _all_fields(_named(page.fields["pageInfo"].type), depth=1)  # type: ignore[arg-type]
    text = (
        "query EveryDetailField($runId: ID!, $limit: Int, $after: String) {"
        " runLog(runId: $runId, limit: $limit, after: $after) {"
        f" nodes {{ {nodes} }} pageInfo {{ {page_info} }} }} }}"
    )
    document = parse(text)
    (definition,) = document.definitions
    assert isinstance(definition, OperationDefinitionNode)
    return Operation(
        name="EveryDetailField",
        kind=OperationType.QUERY.value,
        text=print_ast(document),
        variables=tuple(definition.variable_definitions or ()),
        origin="introspection",
    )


def _named(tp: Any) -> GraphQLNamedType:
    while isinstance(tp, GraphQLNonNull | GraphQLList):
        tp = tp.of_type
    named: GraphQLNamedType = tp
    return named


def _select(name: str, tp: Any, depth: int) -> str:
    inner = _named(tp)
    if isinstance(inner, GraphQLObjectType):
        if depth == 0:
            return ""
        return f"{name} {{ {_all_fields(inner, depth - 1)} }}"
    return name


def _all_fields(tp: GraphQLObjectType, depth: int) -> str:
    """Every field of `tp` that takes no required argument, objects `depth` levels down."""
    parts = (
        _select(name, f.type, depth)
        for name, f in tp.fields.items()
        if not any(isinstance(a.type, GraphQLNonNull) for a in f.args.values())
        # What holds a linked run is bench/holds.py's case: the floors serve a run's row only.
        and not (tp.name == "Run" and name in RUN_STATE_FIELDS)
    )
    return " ".join(p for p in parts if p)


@dataclass
class Workload:
    """The operations a run benchmarks, and the ones it had to leave out."""

    reads: list[Operation] = field(default_factory=list)
    writes: list[Operation] = field(default_factory=list)
    skipped: list[Operation] = field(default_factory=list)
    # Live reads, left out on purpose: a subscription is served over the
    # websocket and a long poll (`wait`) waits by design, so neither has a
    # throughput to compare with the floor's; what they cost is what they
    # hold while idle (bench/idle_tails.py).
    live: list[Operation] = field(default_factory=list)
    # What holds a run (RunHolds, RunsInFlight): the floors serve no holds, so
    # these are timed by `--only holds` (bench/holds.py), beside a page.
    holds: list[Operation] = field(default_factory=list)
    # Counts by kind (RunKindCounts): no page, which is all the floors serve, so
    # `--only find` (bench/find.py) times them, beside a page.
    counts: list[Operation] = field(default_factory=list)

    @classmethod
    def build(cls, port: int) -> Workload:
        workload = cls()
        for operation in [*shipped(), every_detail_field(port)]:
            if operation.live:
                workload.live.append(operation)
            elif operation.name in HOLDS_OPERATIONS:
                workload.holds.append(operation)
            elif operation.name in COUNTS_OPERATIONS:
                workload.counts.append(operation)
            elif operation.skip is not None:
                workload.skipped.append(operation)
            elif operation.kind == "mutation":
                workload.writes.append(operation)
            elif operation.kind == "query":
                workload.reads.append(operation)
            else:
                workload.skipped.append(
                    Operation(**{**operation.__dict__, "skip": f"a {operation.kind} is not benchmarked"})
                )
        return workload

    def against(self, theirs: list[Operation], label: str) -> None:
        """Give each read and write the operation of its name in `theirs`, a revision's, to send it."""
        self.reads = [
            dataclasses.replace(op, at_revision=as_at_revision(op, theirs, label)) for op in self.reads
        ]
        self.writes = [
            dataclasses.replace(op, at_revision=as_at_revision(op, theirs, label)) for op in self.writes
        ]

    def read(self, name: str) -> Operation | None:
        return next((op for op in self.reads if op.name == name), None)

    def write(self, name: str) -> Operation | None:
        return next((op for op in self.writes if op.name == name), None)
