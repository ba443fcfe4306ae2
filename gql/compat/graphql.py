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
    """Whether the executor runs a resolver middleware (`middleware_manager`: no documented accessor).

    Without it, a plan could skip a middleware; page_plan.py plans no page when there is one.
    """
    manager = executor.middleware_manager
    return manager is not None and bool(manager.middlewares)


def collect_subfields(
    executor: Any, return_type: GraphQLObjectType, field_details_list: list[FieldDetails]
) -> dict[str, list[FieldDetails]]:
    """The fields selected on `return_type`, by response key, as the executor collects them.

    The executor's `collect_subfields` is not documented, nor `collect_fields` exported;
    a plan compiled from another collection could select other fields.
    """
    grouped, _defer, _forbidden = executor.collect_subfields(return_type, field_details_list)
    return grouped  # type: ignore[no-any-return]


def collect_root_fields(executor: Any) -> dict[str, list[FieldDetails]]:
    """The fields at the root of the executor's operation, by response key, as executing it collects them.

    `collect_fields` is not exported. Without these very groups, start-up's compiled page
    plans (`PageExecutor.compile_pages`) would not match, and each first request would compile again.
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
    """Whether any of the fields is deferred (@defer) or read through fragment arguments.

    `FieldDetails.defer_usage` and `fragment_variable_values` are not public; without the
    check, a plan would complete such a field at once, with other variables.
    """
    return any(
        d.fragment_variable_values is not None or d.defer_usage is not None for d in field_details_list
    )


def bound_overlap_check(budget: int) -> None:
    """Bound graphql-core's check that fields sharing a response name merge, for the whole process.

    Sets the global `MAX_COMPLEXITY_BUDGET`, as its comment documents; no argument of
    `validate` does. Without it, a few thousand repeated fields hold validation for seconds.
    """
    overlapping_fields_can_be_merged.MAX_COMPLEXITY_BUDGET = budget


def overlap_check_aborted(error: GraphQLError) -> bool:
    """Whether `error` is the overlap check running out of its budget ("Validation aborted.").

    graphql-core gives only that message, no code or class; without it gql/query_shape.py
    could not replace it with an error that says what to change.
    """
    return error.message == "Validation aborted."
