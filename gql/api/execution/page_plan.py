"""`PageExecutor`: graphql-core's executor, completing a `RunLogPage` with a plan compiled once per selection.

A plan serves the page's stored rows directly; a selection it does not cover, or a value it
did not expect, leaves the page to graphql-core as it always would.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from graphql import (
    FieldNode,
    GraphQLObjectType,
    Token,
    VariableNode,
)
from graphql.pyutils import Undefined

from ... import metrics
from ...compat.graphql import CompletesObjects, Fields, deferred_or_fragment_arguments
from ...store import one_line_reason
from ..query_shape import selections
from .compiler import PAGE_TYPE_NAME, Compiler, NotCompilable, Unplanned
from .documents import TOKEN_BYTES
from .variables import VariablesExecutor

log = logging.getLogger("gql.api.execution")

PLAN_CACHE_SIZE = 256  # distinct runLog selections per process
PLAN_CACHE_BYTES = 32 * 1024 * 1024  # and what they may hold (see _PlanCache)
# A compiled plan holds about 11 bytes per character of its source (tracemalloc).
PLAN_BYTES_PER_CHAR = 16
VARIANTS_PER_SELECTION = 16  # @skip/@include combinations kept per selection


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
    """Plans by selection, bounded in count and in bytes (counting the document its nodes keep alive)."""

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
    definitions = {name: details.definition for name, details in fragments.items()}
    found: dict[str, None] = {}
    for selection in selections((node.selection_set for node in nodes), definitions):
        for directive in selection.directives or ():
            for argument in directive.arguments or ():
                if isinstance(argument.value, VariableNode):
                    found[argument.value.name.value] = None
    return tuple(found)


# ── the executor ─────────────────────────────────────────────────────────────


class PageExecutor(CompletesObjects, VariablesExecutor):
    """graphql-core's executor, completing `RunLogPage` values with a compiled plan (`CompletesObjects`)."""

    # Plans are built against one schema's types: a cache per schema (`with_plans`).
    plans: ClassVar[_PlanCache]
    # The Strawberry schema, whose public lookups map a graphql-core type or field back to its
    # Python definition; set by `build_schema` once the schema is made.
    strawberry_schema: ClassVar[Any]

    @classmethod
    def with_plans(cls) -> type[PageExecutor]:
        """This executor with a plan cache of its own, for one schema."""
        return type(cls.__name__, (cls,), {"plans": _PlanCache(PLAN_CACHE_SIZE)})

    completed_type = PAGE_TYPE_NAME

    def complete_object(self, return_type: GraphQLObjectType, field_details_list: Fields, result: Any) -> Any:
        plan = self.page_plan(return_type, field_details_list)
        if callable(plan):
            try:
                completed = plan(result, result)
            except Unplanned:
                self._fell_back(
                    "unexpected_value",
                    "the plan met a value it does not complete; graphql-core completes the page",
                )
            except Exception as exc:  # graphql-core decides: it raises the same at its field
                self._fell_back(
                    "raised",
                    f"completing the page raised {type(exc).__name__}: {one_line_reason(exc)}; "
                    "graphql-core completes the page",
                    logging.WARNING,
                )
            else:
                return completed
        else:
            self._fell_back(*plan)
        return self.LEFT

    def _fell_back(self, reason: str, why: str, level: int = logging.INFO) -> None:
        """Count a page completed by graphql-core for `reason`, and log it once for this document."""
        loc = self.operation.loc
        metrics.fell_back("page_plan", reason, None if loc is None else loc.source.body, why, level)

    def page_plan(
        self, page_type: GraphQLObjectType, field_details_list: Fields
    ) -> Callable[[Any, Any], dict[str, Any]] | tuple[str, str]:
        """The page's plan, or why there is none: a reason (a metric's label) and words."""
        # `middleware_manager` and its `middlewares`: documented attributes of graphql-core's
        # Executor and MiddlewareManager (graphql-core's docs, execution module).
        manager = self.middleware_manager
        if manager is not None and manager.middlewares:
            return "middleware", "a resolver middleware must see every field"
        if deferred_or_fragment_arguments(field_details_list):
            return "defer_or_fragment_arguments", "the page is deferred or read through fragment arguments"
        nodes = tuple(d.node for d in field_details_list)
        cache = self.plans
        selection = cache.selection(nodes, self.fragments)
        values = self.variable_values.coerced  # graphql-core 3.3's public VariableValues
        try:
            variant = tuple(values.get(name, Undefined) for name in selection.variables)
            hash(variant)
        except TypeError:
            return "directive_variables", "a variable that @skip or @include reads is not hashable"
        with cache.lock:
            if variant in selection.plans:
                selection.plans.move_to_end(variant)
                known = selection.plans[variant]
                return known if known is not None else ("not_compilable", selection.why)
        compiler = Compiler(self)
        try:
            plan: Callable[[Any, Any], dict[str, Any]] | None = compiler.compile(
                page_type, field_details_list
            )
            held = PLAN_BYTES_PER_CHAR * len(compiler.text)
        except NotCompilable as exc:
            plan = None
            held = 0
            selection.why = f"the selection is outside the plan's cover: {exc}"
        cache.add_plan(selection, variant, plan, held)
        return plan if plan is not None else ("not_compilable", selection.why)
