"""The response's `extensions.runlog.notStored`: an entry for each `writeRunLog` field that answered false.

`note(context, path, problem)` adds a field's entry; `NotStoredExtension` puts the entries in
Strawberry's result, over HTTP and websockets alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from strawberry.extensions import SchemaExtension

from ..domain.refusals import told

__all__ = ["NotStoredExtension", "note"]


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
