"""What one request may ask of the service: its size, its shape, and how many lines it reads.

Each limit refuses a request before any SQL runs, naming the limit. `query_limits(settings)`
gives the schema's extensions.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    IntValueNode,
    NamedTypeNode,
    NonNullTypeNode,
    NullValueNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    ValueNode,
    VariableNode,
    get_operation_ast,
)
from strawberry.extensions import SchemaExtension

from .. import store
from ..settings import Settings
from .query_shape import explain_aborted_overlap_check, fragments_of, selections, shape_rules


def query_limits(settings: Settings) -> list[Callable[[], SchemaExtension]]:
    """The extensions that hold a request to `settings`' limits, as factories (one extension per request)."""
    rules = shape_rules(settings.max_depth, settings.max_aliases, settings.max_tokens)
    return [
        lambda: RequestLimits(
            max_tokens=settings.max_tokens,
            rules=rules,
            max_lines=settings.max_lines_per_request,
            max_query_bytes=settings.max_query_bytes,
        )
    ]


class RequestLimits(SchemaExtension):
    """Every per-request limit in one extension: the size check must run before the parser.

    `on_operation` does what Strawberry's `MaxTokensLimiter` and `AddValidationRules` do; `on_execute`
    refuses a request whose `runLog` fields could read more than `max_lines` lines together.
    """

    def __init__(
        self,
        max_tokens: int,
        rules: tuple[type[ASTValidationRule], ...],
        max_lines: int,
        max_query_bytes: int,
    ) -> None:
        self.max_tokens = max_tokens
        self.rules = rules
        self.max_lines = max_lines
        self.max_query_bytes = max_query_bytes

    def on_operation(self) -> Iterator[None]:
        context = self.execution_context
        # Before anything reads the text: the token limit does not count comments.
        refusal = query_text_refusal(context.query, self.max_query_bytes)
        if refusal is not None:
            raise refusal  # Strawberry answers an exception here as the request's error
        context.parse_options["max_tokens"] = self.max_tokens
        context.validation_rules = context.validation_rules + self.rules
        yield

    def on_validate(self) -> Iterator[None]:
        yield
        errors = self.execution_context.pre_execution_errors
        if errors:
            explain_aborted_overlap_check(errors)

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        operation = get_operation_ast(document, context.operation_name) if document else None
        if (
            operation is not None
            and operation.operation == OperationType.SUBSCRIPTION
            and getattr(context.context, "connection", True) is None
        ):
            # Over HTTP graphql-core would answer a masked "Cannot return null".
            context.result = _refused(
                GraphQLError(
                    "A subscription is served over a websocket at this same /graphql "
                    "(graphql-transport-ws or graphql-ws), not over HTTP",
                    nodes=[operation],
                    extensions={"code": "BAD_REQUEST"},
                )
            )
            yield
            return
        if document is not None and operation is not None:
            lines, fields, served_again = lines_asked(document, operation, context.variables)
            values = variable_values(operation, context.variables)
            if values > MAX_VARIABLE_VALUES and operation.operation == OperationType.SUBSCRIPTION:
                # Strawberry would subscribe whatever `result` holds: raised, the refusal is the answer.
                raise _too_many_values(operation, values)
            if values > MAX_VARIABLE_VALUES:
                context.result = _refused(_too_many_values(operation, values))
            elif lines > self.max_lines:
                context.result = _refused(
                    GraphQLError(
                        f"This request could read {lines} lines "
                        f"({fields} runLog fields{_AGAIN * served_again}); "
                        f"the limit is {self.max_lines} lines per request "
                        "(RUNLOG_MAX_LINES_PER_REQUEST). Ask for fewer or smaller pages.",
                        nodes=[operation],
                        extensions={"code": "TOO_MANY_LINES", "lines": lines, "maxLines": self.max_lines},
                    )
                )
        yield


def _refused(error: GraphQLError) -> ExecutionResult:
    return ExecutionResult(data=None, errors=[error])


