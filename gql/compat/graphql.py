"""graphql-core's non-public names the service relies on (tested in tests/test_compat.py).

graphql-core documents what `graphql` and its subpackages' `__init__` export, and no more.
"""

from __future__ import annotations

from typing import Any

from graphql import GraphQLError, GraphQLObjectType
from graphql.execution.collect_fields import FieldDetails, collect_fields
from graphql.validation.rules import overlapping_fields_can_be_merged

__all__ = [
    "EXECUTOR_HOOKS",
    "LEFT",
    "CompletesObjects",
    "FieldDetails",
    "bound_overlap_check",
    "collect_root_fields",
    "collect_subfields",
    "deferred_or_fragment_arguments",
    "has_middleware",
    "overlap_check_aborted",
]

# `FieldDetails`: a field node as the executor collected it, what the page plan is compiled from.

# What gql/engine/coercion.py's and page_plan.py's executors override or read on graphql-core's.
EXECUTOR_HOOKS = (
    "build",  # a null for a nullable variable at a non-null argument refused as BAD_USER_INPUT
    "operation",
    "fragments",
    "variable_values",
    "schema",
)

LEFT: Any = object()
"""What `CompletesObjects.complete_object` answers to leave a value to graphql-core."""


class CompletesObjects:
    """A mixin for graphql-core's executor, completing values of one object type itself.

    Overrides `complete_object_value` (`:meta private:`): no documented hook sees an object
    value with its field nodes. Without it gql/engine/page_plan.py's plans never run.
    """

    # The object type (by name) whose values `complete_object` is offered.
    completed_type: str

    def complete_object(
        self, return_type: GraphQLObjectType, field_details_list: list[FieldDetails], result: Any
    ) -> Any:
        """The completed value of `result`, or LEFT for graphql-core to complete it."""
        return LEFT

    def complete_object_value(
        self,
        return_type: GraphQLObjectType,
        field_details_list: list[FieldDetails],
        info: Any,
        path: Any,
        result: Any,
        position_context: Any,
    ) -> Any:
        if return_type.name == self.completed_type:
            completed = self.complete_object(return_type, field_details_list, result)
            if completed is not LEFT:
                return completed
        return super().complete_object_value(  # type: ignore[misc]
            return_type, field_details_list, info, path, result, position_context
        )


def has_middleware(executor: Any) -> bool:
    """Whether the executor runs a resolver middleware (`middleware_manager`), which a plan would skip."""
    manager = executor.middleware_manager
    return manager is not None and bool(manager.middlewares)


def collect_subfields(
    executor: Any, return_type: GraphQLObjectType, field_details_list: list[FieldDetails]
) -> dict[str, list[FieldDetails]]:
    """The fields selected on `return_type`, by response key, as the executor's `collect_subfields` does."""
    grouped, _defer, _forbidden = executor.collect_subfields(return_type, field_details_list)
    return grouped  # type: ignore[no-any-return]


def collect_root_fields(executor: Any) -> dict[str, list[FieldDetails]]:
    """The fields at the root of the executor's operation, by response key, as executing it collects them.

    The very groups, so that start-up's compiled plans match the first request's.
    """
    root_type = executor.schema.get_root_type(executor.operation.operation)
    grouped, _defer, _forbidden = collect_fields(
        executor.schema,
        executor.fragments,
        executor.variable_values,
        root_type,
        executor.operation,
        executor.hide_suggestions,
    )
    return grouped


def deferred_or_fragment_arguments(field_details_list: list[FieldDetails]) -> bool:
    """Whether any of the fields is deferred (@defer) or read through fragment arguments: no plan for it."""
    return any(
        d.fragment_variable_values is not None or d.defer_usage is not None for d in field_details_list
    )


def bound_overlap_check(budget: int) -> None:
    """Bound graphql-core's check that fields sharing a response name merge, for the whole process.

    Sets the global `MAX_COMPLEXITY_BUDGET`: no argument of `validate` does.
    """
    overlapping_fields_can_be_merged.MAX_COMPLEXITY_BUDGET = budget


def overlap_check_aborted(error: GraphQLError) -> bool:
    """Whether `error` is the overlap check running out of its budget: only its message tells."""
    return error.message == "Validation aborted."
