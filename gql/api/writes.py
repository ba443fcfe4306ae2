"""What a `writeRunLog` that stored nothing tells: its caller, and the server's log.

- `note(context, path, problem)` adds a field's entry to the response's
  `extensions.runlog.notStored`, which `NotStoredExtension` puts in Strawberry's result
  (HTTP and websockets alike).
- `log_unrun_writes(...)` logs each `writeRunLog` line of a request refused before it ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    IntValueNode,
    ListValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    ValueNode,
    VariableNode,
    parse,
    value_from_ast_untyped,
)
from strawberry.extensions import SchemaExtension

from .. import metrics
from ..domain import writes
from ..domain.refusals import reason_of, told
from ..settings import Settings
from .query_shape import selections

__all__ = ["NotStoredExtension", "log_unrun_writes", "note"]


def note(context: Any, path: Sequence[str | int], problem: str) -> None:
    """Add the entry of the field at response `path`, not stored for `problem` (writes.py's sentence)."""
    reason, message = told(problem)
    context.not_stored.append(
        {"path": list(path), "reason": reason, "message": message, "requestId": context.request_id}
    )


class NotStoredExtension(SchemaExtension):
    """Puts `extensions.runlog.notStored` in a result whose writes answered false."""

    def get_results(self) -> dict[str, Any]:
        entries = getattr(self.execution_context.context, "not_stored", None)
        return {"runlog": {"notStored": entries}} if entries else {}


def log_unrun_writes(
    request_id: str, sent: bytes | Mapping[str, Any], errors: list[GraphQLError], settings: Settings
) -> None:
    """Log each `writeRunLog` line of a request refused before it ran; `sent` is its body or payload."""
    if b"writeRunLog" not in sent if isinstance(sent, bytes) else "writeRunLog" not in str(sent.get("query")):
        return
    reason = "the request was refused before it ran: " + "; ".join(
        writes.short_text(error.message, 300) for error in errors[:3]
    )
    try:
        request: Any = json.loads(sent) if isinstance(sent, bytes) else sent
        query, variables = request.get("query"), request.get("variables") or {}
        if len(query) > settings.max_query_bytes:
            raise ValueError("a text this long is not parsed again")  # it costs the loop
        document = parse(query, no_location=True, max_tokens=settings.max_tokens)
        lines = _write_arguments(document, variables if isinstance(variables, dict) else {})
    except Exception:  # not a request this can read: the body, bounded, is the trace
        lines = [{"request": sent.decode("utf-8", "replace") if isinstance(sent, bytes) else repr(sent)}]
    for arguments in lines:
        metrics.count_write(reason_of(reason))
        writes.log_refused(reason, request_id, arguments, settings.max_detail_bytes)


def _write_arguments(document: DocumentNode, variables: dict[str, Any]) -> list[dict[str, Any]]:
    """The arguments of every `writeRunLog` field in `document`, as sent."""
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    operations = [
        d.selection_set
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode) and d.operation == OperationType.MUTATION
    ]
    return [
        {a.name.value: _as_sent(a.value, variables) for a in selection.arguments or ()}
        for selection in selections(operations, fragments, deep=False)
        if isinstance(selection, FieldNode) and selection.name.value == "writeRunLog"
    ]


def _as_sent(node: ValueNode, variables: dict[str, Any]) -> Any:
    """A literal's value as written (an integer Python will not read stays its digits)."""
    if isinstance(node, VariableNode):
        return variables.get(node.name.value)
    if isinstance(node, IntValueNode):
        return int(node.value) if len(node.value) <= 1000 else node.value
    if isinstance(node, ListValueNode):
        return [_as_sent(value, variables) for value in node.values]
    if isinstance(node, ObjectValueNode):
        return {field.name.value: _as_sent(field.value, variables) for field in node.fields}
    return value_from_ast_untyped(node, variables)
