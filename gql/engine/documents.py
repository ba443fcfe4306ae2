"""Parsed and validated documents, cached by query text (`DocumentCaches`, one per app), and prepared texts.

Add `DocumentCaches().extension` last among the schema's extensions. Bounded in count and in bytes.
The known documents' parses and validations are also shared by the apps a process builds (`share`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DocumentNode,
    ExecutionResult,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    Token,
)
from strawberry.extensions import SchemaExtension

log = logging.getLogger("gql.engine")

DOCUMENT_CACHE_SIZE = 256  # distinct query texts per process
DOCUMENT_CACHE_BYTES = 32 * 1024 * 1024  # in bytes as `document_bytes` counts them
CACHED_TEXT_CHARS = 16 * 1024  # a longer text is parsed each time, never cached
TOKEN_BYTES = 512  # what a parsed document holds per token, rounded up (see document_bytes)
ERROR_BYTES = 2048  # what a validation error or a prepared operation holds, besides its message
SHARED_ENTRIES = 64  # known documents' parses and validations held for the process's apps

# The context of a request that is to be parsed, validated and cached, and not run (Engine.warm).
NOT_RUN = object()


# ── caching parsed and validated documents ───────────────────────────────────


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
class _Document:
    """What is known of one query text: its document, its validation, its operations."""

    options: tuple[Any, ...]  # the parse options it was parsed with
    document: DocumentNode
    held: int  # bytes, as document_bytes counts them, plus what was added since
    validated: dict[tuple[Any, ...], list[GraphQLError]] = field(default_factory=dict)
    prepared: PreparedDocument | None = None


class DocumentCaches:
    """Parsed documents by query text, their validation results, and prepared texts, for one schema.

    Keyed by text: a document hashes by walking its tree. Texts over `max_text` characters are not cached.
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
        self.texts: OrderedDict[str, _Document] = OrderedDict()
        self.held_bytes = 0
        self.lock = threading.Lock()
        self.schema_key: str | None = None
        self.known: frozenset[str] = frozenset()

    def share(self, schema_key: str, texts: Iterable[str]) -> None:
        """Share `texts`' parses and validations with the process's apps whose schema prints `schema_key`."""
        self.schema_key, self.known = schema_key, frozenset(texts)

    def extension(self) -> SchemaExtension:
        return DocumentCacheExtension(self)

    def document(self, query: str, options: tuple[Any, ...]) -> DocumentNode | None:
        with self.lock:
            known = self.texts.get(query)
            if known is not None and known.options == options:
                self.texts.move_to_end(query)
                return known.document
        document = _SHARED.get((query, options)) if query in self.known else None
        if document is not None:
            self.add_document(query, options, document)
        return document

    def add_document(self, query: str, options: tuple[Any, ...], document: DocumentNode) -> None:
        if len(query) > self.max_text:
            return
        if query in self.known:
            _SHARED.put((query, options), document)
        held = document_bytes(query, document)
        with self.lock:
            old = self.texts.pop(query, None)
            if old is not None:
                self.held_bytes -= old.held
            self.texts[query] = _Document(options, document, held)
            self.held_bytes += held
            self._evict()

    def validation(
        self, query: str, document: DocumentNode, rules: tuple[Any, ...]
    ) -> list[GraphQLError] | None:
        with self.lock:
            known = self.texts.get(query)
            if known is None or known.document is not document:
                return None
            found = known.validated.get(rules)
        if found is None and query in self.known:
            # Only for the same document: each error points into it.
            shared = _SHARED.get((self.schema_key, query, rules))
            if shared is not None and shared[0] is document:
                found = shared[1]
                self.add_validation(query, document, rules, found)
        return found

    def add_validation(
        self, query: str, document: DocumentNode, rules: tuple[Any, ...], errors: list[GraphQLError]
    ) -> None:
        if query in self.known:
            _SHARED.put((self.schema_key, query, rules), (document, errors))
        # An error holds its message, locations and path; its nodes are the document's.
        held = sum(ERROR_BYTES + 2 * len(e.message) for e in errors)
        self._add(query, document, held, lambda known: known.validated.update({rules: errors}))

    def prepared_operation(
        self, query: str, operation_name: str | None
    ) -> tuple[DocumentNode, OperationDefinitionNode] | None:
        """The valid document for `query` and its operation `operation_name`, if both are known."""
        with self.lock:
            known = self.texts.get(query)
            if known is None or known.prepared is None:
                return None
            self.texts.move_to_end(query)
            prepared = known.prepared
        operation = prepared.operations.get(operation_name)
        return None if operation is None else (prepared.document, operation)

    def prepare(self, query: str, document: DocumentNode) -> None:
        """Keep the operations of a text that validated cleanly, for `prepared_operation`."""
        with self.lock:
            known = self.texts.get(query)
            if known is None or known.prepared is not None:
                return
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        by_name: dict[str | None, OperationDefinitionNode] = {
            o.name.value: o for o in operations if o.name is not None
        }
        if len(operations) == 1:
            by_name[None] = operations[0]  # no operationName needed, as graphql-core has it
        # A subscription is answered by other means, and is left to Strawberry.
        kept = {
            name: o
            for name, o in by_name.items()
            if o.operation in (OperationType.QUERY, OperationType.MUTATION)
        }
        if kept:
            prepared = PreparedDocument(document, kept)
            self._add(
                query, document, ERROR_BYTES * len(kept), lambda known: setattr(known, "prepared", prepared)
            )

    def _add(self, query: str, document: DocumentNode, held: int, add: Callable[[_Document], None]) -> None:
        with self.lock:
            known = self.texts.get(query)
            if known is None or known.document is not document:
                return  # dropped meanwhile, or parsed again: nothing to add to
            add(known)
            known.held += held
            self.held_bytes += held
            self._evict()

    def _evict(self) -> None:
        while self.texts and (self.held_bytes > self.max_bytes or len(self.texts) > self.size):
            _, dropped = self.texts.popitem(last=False)
            self.held_bytes -= dropped.held


