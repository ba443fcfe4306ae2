"""A compiled completion of `runLog` pages (the documents it reads are cached by gql/documents.py).

graphql-core completes a 2,000-line page field by field: for every line and
every selected field it builds a resolve info, calls a resolver, resolves the
detail's union type by trying its 23 members, and coerces the leaf. That is
most of the time a big page takes. The page is plain data by then (the one
async root resolver has read it), so the work can be planned once per query.

`PageExecutor` is graphql-core's executor with one change: when it is about
to complete a `RunLogPage`, it builds (once per query document, cached) a
Python function that does the same completion for that selection set, and
calls it. Everything else stays graphql-core's: parsing, validation, variable
coercion, the root resolver (so its permission check, input checks, errors
and logging are the same code), error locations, null propagation.

The plan covers only what it knows to be plain data: fields read by
Strawberry's default resolver, the standard scalars, custom scalars and enums
through their own `coerce_output_value`, lists, and the detail union
dispatched on the exact class. A page's lines it serves straight from the
stored rows the resolver read (`RunLogPage.lines`): each field as the page
type's `line_sources` says, each detail from the values pydantic read
(`detail_codec.read_values`), converted as the detail's codec would convert them;
no `RunLogLine` and no detail object is made for a planned page: making them
was most of what a plan still cost (docs/performance.md, "What each piece
bought"). (`blockingRun` is plain data too: the page's resolver looks the
runs up in one query before the page is completed.)
Anything else in the selection (a field given a resolver, a permission class
or an extension later; a resolver middleware) makes the plan "not
compilable" and the page is completed by graphql-core as before, from the
lines `RunLogPage.nodes` makes. While completing, anything the plan did not
expect (a null where the schema says non-null, a value of another type, a
detail value its conversion refuses, a failed run lookup) abandons the plan's
result and hands the same page object to graphql-core, which then produces
exactly the data or errors it always would.

The plan cache is per schema (so per app) and only a cache: bounded, keyed by
the document's identity (the parse cache hands back one document object per
query text), and never holding request data.
"""

from __future__ import annotations

import enum
import itertools
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from graphql import (
    FieldNode,
    FragmentSpreadNode,
    GraphQLBoolean,
    GraphQLID,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLString,
    GraphQLUnionType,
    InlineFragmentNode,
    SelectionSetNode,
    Token,
    VariableNode,
    is_enum_type,
    is_scalar_type,
)
from graphql.pyutils import Undefined

from . import metrics
from .compat.graphql import (
    LEFT,
    CompletesObjects,
    FieldDetails,
    collect_subfields,
    deferred_or_fragment_arguments,
    has_middleware,
)
from .compat.strawberry import DefaultExecutionContext, is_default_resolver, strawberry_definition
from .detail_codec import read_values, stored_fields
from .details import DETAIL_TYPES, LOADED
from .documents import TOKEN_BYTES
from .store import Line, one_line_reason

log = logging.getLogger("gql.fastpath")

PAGE_TYPE_NAME = "RunLogPage"
PLAN_CACHE_SIZE = 256  # distinct runLog selections per process
PLAN_CACHE_BYTES = 32 * 1024 * 1024  # and what they may hold (see _PlanCache)
# A compiled plan holds about 11 bytes per character of its source (tracemalloc:
# 151 KB for the 13,000 characters of the frontend's page with every fragment).
PLAN_BYTES_PER_CHAR = 16
VARIANTS_PER_SELECTION = 16  # @skip/@include combinations kept per selection


class _Unplanned(Exception):
    """The plan met something it does not handle; graphql-core completes the page instead."""


class _NotCompilable(Exception):
    """The selection has something the plan does not cover (a resolver, a middleware...)."""


@dataclass
class Stats:
    """How pages were completed in this process: for tests and the benchmark."""

    planned: int = 0  # completed by a compiled plan
    unplanned: int = 0  # a plan gave up on a value; graphql-core completed the page
    not_compilable: int = 0  # the selection is outside the plan's cover
    compiled: int = 0  # plans built

    def reset(self) -> None:
        self.planned = self.unplanned = self.not_compilable = self.compiled = 0


STATS = Stats()


# ── the plan cache ───────────────────────────────────────────────────────────


