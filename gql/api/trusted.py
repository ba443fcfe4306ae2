"""Trusted documents: operations known by hash (`TrustedDocuments.from_settings`), and who may run others."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import strawberry
from graphql import GraphQLError, OperationDefinitionNode, parse, validate

from ..compat.strawberry import graphql_schema
from ..settings import Settings, SettingsError

SHIPPED = Path(__file__).parents[1] / "operations" / "persisted-documents.json"
PREFIX = "sha256:"
_HEX = re.compile(r"[0-9a-f]{64}")
SETTING = "RUNLOG_TRUSTED_DOCUMENTS"


@dataclass(frozen=True)
class TrustedDocuments:
    """Known documents by their sha256 (bare lowercase hex), and their texts."""

    by_hash: Mapping[str, str]
    texts: frozenset[str]
    enforced: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> TrustedDocuments:
        """The shipped manifest and the operator's; a manifest that does not hold stops start-up."""
        known = _manifest(SHIPPED, "the shipped manifest")
        if settings.trusted_documents_file is not None:
            known.update(_manifest(Path(settings.trusted_documents_file), "RUNLOG_TRUSTED_DOCUMENTS_FILE"))
        return cls(by_hash=known, texts=frozenset(known.values()), enforced=settings.trusted_documents)

    def text(self, document_id: str) -> str | None:
        """The text of the document `document_id` names (`sha256:<hex>` or `<hex>`, in any case), or None."""
        return self.by_hash.get(document_id.lower().removeprefix(PREFIX))

    async def check(self, schema: strawberry.Schema, not_run: object) -> None:
        """Stop start-up on a known document the schema refuses; run each through Strawberry, executing none.

        `not_run` is the context whose requests are parsed and validated, and not executed
        (engine/documents.py). A text refused only by the app's limits is refused per request.
        """
        for digest, text in self.by_hash.items():
            try:
                operations = [d for d in parse(text).definitions if isinstance(d, OperationDefinitionNode)]
                names = [o.name.value if o.name else None for o in operations]
            except GraphQLError:
                names = []
            # An anonymous operation must be alone (validation says so; Strawberry would raise).
            if names and (len(names) == 1 or None not in names):
                result = await schema.execute(text, operation_name=names[0], context_value=not_run)
                if not result.errors:
                    continue
            try:
                errors = validate(graphql_schema(schema), parse(text))
            except GraphQLError as exc:
                errors = [exc]
            if errors:
                raise SettingsError(
                    f"trusted document sha256:{digest} is not valid against this schema: {errors[0].message}"
                )


# For an app built without settings' documents (tests that make the view alone).
NO_DOCUMENTS = TrustedDocuments(by_hash={}, texts=frozenset(), enforced=False)


def unknown_id(document_id: object) -> str:
    shown = repr(document_id)[:100]
    return (
        f"Unknown documentId {shown}: this service knows the shipped operations (gql/operations) "
        f'and those of RUNLOG_TRUSTED_DOCUMENTS_FILE, each by "sha256:<hex of the text\'s SHA-256>"'
    )


REFUSED = (
    f"{SETTING}=on: only the trusted documents may be run, sent as "
    '{"documentId": "sha256:<hex>", "variables": {...}} (or as their exact text); '
    "an admin token may run any document"
)


def _manifest(path: Path, name: str) -> dict[str, str]:
    """`path`'s hash-to-text map, each hash checked against its text."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SettingsError(f"{name} {str(path)!r} cannot be read as a JSON manifest: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(
            f"{name} {str(path)!r} must be a JSON object mapping each hash to its document text"
        )
    found: dict[str, str] = {}
    for key, text in data.items():
        digest = key[len(PREFIX) :] if key.startswith(PREFIX) else key
        if not _HEX.fullmatch(digest) or not isinstance(text, str):
            raise SettingsError(
                f'{name} {str(path)!r}: entry {key[:80]!r} must map "sha256:<64 lowercase hex>" to a text'
            )
        if hashlib.sha256(text.encode()).hexdigest() != digest:
            raise SettingsError(
                f"{name} {str(path)!r}: entry {key!r} is not the SHA-256 of its text (UTF-8, as written)"
            )
        found[digest] = text
    return found
