"""Each prepared operation's plan, made once: `Plans(schema, executor).plan(operation, fragments)`.

A write plan, a read plan, or None for graphql-core's executor.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

import strawberry
from graphql import FragmentDefinitionNode, OperationDefinitionNode

from ..compat.strawberry import graphql_schema
from .page_plan import PageExecutor
from .read_plan import ReadPlan, read_plan
from .write_plan import WritePlan, write_plan

Plan = ReadPlan | WritePlan


class Plans:
    """Each operation's plan (None: it has none), by the operation's identity, kept as long as it is."""

    def __init__(self, schema: strawberry.Schema, executor: type[PageExecutor] | None) -> None:
        self.definitions = schema
        self.schema = graphql_schema(schema)
        # Read plans complete pages with this executor's page plans (None: no read plans).
        self.executor = executor
        # By identity: an AST node hashes its whole tree, on every lookup.
        self.entries: dict[int, tuple[weakref.ref[OperationDefinitionNode], Plan | None]] = {}

    def plan(
        self, operation: OperationDefinitionNode, fragments: Callable[[], dict[str, FragmentDefinitionNode]]
    ) -> Plan | None:
        known = self.entries.get(id(operation))
        if known is not None and known[0]() is operation:
            return known[1]
        key = id(operation)
        found: Plan | None = write_plan(self.definitions, operation)
        if found is None and self.executor is not None:
            found = read_plan(self.schema, self.executor, operation, fragments())
        self.entries[key] = (weakref.ref(operation, functools.partial(self._forget, key)), found)
        return found

    def _forget(self, key: int, gone: weakref.ref[OperationDefinitionNode]) -> None:
        known = self.entries.get(key)
        if known is not None and known[0] is gone:
            del self.entries[key]