@dataclass
class _Selection:
    """The plans for one runLog field's nodes, one per @skip/@include outcome."""

    nodes: tuple[FieldNode, ...]  # held so their ids stay theirs
    variables: tuple[str, ...]  # variables the selection's directives read
    plans: OrderedDict[tuple[Any, ...], Callable[[Any, Any], dict[str, Any]] | None] = field(
        default_factory=OrderedDict
    )
    held: int = 0  # bytes: the document its nodes keep alive, and its plans
    plan_bytes: dict[tuple[Any, ...], int] = field(default_factory=dict)
    why: str = ""  # why a variant has no plan (the compiler's words)


class _PlanCache:
    """Plans by selection, bounded in count and in bytes.

    A selection's nodes keep their whole document alive (a node's location
    links every token of the text), so each selection counts its document as
    `document_bytes` does, and each plan its compiled size.
    """

    def __init__(self, size: int, max_bytes: int = PLAN_CACHE_BYTES) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], _Selection] = OrderedDict()
        self.held_bytes = 0
        self.lock = threading.Lock()

    def add_plan(
        self,
        selection: _Selection,
        variant: tuple[Any, ...],
        plan: Callable[[Any, Any], Any] | None,
        held: int,
    ) -> None:
        with self.lock:
            counted = self.entries.get(tuple(map(id, selection.nodes))) is selection
            selection.plans[variant] = plan
            added = held - selection.plan_bytes.pop(variant, 0)
            selection.plan_bytes[variant] = held
            while len(selection.plans) > VARIANTS_PER_SELECTION:
                dropped, _ = selection.plans.popitem(last=False)
                added -= selection.plan_bytes.pop(dropped, 0)
            selection.held += added
            if counted:
                self.held_bytes += added
                self._evict()

    def _evict(self) -> None:
        while self.entries and (self.held_bytes > self.max_bytes or len(self.entries) > self.size):
            _, dropped = self.entries.popitem(last=False)
            self.held_bytes -= dropped.held

    def compiled(
        self, nodes: tuple[FieldNode, ...], coerced: dict[str, Any]
    ) -> Callable[[Any, Any], dict[str, Any]] | None:
        """The plan compiled for `nodes` with these variables' @skip/@include outcome; None if none yet.

        Compiles nothing: a plan is made by the executor (`PageExecutor`), on
        a selection's first page or at start-up (app._warm).
        """
        key = tuple(map(id, nodes))
        with self.lock:
            entry = self.entries.get(key)
            if entry is None or not all(a is b for a, b in zip(entry.nodes, nodes, strict=True)):
                return None
            try:
                variant = tuple(coerced.get(name, Undefined) for name in entry.variables)
                plan = entry.plans.get(variant)
            except TypeError:  # an unhashable value: the executor says so, and counts it
                return None
            if plan is not None:
                self.entries.move_to_end(key)
                entry.plans.move_to_end(variant)
            return plan

    def selection(self, nodes: tuple[FieldNode, ...], fragments: dict[str, Any]) -> _Selection:
        key = tuple(map(id, nodes))
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None and all(a is b for a, b in zip(entry.nodes, nodes, strict=True)):
                self.entries.move_to_end(key)
                return entry
        entry = _Selection(nodes=nodes, variables=_directive_variables(nodes, fragments))
        entry.held = _nodes_bytes(nodes)
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.held_bytes -= old.held
            self.entries[key] = entry
            self.held_bytes += entry.held
            self._evict()
        return entry


def _nodes_bytes(nodes: tuple[FieldNode, ...]) -> int:
    """What the document of `nodes` holds, as `document_bytes` counts it."""
    loc = nodes[0].loc if nodes else None
    if loc is None:
        return 0
    tokens = 0
    token: Token | None = loc.start_token
    while token is not None and token.prev is not None:
        token = token.prev
    while token is not None:
        tokens += 1
        token = token.next
    return 2 * sys.getsizeof(loc.source.body) + TOKEN_BYTES * tokens


