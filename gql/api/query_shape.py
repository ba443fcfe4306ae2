"""A document's shape: the one walk over its selections (`selections`), and the rules that bound it."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from graphlib import CycleError, TopologicalSorter

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
)
from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter

from ..compat.graphql import bound_overlap_check, overlap_check_aborted


def fragments_of(document: DocumentNode) -> dict[str, FragmentDefinitionNode]:
    """A document's named fragments, by name."""
    return {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}


def selections(
    sets: Iterable[SelectionSetNode | None],
    fragments: Mapping[str, FragmentDefinitionNode] | None,
    *,
    deep: bool = True,
) -> Iterator[SelectionNode]:
    """Every selection under `sets` in document order: fields, inline fragments and spreads.

    Each named fragment is followed once (with `fragments` None, none is). With `deep=False`
    a field's own selections are not entered: one level's fields, as graphql-core collects them.
    """
    stack = [iter(s.selections) for s in reversed(list(sets)) if s is not None]
    seen: set[str] = set()
    while stack:
        selection = next(stack[-1], None)
        if selection is None:
            stack.pop()
            continue
        yield selection
        inner: SelectionSetNode | None = None
        if isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if fragments is not None and name not in seen:
                seen.add(name)
                fragment = fragments.get(name)
                inner = None if fragment is None else fragment.selection_set
        elif deep or isinstance(selection, InlineFragmentNode):
            inner = selection.selection_set  # type: ignore[attr-defined]
        if inner is not None:
            stack.append(iter(inner.selections))


@functools.lru_cache(maxsize=16)  # the same classes for the same limits: validations are cached by rules
def shape_rules(max_depth: int, max_aliases: int, most: int) -> tuple[type[ASTValidationRule], ...]:
    """The rules refusing a document too deep, too aliased, or of more than `most` selections spread out."""
    bound_overlap_check(OVERLAP_BUDGET)

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

    (depth,) = QueryDepthLimiter(max_depth=max_depth).validation_rules
    (aliases,) = MaxAliasesLimiter(max_alias_count=max_aliases).validation_rules
    # Strawberry's rules walk a fragment once per spread: they skip a document the expansion limit refuses.
    return (ExpansionLimit, _unless_too_big(depth, most), _unless_too_big(aliases, most))


def _unless_too_big(rule: type[ASTValidationRule], most: int) -> type[ASTValidationRule]:
    """`rule`, skipped for a document the expansion limit refuses, or `expanded_selections` cannot count."""

    class Guarded(rule):  # type: ignore[valid-type,misc]
        def __init__(self, context: ValidationContext) -> None:
            count = expanded_selections(context.document, most)
            if count is None or count > most:
                ValidationRule.__init__(self, context)
            else:
                super().__init__(context)

    return Guarded


def expanded_selections(document: DocumentNode, most: int) -> int | None:
    """The selections of `document`'s operations, fragments spread out, up to `most` + 1.

    None for a cycle of fragments or a spread of an unknown one (on which Strawberry's rules crash).
    """
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    own = {name: _own_selections(f.selection_set) for name, f in fragments.items()}
    operations = [
        _own_selections(d.selection_set)
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode)
    ]
    if any(s not in own for _, spreads in [*own.values(), *operations] for s in spreads):
        return None
    order = TopologicalSorter({name: set(spreads) for name, (_, spreads) in own.items()})
    try:
        ordered = list(order.static_order())
    except CycleError:
        return None
    sizes: dict[str, int] = {}
    for name in ordered:
        count, spreads = own[name]
        sizes[name] = min(count + sum(sizes[s] for s in spreads), most + 1)
    total = 0
    for count, spreads in operations:
        total = min(total + count + sum(sizes[s] for s in spreads), most + 1)
    return total


def _own_selections(selection_set: SelectionSetNode) -> tuple[int, list[str]]:
    """The selections under `selection_set`, fragments not followed, and the fragments it spreads."""
    found = list(selections([selection_set], None))
    return len(found), [s.name.value for s in found if isinstance(s, FragmentSpreadNode)]


# graphql-core compares same-named fields pair by pair; its default budget could hold the loop for seconds.
OVERLAP_BUDGET = 25_000


def _too_complex() -> GraphQLError:
    return GraphQLError(
        "The document selects fields under one response name too many times to check that "
        f"they merge (graphql-core's overlap check ran past its budget of {OVERLAP_BUDGET} "
        "comparisons). Select each field once per selection set; use aliases for more.",
        extensions={"code": "TOO_COMPLEX", "maxComparisons": OVERLAP_BUDGET},
    )


def explain_aborted_overlap_check(errors: list[GraphQLError]) -> None:
    """Put, in place, an error saying what to change for the overlap check's "Validation aborted."."""
    if any(overlap_check_aborted(e) for e in errors):
        errors[:] = [_too_complex() if overlap_check_aborted(e) else e for e in errors]
