"""Parsed and validated documents by query text (`DocumentCache`, one per app), bounded in count and bytes.

Add `DocumentCache().extension` last among the schema's extensions: a Strawberry extension on
its documented hooks. Not Strawberry's `ParserCache` and `ValidationCache`: the latter hashes
the whole document on each request, and neither is bounded in bytes.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from graphql import DocumentNode, GraphQLError, Token
from strawberry.extensions import SchemaExtension

DOCUMENT_CACHE_SIZE = 256  # distinct query texts per app
DOCUMENT_CACHE_BYTES = 32 * 1024 * 1024  # in bytes as `document_bytes` counts them
CACHED_TEXT_CHARS = 16 * 1024  # a longer text is parsed each time, never cached
TOKEN_BYTES = 512  # what a parsed document holds per token, rounded up (see document_bytes)
ERROR_BYTES = 2048  # what a validation error holds, besides its message


def document_bytes(text: str, document: DocumentNode) -> int:
    """About the memory a parsed `text` holds, the text included: TOKEN_BYTES a token, and the text twice."""
    loc = document.loc
    if loc is None:
        tokens = len(text) + 2
    else:
        tokens = 0
        token: Token | None = loc.start_token
        while token is not None:
            tokens += 1
            token = token.next
    return 2 * sys.getsizeof(text) + TOKEN_BYTES * tokens


@dataclass(slots=True)
class Known:
    """What is known of one query text: its document (parsed with `options`), and its validations."""

    options: tuple[Any, ...]
    document: DocumentNode
    held: int  # bytes, as document_bytes counts them, plus its validations'
    validated: dict[tuple[Any, ...], list[GraphQLError]] = field(default_factory=dict)


class DocumentCache:
    """Query texts' documents and validation results, least recently used dropped first.

    An app serves on one event loop: its extension is never run by two threads at once.
    """

    def __init__(
        self,
        size: int = DOCUMENT_CACHE_SIZE,
        max_bytes: int = DOCUMENT_CACHE_BYTES,
        max_text: int = CACHED_TEXT_CHARS,
    ) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.max_text = max_text
        self.texts: OrderedDict[str, Known] = OrderedDict()
        self.held_bytes = 0

    def extension(self) -> SchemaExtension:
        return DocumentCacheExtension(self)

    def hold(self, text: str, known: Known, added: int) -> None:
        """Count `added` bytes more for `text` (added if new), dropping the oldest past the bounds."""
        known.held += added
        if self.texts.get(text) is known:
            self.held_bytes += added
        elif len(text) <= self.max_text:
            self.texts[text] = known
            self.held_bytes += known.held
        while self.texts and (self.held_bytes > self.max_bytes or len(self.texts) > self.size):
            _, dropped = self.texts.popitem(last=False)
            self.held_bytes -= dropped.held


class DocumentCacheExtension(SchemaExtension):
    """Skips parsing and validating a query text seen before; both are pure functions of it."""

    def __init__(self, cache: DocumentCache) -> None:
        self.cache = cache
        self.known: Known | None = None

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        text = context.query
        options = tuple(sorted(context.parse_options.items()))
        supplied = context.graphql_document is not None  # by another extension: left as it is
        if not supplied and text is not None:
            known = self.cache.texts.get(text)
            if known is not None and known.options == options:
                self.cache.texts.move_to_end(text)
                context.graphql_document = known.document
                self.known = known
        yield
        document = context.graphql_document
        # A text that did not parse is not cached: its error is cheap to find again.
        parsed = document is not None and not context.pre_execution_errors
        if self.known is None and not supplied and text is not None and parsed:
            self.known = Known(options, document, 0)  # type: ignore[arg-type]  # parsed: not None
            self.cache.hold(text, self.known, document_bytes(text, document))  # type: ignore[arg-type]

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        known = self.known
        if known is None or known.document is not context.graphql_document or context.pre_execution_errors:
            yield
            return
        rules = tuple(context.validation_rules)
        found = known.validated.get(rules)
        if found is not None:
            context.pre_execution_errors = list(found)
        yield
        if found is None and context.pre_execution_errors is not None and context.query is not None:
            errors = list(context.pre_execution_errors)
            known.validated[rules] = errors
            # An error holds its message, locations and path; its nodes are the document's.
            self.cache.hold(context.query, known, sum(ERROR_BYTES + 2 * len(e.message) for e in errors))