class DetailBudget:
    """The stored detail bytes the `runLog` pages of one request may still return (RUNLOG_MAX_PAGE_BYTES).

    Pages spend it one at a time; a page returns its first line whatever it weighs. The holds of
    runs spend it too (`spend`).
    """

    def __init__(self, max_bytes: int) -> None:
        self.left = max_bytes
        self._turn = asyncio.Lock()

    def spend(self, size: int, *, first: bool = False) -> bool:
        """Spend `size` bytes if they fit, or whatever is asked if `first`; False (nothing spent) if not."""
        if size > self.left and not first:
            return False
        self.left -= size
        return True

    async def read(self, read_page: Callable[[int], Awaitable[store.Page]], servings: int = 1) -> store.Page:
        """`read_page(bytes left / servings)`, its details' bytes then spent once per serving."""
        async with self._turn:
            page = await read_page(max(self.left, 0) // servings)
            self.left -= page.detail_bytes * servings
            return page


def served_bytes(run: Any, depth_left: int) -> int:
    """The bytes of headline, sentences and evidence details a `runs.Run` serves, its blocking runs' too."""
    total = len(run.headline)
    for hold in run.holds:
        total += hold.weight
        if hold.blocking_run is not None and depth_left > 0:
            total += served_bytes(hold.blocking_run, depth_left - 1)
    return total


_AGAIN = "; a page served under several aliases of nodes, detail or blockingRun counts once for each"


# graphql-core checks each value of a variable one by one, holding the event loop.
MAX_VARIABLE_VALUES = 10_000


def variable_values(operation: OperationDefinitionNode, variables: Mapping[str, Any] | None) -> int:
    """How many values graphql-core will check to coerce `variables`, counted up to just past the limit.

    Each value, list item and input object member counts one; a `JSON` value counts one whole.
    """
    count = 0
    pending: list[Any] = []
    for definition in operation.variable_definitions or ():
        name = definition.variable.name.value
        named = definition.type.type if isinstance(definition.type, NonNullTypeNode) else definition.type
        if variables and name in variables:
            if isinstance(named, NamedTypeNode) and named.name.value == "JSON":
                count += 1
            else:
                pending.append(variables[name])
    while pending and count <= MAX_VARIABLE_VALUES:
        value = pending.pop()
        count += 1
        if isinstance(value, dict | list):
            inner = value.values() if isinstance(value, dict) else value
            pending.extend(itertools.islice(inner, MAX_VARIABLE_VALUES + 1 - count))
    return count


def _too_many_values(operation: OperationDefinitionNode, values: int) -> GraphQLError:
    return GraphQLError(
        f"The variables hold more than {MAX_VARIABLE_VALUES} values (list items and object "
        f"members count one each, a JSON detail counts one); the limit is {MAX_VARIABLE_VALUES} "
        "values per request. `kinds` needs no more entries than there are kinds.",
        nodes=[operation],
        extensions={"code": "TOO_MANY_VALUES", "maxValues": MAX_VARIABLE_VALUES},
    )


def query_text_refusal(query: str | None, max_bytes: int) -> GraphQLError | None:
    """The error for a query text over `max_bytes` bytes, or None."""
    if query is None or len(query) * 4 <= max_bytes:
        return None  # no text of that many characters can be longer in UTF-8
    size = len(query) if query.isascii() else len(query.encode("utf-8", "surrogatepass"))
    if size <= max_bytes:
        return None
    return GraphQLError(
        f"The query text is {size} bytes; the limit is {max_bytes} bytes (RUNLOG_MAX_QUERY_BYTES). "
        "Send a shorter text: comments count, variables do not.",
        extensions={"code": "QUERY_TOO_LARGE", "bytes": size, "maxBytes": max_bytes},
    )


def lines_asked(
    document: DocumentNode, operation: OperationDefinitionNode, variables: Mapping[str, Any] | None
) -> tuple[int, int, bool]:
    """The lines `operation`'s runLog fields could serve together, how many such fields it has, and
    whether a page is served more than once (each serving counts its lines: `detail_servings`)."""
    fragments = fragments_of(document)
    root = selections([operation.selection_set], fragments, deep=False)
    fields = [f for f in root if isinstance(f, FieldNode) and f.name.value == "runLog"]
    defaults = {d.variable.name.value: d.default_value for d in operation.variable_definitions or ()}
    read = [_read_limit(field, variables or {}, defaults) for field in fields]
    served = [limit * detail_servings(field, fragments) for field, limit in zip(fields, read, strict=True)]
    return sum(served), len(fields), sum(served) > sum(read)


# The fields that hold a page's lines, and what each line links to.
_SERVING_FIELDS = ("nodes", "detail", "blockingRun")


def detail_servings(field: FieldNode, fragments: Mapping[str, FragmentDefinitionNode]) -> int:
    """How many times a runLog field's lines are served: once, or once per alias of what holds them.

    The leaves of the tree of `nodes`, `detail` and `blockingRun` fields, merged by response key
    as graphql-core merges them (an alias of `blockingRun` alone over-counts: safe).
    """

    def count(selection_sets: list[SelectionSetNode], depth: int) -> int:
        if depth == len(_SERVING_FIELDS):
            return 1
        # The fields of this depth's name, by response key, as graphql-core collects them.
        found: dict[str, list[SelectionSetNode]] = {}
        name = _SERVING_FIELDS[depth]
        for node in selections(selection_sets, fragments, deep=False):
            if isinstance(node, FieldNode) and node.name.value == name and node.selection_set:
                found.setdefault((node.alias or node.name).value, []).append(node.selection_set)
        return max(1, sum(count(sets, depth + 1) for sets in found.values()))

    return 1 if field.selection_set is None else count([field.selection_set], 0)


def _read_limit(
    field: FieldNode, variables: Mapping[str, Any], defaults: Mapping[str, ValueNode | None]
) -> int:
    """The lines this `runLog` field may read, as `store.clamp_read_limit` will have it."""
    node = next((a.value for a in field.arguments or () if a.name.value == "limit"), None)
    value: Any = None
    if isinstance(node, VariableNode):
        name = node.name.value
        if name in variables:
            value = variables[name]
        else:
            node = defaults.get(name)
    if isinstance(node, IntValueNode):
        value = int(node.value)
    elif node is not None and not isinstance(node, VariableNode | NullValueNode):
        value = store.READ_LIMIT_MAX  # not an Int: refused later; count the most
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # graphql-core accepts 2000.0 for an Int
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        return store.READ_LIMIT_MAX  # refused when the variables are coerced
    return store.clamp_read_limit(value)
