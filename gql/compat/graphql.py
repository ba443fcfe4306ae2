"""graphql-core's non-public names the service relies on (tested in tests/test_compat.py).

graphql-core documents what `graphql` and its subpackages' `__init__` export, and no more.
Its `Executor` is documented: `build`, subclassing it (`executor_class`), and the attributes
its docstring lists (`schema`, `operation`, `fragments`, `variable_values`,
`middleware_manager`) are public; "the methods used internally for executing and
completing fields are not", and those are what this module reaches.

`__all__` names one entry per reach. A helper that works through the same reach is named
in that entry's docstring and tested with it.
"""

from __future__ import annotations

from typing import Any

from graphql import GraphQLError, GraphQLObjectType
from graphql.execution.collect_fields import FieldDetails
from graphql.validation.rules import overlapping_fields_can_be_merged

__all__ = [
    "CompletesObjects",
    "FieldDetails",
    "bound_overlap_check",
    "subfields",
]

# `FieldDetails` (`graphql.execution.collect_fields`, not exported): a field node as the
# executor collected it, what the page plan is compiled from. Its fields `defer_usage` and
# `fragment_variable_values` are read by `deferred_or_fragment_arguments`, part of this entry;
# `Fields`, the executor's list of them for one response key, names it for gql/api/execution.
Fields = list[FieldDetails]


def deferred_or_fragment_arguments(field_details_list: list[FieldDetails]) -> bool:
    """Whether any of the fields is deferred (@defer) or read through fragment arguments (`FieldDetails`).

    Without the check, a plan would complete such a field at once, with other variables.
    """
    return any(
        d.fragment_variable_values is not None or d.defer_usage is not None for d in field_details_list
    )


class CompletesObjects:
    """A mixin for graphql-core's executor, completing values of one object type itself.

    Overrides `complete_object_value` (`:meta private:`): no documented hook sees an object
    value with its field nodes. Without it gql/api/execution/page_plan.py's plans never run.
    """

    # What `complete_object` answers to leave a value to graphql-core.
    LEFT: Any = object()

    # The object type (by name) whose values `complete_object` is offered.
    completed_type: str

    def complete_object(
        self, return_type: GraphQLObjectType, field_details_list: list[FieldDetails], result: Any
    ) -> Any:
        """The completed value of `result`, or `LEFT` for graphql-core to complete it."""
        return self.LEFT

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
            if completed is not self.LEFT:
                return completed
        return super().complete_object_value(  # type: ignore[misc]
            return_type, field_details_list, info, path, result, position_context
        )


def subfields(
    executor: Any, return_type: GraphQLObjectType, field_details_list: list[FieldDetails]
) -> dict[str, list[FieldDetails]]:
    """The fields selected on `return_type`, by response key, as the executor collects them.

    The executor's `collect_subfields` (`:meta private:`) is the one collection used; a plan
    compiled from another could select other fields than graphql-core completes.
    """
    grouped, _defer, _forbidden = executor.collect_subfields(return_type, field_details_list)
    return grouped  # type: ignore[no-any-return]


def bound_overlap_check(budget: int) -> None:
    """Bound graphql-core's check that fields sharing a response name merge, for the whole process.

    Sets the global `MAX_COMPLEXITY_BUDGET`, as its comment documents; no argument of
    `validate` does. Without it, a few thousand repeated fields hold validation for seconds.
    `overlap_check_aborted` recognises the check running out of it: part of this entry.
    """
    overlapping_fields_can_be_merged.MAX_COMPLEXITY_BUDGET = budget


def overlap_check_aborted(error: GraphQLError) -> bool:
    """Whether `error` is the overlap check running out of its budget ("Validation aborted.").

    graphql-core gives only that message, no code or class; without it gql/api/query_shape.py
    could not replace it with an error that says what to change.
    """
    return error.message == "Validation aborted."
