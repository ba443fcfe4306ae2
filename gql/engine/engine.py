"""`Engine`: the one way in to answering a known operation without graphql-core's executor.

`Engine.plan(text, operation_name, variables)` gives a `Planned` request the view runs
with its context, or None (counted and logged) to leave it to Strawberry.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any, TypeGuard

from graphql import (
    DocumentNode,
    ExecutionResult,
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    execute,
    parse,
)
from strawberry import Schema

from .. import metrics
from ..compat.strawberry import graphql_schema
from ..limits import MAX_VARIABLE_VALUES, PageReads, sample_variables, variable_values
from ..page import Context
from ..query_shape import fragments_of
from ..run_log import write_line
from .documents import NOT_RUN, DocumentCaches
from .page_plan import PageExecutor
from .plans import Plans
from .read_plan import READ_FIELD, ReadPlan
from .write_plan import WritePlan


def _declined(reason: str, query: str | None, why: str) -> None:
    """Count a request left to Strawberry's pipeline, and log it once per text."""
    # A text's first request is how it gets prepared, not a fault: at DEBUG.
    level = logging.DEBUG if reason == "not_prepared" else logging.INFO
    metrics.fell_back("prepared", reason, query, why, level)


@dataclass(slots=True)
class Planned:
    """A request the engine answers: run it with the request's context (`write` or `execute`)."""

    engine: Engine
    document: DocumentNode
    operation: OperationDefinitionNode
    query: str
    name: str | None
    variables: dict[str, Any] | None
    writes: list[tuple[str, dict[str, Any]]] | None = None  # a write plan's fields, coerced
    read: ReadPlan | None = None

    async def write(self, context: Context) -> dict[str, object]:
        """The data of a mutation the write plan answers: its fields written in turn, as the executor does."""
        return {key: await write_line(context, [key], **values) for key, values in self.writes or ()}

    async def execute(self, context: Context) -> ExecutionResult:
        """The result of a query (or a mutation the write plan does not answer), as Strawberry's gives it.

        Its errors have been through the schema's `process_errors`.
        """
        try:
            outcome = None
            if self.read is not None:
                outcome = await self.read.answer(context, self.variables, self.query)
            if outcome is None:
                executed = execute(
                    self.engine.graphql_schema,
                    self.document,
                    root_value=None,  # the view does not override get_root_value
                    context_value=context,
                    variable_values=self.variables,
                    operation_name=self.name,
                    executor_class=self.engine.executor_class,
                    is_awaitable=is_awaitable,
                )
                outcome = await executed if isawaitable(executed) else executed
        except Exception as exc:  # as Strawberry's execute: the error is the answer
            outcome = ExecutionResult(data=None, errors=[GraphQLError(str(exc), original_error=exc)])
        if outcome.errors:
            self.engine.schema.process_errors(outcome.errors)
        return outcome


# Values that are never awaitable: most of what a page's fields resolve to.
_NEVER_AWAITED = frozenset({type(None), bool, int, float, str, bytes, list, tuple, dict})


def is_awaitable(value: Any) -> TypeGuard[Awaitable[Any]]:
    """graphql-core's `is_awaitable`, answering at once for the plain values a page is made of."""
    return type(value) not in _NEVER_AWAITED and isawaitable(value)


