"""What a document may be shaped like: how deep, how many aliases, how far its fragments spread.

The validation rules that hold a document to RUNLOG_MAX_DEPTH,
RUNLOG_MAX_ALIASES and, with its fragments spread out, RUNLOG_MAX_TOKENS, and
the budget of graphql-core's check that same-named fields merge. A document
refused here never executes; gql/limits.py runs these rules with the rest of
a request's limits.
"""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter
from typing import Any

from graphql import (
    BREAK,
    ASTValidationRule,
    DocumentNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
    Visitor,
    visit,
)
from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter

from .compat.graphql import bound_overlap_check, overlap_check_aborted


def shape_rules(max_depth: int, max_aliases: int, most: int) -> list[type[ASTValidationRule]]:
    """The rules that refuse a document too deep, too aliased, or too big with its fragments spread.

    Deeper than `max_depth`, more than `max_aliases` aliases, or more than
    `most` selections once every fragment spread is written out. Built once
    per process (see limits.query_limits): the same rule classes on every
    request are what lets a validated text be looked up.
    """
    # Strawberry's depth and alias rules walk every fragment once per spread:
    # sixteen fragments that each spread the next twice held the event loop
    # for seconds. The expansion limit comes first, and they skip a document
    # past it (or with a fragment cycle, which graphql-core refuses anyway).
    bound_overlap_check(OVERLAP_BUDGET)
    expansion = _expansion_limit(most)
    (depth,) = _DepthLimiter(max_depth=max_depth).validation_rules
    (aliases,) = MaxAliasesLimiter(max_alias_count=max_aliases).validation_rules
    return [expansion, _unless_too_big(depth, most), _unless_too_big(aliases, most)]


class _DepthLimiter(QueryDepthLimiter):
    """Strawberry's depth limit, without its crash on a spread of a fragment nobody defined.

    Its rule looks every spread up in the document's fragments and fails with
    a KeyError on `{ ...Missing }` (graphene issue 1538 is the same bug).
    Such a document is left to graphql-core's own rule, which says
    "Unknown fragment 'Missing'."
    """

    def __init__(self, max_depth: int) -> None:
        super().__init__(max_depth=max_depth)
        (depth_rule,) = self.validation_rules

        class Rule(depth_rule):  # type: ignore[valid-type,misc]
            def __init__(self, context: ValidationContext) -> None:
                if _spreads_unknown_fragments(context.document):
                    ValidationRule.__init__(self, context)
                else:
                    super().__init__(context)

        self.validation_rules = [Rule]


def _expansion_limit(most: int) -> type[ASTValidationRule]:
    """A rule refusing a document whose fragments, spread out, hold more than `most` selections.

    Written out without fragments, such a document would hold more than
    `most` tokens (each selection is at least its name), which the token limit
    refuses; spreading a fragment many times must not buy more work than that.
    """

    class ExpansionLimit(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)
            count = expanded_selections(context.document, most)
            if count is not None and count > most:
                context.report_error(
                    GraphQLError(
                        f"The document holds more than {most} selections once its fragments are "
                        f"spread out (each spread counts its fragment again); the limit is {most} "
                        "(RUNLOG_MAX_TOKENS, what the document could hold written out). Spread "
                        "fragments fewer times.",
                        extensions={"code": "TOO_MANY_SELECTIONS", "maxSelections": most},
                    )
                )

    return ExpansionLimit


def _unless_too_big(rule: type[ASTValidationRule], most: int) -> type[ASTValidationRule]:
    """`rule`, skipped for a document the expansion limit refuses or whose fragments form a cycle."""

    class Guarded(rule):  # type: ignore[valid-type,misc]
        def __init__(self, context: ValidationContext) -> None:
            count = expanded_selections(context.document, most)
            if count is None or count > most:
                ValidationRule.__init__(self, context)
            else:
                super().__init__(context)

    return Guarded


def expanded_selections(document: DocumentNode, most: int) -> int | None:
    """The selections of `document`'s operations with every fragment spread written out.

    Counted up to just past `most`, in time linear in the document: each
    fragment is sized once, after the fragments it spreads. None when the
    fragments spread each other in a cycle (graphql-core refuses it).
    """
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    own = {name: _own_selections(f.selection_set) for name, f in fragments.items()}
    order = TopologicalSorter({name: {s for s in spreads if s in own} for name, (_, spreads) in own.items()})
    try:
        ordered = list(order.static_order())
    except CycleError:
        return None
    sizes: dict[str, int] = {}
    for name in ordered:
        count, spreads = own[name]
        sizes[name] = min(count + sum(sizes.get(s, 0) for s in spreads), most + 1)
    total = 0
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            count, spreads = _own_selections(definition.selection_set)
            total = min(total + count + sum(sizes.get(s, 0) for s in spreads), most + 1)
    return total


def _own_selections(selection_set: SelectionSetNode) -> tuple[int, list[str]]:
    """The selections under `selection_set`, fragments not followed, and the fragments it spreads."""
    count = 0
    spreads: list[str] = []
    pending = [selection_set]
    while pending:
        for selection in pending.pop().selections:
            count += 1
            if isinstance(selection, FragmentSpreadNode):
                spreads.append(selection.name.value)
            elif selection.selection_set is not None:  # type: ignore[attr-defined]
                pending.append(selection.selection_set)  # type: ignore[attr-defined]
    return count, spreads


def _spreads_unknown_fragments(document: DocumentNode) -> bool:
    defined = {d.name.value for d in document.definitions if isinstance(d, FragmentDefinitionNode)}

    class Spreads(Visitor):
        unknown = False

        def enter_fragment_spread(self, node: FragmentSpreadNode, *_: Any) -> Any:
            if node.name.value not in defined:
                self.unknown = True
                return BREAK
            return None

    spreads = Spreads()
    visit(document, spreads)
    return spreads.unknown


# graphql-core checks that fields sharing a response name can be merged by
# comparing them pair by pair: 470 `detail { __typename }` in one selection
# (1,900 tokens) held the event loop for 1.3 s within its default budget of
# 500,000 units, past which it aborts validation. The shipped operations, all
# fragments included, spend about 1,400; this budget ends the check within a
# few hundredths of a second (set by `compat.graphql.bound_overlap_check`).
OVERLAP_BUDGET = 25_000


def _too_complex() -> GraphQLError:
    return GraphQLError(
        "The document selects fields under one response name too many times to check that "
        f"they merge (graphql-core's overlap check ran past its budget of {OVERLAP_BUDGET} "
        "comparisons). Select each field once per selection set; use aliases for more.",
        extensions={"code": "TOO_COMPLEX", "maxComparisons": OVERLAP_BUDGET},
    )


def explain_aborted_overlap_check(errors: list[GraphQLError]) -> None:
    """Put an error that says what to change in place of the overlap check's "Validation aborted."

    graphql-core says only that when the check runs out of its budget. In
    place: Strawberry holds this list already, for the answer it returns.
    """
    if any(overlap_check_aborted(e) for e in errors):
        errors[:] = [_too_complex() if overlap_check_aborted(e) else e for e in errors]
