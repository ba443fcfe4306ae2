"""Trusted documents: operations known by hash (`TrustedDocuments.from_settings`), and who may run others."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import strawberry
from graphql import GraphQLError, parse, validate

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
    added: frozenset[str] = frozenset()  # the digests RUNLOG_TRUSTED_DOCUMENTS_FILE adds

    @classmethod
    def from_settings(cls, settings: Settings) -> TrustedDocuments:
        """The shipped manifest and the operator's; a manifest that does not hold stops start-up."""
        known = _manifest(SHIPPED, "the shipped manifest")
        added: dict[str, str] = {}
        if settings.trusted_documents_file is not None:
            added = _manifest(Path(settings.trusted_documents_file), "RUNLOG_TRUSTED_DOCUMENTS_FILE")
            added = {digest: text for digest, text in added.items() if known.get(digest) != text}
            known.update(added)
        return cls(
            by_hash=known,
            texts=frozenset(known.values()),
            enforced=settings.trusted_documents,
            added=frozenset(added),
        )

    def text(self, document_id: str) -> str | None:
        """The text of the document `document_id` names (`sha256:<hex>` or `<hex>`, in any case), or None."""
        return self.by_hash.get(document_id.lower().removeprefix(PREFIX))

    def check(self, schema: strawberry.Schema) -> None:
        """Stop start-up on a document of RUNLOG_TRUSTED_DOCUMENTS_FILE that the schema refuses.

        The shipped documents are the schema's own (tests/test_trusted_documents.py holds them to it).
        A text refused only by the app's limits is refused per request.
        """
        for digest in sorted(self.added):
            try:
                errors = validate(graphql_schema(schema), parse(self.by_hash[digest]))
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