class _Shared:
    """The known documents' parses, by text and parse options, and validations, by schema, text and rules.

    What an app prepares stays its own: a text valid under one app's rules may not be under another's.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any:
        with self.lock:
            return self.entries.get(key)

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        with self.lock:
            self.entries[key] = value
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)


_SHARED = _Shared(SHARED_ENTRIES)


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    """A query text's document, valid under the app's rules, and its operations by name."""

    document: DocumentNode
    operations: dict[str | None, OperationDefinitionNode]


class DocumentCacheExtension(SchemaExtension):
    """Skips parsing and validating a query text seen before; both are pure functions of it."""

    def __init__(self, caches: DocumentCaches) -> None:
        self.caches = caches
        self.parsed_text: str | None = None  # the text the request's document was parsed from

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        options = None
        if context.graphql_document is None and context.query is not None:
            options = tuple(sorted(context.parse_options.items()))
            document = self.caches.document(context.query, options)
            if document is not None:
                context.graphql_document = document
                self.parsed_text = context.query
                options = None
        yield
        # A text that did not parse is not cached: its error is cheap to find again.
        if options is not None and context.graphql_document is not None and not context.pre_execution_errors:
            self.caches.add_document(context.query, options, context.graphql_document)  # type: ignore[arg-type]
            self.parsed_text = context.query

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        text = self.parsed_text
        rules = tuple(context.validation_rules)
        if text is None or document is None or context.pre_execution_errors is not None:
            yield
            return
        found = self.caches.validation(text, document, rules)
        if found is not None:
            context.pre_execution_errors = list(found)
        yield
        if context.pre_execution_errors is None:
            return
        if found is None:
            self.caches.add_validation(text, document, rules, list(context.pre_execution_errors))
        if context.pre_execution_errors == []:
            self.caches.prepare(text, document)

    def on_execute(self) -> Iterator[None]:
        if self.execution_context.context is NOT_RUN:
            # A result set here is answered without executing, as Strawberry's extensions guide shows.
            self.execution_context.result = ExecutionResult(data=None)
        yield