def _directive_variables(nodes: tuple[FieldNode, ...], fragments: dict[str, Any]) -> tuple[str, ...]:
    """Every variable a directive reads anywhere under `nodes` (fragments followed)."""
    found: dict[str, None] = {}
    seen: set[str] = set()

    def walk(selection_set: SelectionSetNode | None) -> None:
        if selection_set is None:
            return
        for selection in selection_set.selections:
            for directive in selection.directives or ():
                for argument in directive.arguments or ():
                    if isinstance(argument.value, VariableNode):
                        found[argument.value.name.value] = None
            if isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name not in seen:
                    seen.add(name)
                    details = fragments.get(name)
                    if details is not None:
                        walk(details.definition.selection_set)
            elif isinstance(selection, FieldNode | InlineFragmentNode):
                walk(selection.selection_set)

    for node in nodes:
        walk(node.selection_set)
    return tuple(found)


# ── the executor ─────────────────────────────────────────────────────────────


class PageExecutor(CompletesObjects, DefaultExecutionContext):
    """graphql-core's executor, completing `RunLogPage` values with a compiled plan.

    Plugged in through the schema's public `execution_context_class`; it
    completes pages through `CompletesObjects` (gql/compat/graphql.py), which
    overrides a method graphql-core does not document as an extension point
    (hence the pinned versions in pyproject.toml).
    Completing a page field by field is most of a big page's CPU; what the
    plan buys on each shipped operation is in docs/performance.md ("What each
    piece bought").
    """

    # Plans are built against one schema's types: each schema's executor has
    # its cache (`with_plans`), and so each app.
    plans: ClassVar[_PlanCache]

    @classmethod
    def with_plans(cls) -> type[PageExecutor]:
        """This executor with a plan cache of its own, for one schema."""
        return type(cls.__name__, (cls,), {"plans": _PlanCache(PLAN_CACHE_SIZE)})

    completed_type = PAGE_TYPE_NAME

    def complete_object(
        self, return_type: GraphQLObjectType, field_details_list: list[FieldDetails], result: Any
    ) -> Any:
        plan = self._plan(return_type, field_details_list)
        if callable(plan):
            try:
                completed = plan(result, result)
            except _Unplanned:
                STATS.unplanned += 1
                self._fell_back(
                    "unexpected_value",
                    "the plan met a value it does not complete; graphql-core completes the page",
                )
            except Exception as exc:  # graphql-core decides: it raises the same at its field
                STATS.unplanned += 1
                self._fell_back(
                    "raised",
                    f"completing the page raised {type(exc).__name__}: {one_line_reason(exc)}; "
                    "graphql-core completes the page",
                    logging.WARNING,
                )
            else:
                STATS.planned += 1
                return completed
        else:
            STATS.not_compilable += 1
            self._fell_back(*plan)
        return LEFT

    def _fell_back(self, reason: str, why: str, level: int = logging.INFO) -> None:
        """Count a page completed by graphql-core for `reason`, and log it once for this document."""
        loc = self.operation.loc
        metrics.fell_back("page_plan", reason, None if loc is None else loc.source.body, why, level)

    def _plan(
        self, page_type: GraphQLObjectType, field_details_list: list[FieldDetails]
    ) -> Callable[[Any, Any], dict[str, Any]] | tuple[str, str]:
        """The page's plan, or why there is none: a reason (a metric's label) and words."""
        if has_middleware(self):
            return "middleware", "a resolver middleware must see every field"
        if deferred_or_fragment_arguments(field_details_list):
            return "defer_or_fragment_arguments", "the page is deferred or read through fragment arguments"
        nodes = tuple(d.node for d in field_details_list)
        cache = self.plans
        selection = cache.selection(nodes, self.fragments)
        coerced = self.variable_values.coerced
        try:
            variant = tuple(coerced.get(name, Undefined) for name in selection.variables)
            hash(variant)
        except TypeError:
            return "directive_variables", "a variable that @skip or @include reads is not hashable"
        with cache.lock:
            if variant in selection.plans:
                selection.plans.move_to_end(variant)
                known = selection.plans[variant]
                return known if known is not None else ("not_compilable", selection.why)
        compiler = _Compiler(self)
        try:
            plan: Callable[[Any, Any], dict[str, Any]] | None = compiler.compile(
                page_type, field_details_list
            )
            STATS.compiled += 1
            held = PLAN_BYTES_PER_CHAR * len(compiler.text)
        except _NotCompilable as exc:
            plan = None
            held = 0
            selection.why = f"the selection is outside the plan's cover: {exc}"
        cache.add_plan(selection, variant, plan, held)
        return plan if plan is not None else ("not_compilable", selection.why)


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
        raise _Unplanned
    coerced = gtype.coerce_output_value(value)
    if coerced is None or coerced is Undefined:
        raise _Unplanned
    return coerced


