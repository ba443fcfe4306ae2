"""A query of one plain `runLog` field, answered without graphql-core's executor (write_plan.py's twin).

`read_plan(schema, executor, operation, fragments)` makes one (or None); `await plan.answer(context,
variables, text)` answers, or None (counted) for the executor to answer.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from graphql import (
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLField,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    located_error,
)

from .. import metrics, store
from ..limits import PageReads
from ..page import Context, asked_of
from ..run_log import read_run_log
from .coercion import Coercion
from .page_plan import STATS, PageExecutor

READ_FIELD = "runLog"


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """An operation's one `runLog` field, and what its page needs that does not change per request."""

    schema: GraphQLSchema
    executor: type[PageExecutor]  # whose plan cache holds the page's compiled plan
    operation: OperationDefinitionNode
    node: FieldNode
    field: GraphQLField
    key: str  # the response key: the alias, or runLog
    fragments: dict[str, FragmentDefinitionNode]
    coercion: Coercion
    reads: PageReads  # its one field's detail servings, for the line budget

    async def answer(
        self, context: Context, inputs: dict[str, Any] | None, text: str
    ) -> ExecutionResult | None:
        """The executor's answer for this request, or None (counted) when the executor must give it."""
        coerced = self.coercion.coerce(inputs)
        if coerced is None:
            metrics.fell_back(
                "read_plan",
                "not_coerced",
                text,
                "a value does not coerce: the executor says why",
            )
            return None
        variables, (arguments,) = coerced
        plan = self.executor.plans.compiled((self.node,), variables)
        if plan is None:
            # The executor compiles it, or says why it cannot (page_plan's count).
            metrics.fell_back("read_plan", "not_compiled", text, "the page has no compiled plan (yet)")
            return None
        wait = arguments.get("wait")
        kinds = arguments.get("kinds")  # RunLogKind members, as Strawberry's enum type coerces them
        try:
            held = contextlib.nullcontext() if wait else store.one_connection(context.engine)
            async with held:
                page = await read_run_log(
                    context,
                    asked_of((self.node,), self.fragments),
                    lambda: self.reads.fields[0][1],
                    run_id=arguments["runId"],
                    kinds=None if kinds is None else [kind.value for kind in kinds],
                    limit=arguments.get("limit"),
                    after=arguments.get("after"),
                    before=arguments.get("before"),
                    wait=wait,
                    fresh=arguments.get("fresh"),
                    phase=arguments.get("phase"),
                    step_id=arguments.get("stepId"),
                    since=arguments.get("since"),
                    until=arguments.get("until"),
                    search=arguments.get("search"),
                    around=arguments.get("around"),
                )
        except Exception as exc:  # the executor's answer: located at the field, and data null
            return ExecutionResult(data=None, errors=[located_error(exc, [self.node], [self.key])])
        try:
            completed = plan(page, page)
        except Exception as exc:  # graphql-core decides; the executor reads the page again
            context.detail_budget = None  # the page it reads has the whole budget again
            metrics.fell_back(
                "read_plan",
                "unexpected_value",
                text,
                f"the plan did not complete the page ({type(exc).__name__}): the executor reads it again",
            )
            return None
        STATS.planned += 1
        return ExecutionResult(data={self.key: completed})


def read_plan(
    schema: GraphQLSchema,
    executor: type[PageExecutor],
    operation: OperationDefinitionNode,
    fragments: dict[str, FragmentDefinitionNode],
) -> ReadPlan | None:
    """`operation`'s read plan, or None when it is not a query of one plain `runLog` field."""
    query = schema.query_type
    if operation.operation != OperationType.QUERY or query is None or operation.directives:
        return None
    selections = operation.selection_set.selections
    if len(selections) != 1:
        return None
    (node,) = selections
    if not isinstance(node, FieldNode) or node.name.value != READ_FIELD or node.directives:
        return None
    field = query.fields.get(READ_FIELD)
    # Only while Strawberry does no more than call the resolver: no field
    # extension or permission class, which the plan would not run.
    definition = executor.strawberry_schema.get_field_for_type(READ_FIELD, query.name)
    if field is None or definition is None or definition.extensions or definition.permission_classes:
        return None
    key = node.alias.value if node.alias is not None else READ_FIELD
    coercion = Coercion(schema, operation, [(field, node)])
    reads = PageReads.of(operation, fragments)
    return ReadPlan(schema, executor, operation, node, field, key, fragments, coercion, reads)