class Engine:
    """Answers the operations clients send once they are known: parsed, validated and planned once."""

    def __init__(self, schema: Schema, caches: DocumentCaches, max_lines: int) -> None:
        self.schema = schema
        self.graphql_schema = graphql_schema(schema)
        self.caches = caches
        self.max_lines = max_lines
        self.executor_class: Any = schema.execution_context_class
        executor: Any = self.executor_class
        # Read plans only with build_schema's executor, which compiles the page plans.
        pages = executor if isinstance(executor, type) and issubclass(executor, PageExecutor) else None
        self.pages: type[PageExecutor] | None = pages
        self.plans = Plans(schema, pages)

    @property
    def page_plans(self) -> Any:
        """The page plan cache (None without build_schema's executor), for `/metrics`."""
        return getattr(self.executor_class, "plans", None)

    def plan(self, query: str, name: str | None, variables: dict[str, Any] | None) -> Planned | None:
        """The request, planned; None (counted, with why) when Strawberry's pipeline must answer it."""
        prepared = self.caches.prepared_operation(query, name)
        if prepared is None:
            # A text's first request (or one evicted, or not valid): Strawberry
            # parses and validates it, and prepares it for the next.
            _declined("not_prepared", query, "the text is not prepared (first seen, evicted, or not valid)")
            return None
        document, operation = prepared
        if operation.operation == OperationType.SUBSCRIPTION:
            # Refused by RequestLimits: a subscription is served over the websocket.
            _declined("subscription", query, "a subscription sent by POST")
            return None
        planned = Planned(self, document, operation, query, name, variables)
        plan = self.plans.plan(operation, functools.partial(fragments_of, document))
        if isinstance(plan, WritePlan):  # writes alone: no lines asked
            if len(operation.variable_definitions or ()) > MAX_VARIABLE_VALUES:
                metrics.fell_back(
                    "write_plan", "too_many_values", query, "more variables than RequestLimits counts"
                )
            else:
                # Within RequestLimits' count of values once they coerce: a plan's variables
                # are scalars, each counting one (limits.variable_values).
                planned.writes = plan.arguments(variables)
                if planned.writes is not None:
                    return planned
                # The executor's error for it, with its log: the normal way.
                metrics.fell_back(
                    "write_plan", "not_coerced", query, "a variable or argument does not coerce"
                )
        else:
            if operation.operation == OperationType.MUTATION:
                metrics.fell_back(
                    "write_plan", "not_planned", query, "not a mutation of plain writeRunLog fields"
                )
            if isinstance(plan, ReadPlan):
                reads = plan.reads
            else:
                reads = PageReads.of(operation, fragments_of(document))
            if reads.lines(variables)[0] > self.max_lines:
                _declined("too_many_lines", query, "over RUNLOG_MAX_LINES_PER_REQUEST, refused by Strawberry")
                return None
        if variable_values(operation, variables) > MAX_VARIABLE_VALUES:
            # Refused by RequestLimits, in Strawberry's pipeline.
            _declined("too_many_values", query, "too many variable values, refused by Strawberry")
            return None
        if isinstance(plan, ReadPlan):
            planned.read = plan
        elif plan is None and reads_pages(operation):
            metrics.fell_back("read_plan", "not_planned", query, "not a query of one plain runLog field")
        return planned

    async def warm(self, texts: Iterable[str]) -> list[str]:
        """Parse and validate each text, and plan its queries and mutations, executing none; those not valid.

        Those are the texts refused under the app's rules (its limits included). Pages are
        compiled for sample variables; a query whose variables cannot be sampled has its pages
        compiled by its first request.
        """
        texts = list(texts)
        # Parsed and validated once a process: the suite builds an app per test.
        self.caches.share(self.schema.as_str(), texts)
        unchecked = []
        for text in texts:
            operations = _operations(text) or ()  # () for a text that does not parse
            names = [name for name, _ in operations]
            # An anonymous operation must be alone (validation says so; Strawberry would raise).
            valid = bool(names) and (len(names) == 1 or None not in names)
            if valid:
                # One validation a text: its result is cached by text, whatever operation is named.
                result = await self.schema.execute(text, operation_name=names[0], context_value=NOT_RUN)
                valid = not result.errors  # refused by the request limits too, as each request of it will be
            if not valid:
                unchecked.append(text)
                continue
            for name, kind in operations:
                if kind in (OperationType.QUERY, OperationType.MUTATION):
                    self._plan(text, name)
        return unchecked

    def _plan(self, text: str, name: str | None) -> None:
        prepared = self.caches.prepared_operation(text, name)
        if prepared is None:
            return  # held by no cache (too long a text): planned when asked
        document, operation = prepared
        self.plans.plan(operation, functools.partial(fragments_of, document))
        if operation.operation == OperationType.MUTATION or self.pages is None:
            return
        variables = sample_variables(self.graphql_schema, operation)
        if variables is not None:
            self.pages.compile_pages(self.graphql_schema, document, name, variables)


@functools.lru_cache(maxsize=256)
def _operations(text: str) -> tuple[tuple[str | None, OperationType], ...] | None:
    """The name and type of each of `text`'s operations; None if it does not parse."""
    try:
        definitions = parse(text).definitions
    except GraphQLError:
        return None
    return tuple(
        (d.name.value if d.name else None, d.operation)
        for d in definitions
        if isinstance(d, OperationDefinitionNode)
    )


def reads_pages(operation: OperationDefinitionNode) -> bool:
    """Whether `operation` is a query with a `runLog` field at its root: what a read plan is for."""
    return operation.operation == OperationType.QUERY and any(
        isinstance(selection, FieldNode) and selection.name.value == READ_FIELD
        for selection in operation.selection_set.selections
    )