def _give_up(*_: Any) -> Any:
    raise _Unplanned


# How the compiler reads a field: an expression to complete, or the lines
# that set the field's local to its completed value.
Read = str | list[str]


class _Compiler:
    """Writes one Python function per (object type, selection) and compiles them together.

    Why generated source and not closures: an interpreted plan (closures built
    once per selection, the same checks, no `exec`) was built and measured
    against this one on the full RunLog query, and took markedly longer on
    the 2,000-line page, the case furthest from its goal (docs/performance.md,
    "What each piece bought"). The source is written from schema names only,
    never from a request.
    """

    def __init__(self, executor: PageExecutor) -> None:
        self.executor = executor
        self.names: dict[str, Any] = {
            "_leaf": _leaf,
            "_Unplanned": _Unplanned,
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
        self, page_type: GraphQLObjectType, field_details_list: list[FieldDetails]
    ) -> Callable[[Any, Any], dict[str, Any]]:
        self.page_origin = self.origin(page_type)
        entry = self.object_function(page_type, field_details_list)
        self.text = "\n".join(self.source)
        code = compile(self.text, f"<runLog plan {id(self):x}>", "exec")
        exec(code, self.names)  # noqa: S102 -- source written here, from schema names only
        for resolved, table in self.tables:
            resolved.update({cls: self.names[function] for cls, function in table.items()})
        function: Callable[[Any, Any], dict[str, Any]] = self.names[entry]
        return function

    def name(self, value: Any, prefix: str) -> str:
        key = f"{prefix}{next(self.counter)}"
        self.names[key] = value
        return key

    def object_function(self, gtype: GraphQLObjectType, field_details_list: list[FieldDetails]) -> str:
        """A function completing a strawberry object of `gtype`, read as the default resolver reads it."""
        cls = self.name(self.origin(gtype), "C")
        page = gtype.name == PAGE_TYPE_NAME

        def read(
            name: str, field_def: Any, python_name: str, details: list[FieldDetails], target: str
        ) -> Read:
            if page and name == "nodes":
                return [f"{target} = {self.nodes(field_def, details)}"]
            self.check_default_resolver(gtype, name, field_def)
            return f"o.{python_name}"

        return self.fields_function(gtype, field_details_list, "o", f"type(o) is not {cls}", read)

    def line_function(self, gtype: GraphQLObjectType, field_details_list: list[FieldDetails]) -> str:
        """A function completing a page's line straight from its stored row `r` and cursor `c`.

        Each field is read as the page type's `line_sources` says (what
        `page.as_line` computes), and the detail from the values
        `detail_codec.read_values` reads, by a function for its type that takes
        them as they are (`values_function`): no `RunLogLine` and no detail
        object is made.
        """
        sources = getattr(self.page_origin, "line_sources", None)
        if sources is None:
            raise _NotCompilable(f"{PAGE_TYPE_NAME} does not say how its lines are read")
        self.origin(gtype)

        def read(
            name: str, field_def: Any, python_name: str, details: list[FieldDetails], target: str
        ) -> Read:
            self.check_default_resolver(gtype, name, field_def)
            if python_name == "detail":
                return self.complete_detail(target, field_def.type, details)
            source = sources.get(python_name)
            if source is None:
                raise _NotCompilable(f"{gtype.name}.{name} has no source in a stored line")
            expression, names = source
            self.names.update(names)
            return str(expression)

        line = self.name(Line, "C")
        return self.fields_function(gtype, field_details_list, "r, c", f"type(r) is not {line}", read)

    def values_function(self, gtype: GraphQLObjectType, field_details_list: list[FieldDetails]) -> str:
        """A function completing a detail of `gtype` from the values `detail_codec.read_values` read."""
        stored = stored_fields(self.origin(gtype))

        def read(
            name: str, field_def: Any, python_name: str, _details: list[FieldDetails], _target: str
        ) -> Read:
            self.check_default_resolver(gtype, name, field_def)
            if strawberry_definition(field_def.extensions).metadata.get(LOADED):
                return f"pg.loaded({python_name!r}, o)"
            how = stored.get(python_name)
            if how is None:
                raise _NotCompilable(f"{gtype.name}.{name} is not stored")
            value = f"o[{python_name!r}]"
            if how.default is not ...:
                value = f"o.get({python_name!r}, {self.name(how.default, 'V')})"
            if how.convert is not None:
                value = f"{self.name(how.convert, 'X')}({value})"
            return value

        return self.fields_function(gtype, field_details_list, "o", "type(o) is not dict", read)

    def origin(self, gtype: GraphQLObjectType) -> type:
        origin = getattr(strawberry_definition(gtype.extensions), "origin", None)
        if not isinstance(origin, type):
            raise _NotCompilable(f"{gtype.name} is not a Strawberry type")
        if gtype.is_type_of is not None:
            raise _NotCompilable(f"{gtype.name} has is_type_of")
        return origin

    def check_default_resolver(self, gtype: GraphQLObjectType, name: str, field_def: Any) -> None:
        if not is_default_resolver(field_def.resolve):
            raise _NotCompilable(f"{gtype.name}.{name} has a resolver")
        if getattr(strawberry_definition(field_def.extensions), "default_resolver", getattr) is not getattr:
            raise _NotCompilable("the schema has a custom default resolver")

    def fields_function(
        self,
        gtype: GraphQLObjectType,
        field_details_list: list[FieldDetails],
        parameters: str,
        refused: str,
        read: Callable[[str, Any, str, list[FieldDetails], str], Read],
    ) -> str:
        """A function of `parameters` and the page `pg` answering the selected fields of `gtype`.

        It gives up when `refused` holds. `read` says how each field is read,
        given its name, definition, Python name, field details and the local
        to set: an expression, completed here as the field's type says, or
        the lines that set the local to the completed value themselves.
        """
        grouped = collect_subfields(self.executor, gtype, field_details_list)
        function = f"o{next(self.counter)}"
        body = [f"def {function}({parameters}, pg):", f"    if {refused}:", "        raise _Unplanned"]
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
                raise _NotCompilable(f"{gtype.name}.{field_name} has arguments")
            field_def = gtype.fields.get(field_name)
            if field_def is None:
                raise _NotCompilable(f"{gtype.name} has no field {field_name}")
            python_name = getattr(strawberry_definition(field_def.extensions), "python_name", None)
            if not isinstance(python_name, str) or not python_name.isidentifier():
                raise _NotCompilable(f"{gtype.name}.{field_name} has no attribute name")
            found = read(field_name, field_def, python_name, details, local)
            if isinstance(found, str):
                body.append(f"    v = {found}")
                found = self.complete("v", local, field_def.type, details)
            body.extend("    " + line for line in found)
        items = ", ".join(f"{key!r}: {local}" for key, local in keys)
        body.append(f"    return {{{items}}}")
        self.source.extend([*body, ""])
        return function

    def nodes(self, field_def: Any, details: list[FieldDetails]) -> str:
        """The page's `nodes`, completed: each stored line by a `line_function`."""
        gtype = field_def.type
        if not (
            isinstance(gtype, GraphQLNonNull)
            and isinstance(gtype.of_type, GraphQLList)
            and isinstance(gtype.of_type.of_type, GraphQLNonNull)
            and isinstance(gtype.of_type.of_type.of_type, GraphQLObjectType)
        ):
            raise _NotCompilable(f"{PAGE_TYPE_NAME}.nodes is not a list of objects")
        function = self.line_function(gtype.of_type.of_type.of_type, details)
        return f"[{function}(r, c, pg) for r, c in zip(o.lines, o.line_cursors)]"

    def complete_detail(self, target: str, gtype: Any, details: list[FieldDetails]) -> list[str]:
        """Lines setting `target` to the stored line `r`'s detail, as `detail_codec.read_values` reads it."""
        if not isinstance(gtype, GraphQLUnionType):
            raise _NotCompilable(f"a line's detail is a {gtype}, not a union")
        by_kind: dict[str, str] = {}
        for kind, tp in DETAIL_TYPES.items():
            member = next((m for m in gtype.types if self.origin(m) is tp), None)
            if member is None:
                raise _NotCompilable(f"{tp.__name__} is not a member of {gtype.name}")
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

    def complete(self, value: str, target: str, gtype: Any, details: list[FieldDetails]) -> list[str]:
        """Lines that set `target` to `value` completed as `gtype`, or raise _Unplanned.

        The common case costs one test: a value of the exact expected Python
        type. Anything else (None where non-null, graphql-core's Undefined, a
        value needing coercion) goes to `_leaf`, or makes an exact-type check
        fail, and so either coerces as graphql-core would or gives up.
        """
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
            "    raise _Unplanned",
            *self.complete_nullable(value, target, inner, details),
        ]

    def leaf(self, value: str, gtype: Any, nullable: bool) -> str | None:
        """One expression completing a standard scalar or an enum, or None for other types."""
        # A Strawberry enum's definition names its Python enum (`origin`).
        definition = strawberry_definition(gtype.extensions) if is_enum_type(gtype) else None
        wrapped = getattr(definition, "origin", None)
        slow = f"_leaf({self.name(gtype, 'T')}, {value})"
        if nullable:
            slow = f"(None if {value} is None else {slow})"
        if isinstance(wrapped, enum.EnumMeta):
            # Strawberry's enum coercion scans the values one by one; ask it once per member.
            # Keyed by the member's name: an enum member hashes in Python, its name in C.
            every: list[enum.Enum] = list(wrapped)
            names = self.name({m._name_: gtype.coerce_output_value(m) for m in every}, "M")
            return f"{names}[{value}._name_] if type({value}) is {self.name(wrapped, 'W')} else {slow}"
        fast = _IDENTITY_WHEN.get(gtype)
        if fast is not None:
            return f"{value} if {fast.format(v=value)} else {slow}"
        return None

    def complete_nullable(
        self, value: str, target: str, gtype: Any, details: list[FieldDetails]
    ) -> list[str]:
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
                "    raise _Unplanned",
                f"{target} = [{function}({item}, pg) for {item} in {value}]",
            ]
        if is_scalar_type(gtype) or is_enum_type(gtype):
            coerce = self.name(gtype.coerce_output_value, "F")
            return [
                f"{target} = {coerce}({value})",
                f"if {target} is None or {target} is _Undefined:",
                "    raise _Unplanned",
            ]
        if isinstance(gtype, GraphQLUnionType):
            dispatch = self.name(self.union_dispatch(gtype, details), "D")
            return [f"{target} = {dispatch}.get(type({value}), _give_up)({value}, pg)"]
        if isinstance(gtype, GraphQLObjectType):
            function = self.object_function(gtype, details)
            return [f"{target} = {function}({value}, pg)"]
        raise _NotCompilable(f"no plan for a value of type {gtype}")

    def item_function(self, gtype: Any, details: list[FieldDetails]) -> str:
        """A function completing one list item (lists are completed item by item)."""
        function = f"e{next(self.counter)}"
        lines = self.complete("x", "r", gtype, details)
        self.source.extend(
            [f"def {function}(x, pg):", *("    " + line for line in lines), "    return r", ""]
        )
        return function

    def union_dispatch(self, union: GraphQLUnionType, details: list[FieldDetails]) -> dict[type, Any]:
        """Exact class → completion function, for each member type of the union."""
        origins: list[tuple[type, GraphQLObjectType]] = []
        for member in union.types:
            origin = getattr(strawberry_definition(member.extensions), "origin", None)
            if not isinstance(origin, type):
                raise _NotCompilable(f"{member.name} is not a Strawberry type")
            origins.append((origin, member))
        for origin, _ in origins:
            for other, _member in origins:
                if other is not origin and issubclass(origin, other):
                    # Strawberry picks the first member the value is an instance
                    # of; an exact-class table could pick another.
                    raise _NotCompilable(f"{union.name} has members that subclass each other")
        table = {origin: self.object_function(member, details) for origin, member in origins}
        resolved: dict[type, Any] = {}
        self.tables.append((resolved, table))
        return resolved
