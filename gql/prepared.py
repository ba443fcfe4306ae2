"""What the prepared path (`RunLogGraphQL.run_prepared`) takes, and what it leaves to Strawberry."""

from __future__ import annotations

import logging
from typing import Any

from strawberry.extensions import DisableIntrospection

from . import metrics
from .answers import (
    MaskUnexpected,
)
from .engine import DocumentCacheExtension
from .limits import (
    RequestLimits,
)

log = logging.getLogger("gql.app")


def reproduced(extension: Any) -> bool:
    """Whether `run_prepared` does what `extension` does for a request (see `run_prepared`)."""
    made = extension if isinstance(extension, type) else type(extension())
    # Masking is in process_result, limits and introspection in the cached validation.
    return made in (MaskUnexpected, RequestLimits, DisableIntrospection, DocumentCacheExtension)


# The commonest spellings of what `json_content_type` accepts; any other goes through `run`.
PLAIN_JSON = frozenset({"application/json", "application/json; charset=utf-8"})
# orjson reads an integer outside 64 bits as a float: a body holding a float this large is
# left to Strawberry, whose `json` keeps it exact.
INEXACT = float(2**63)
# A body this big is left to Strawberry, so as not to be decoded twice.
PREPARED_MAX_BODY = 256 * 1024


def declined(reason: str, query: str | None, why: str) -> None:
    """Count a request `run_prepared` leaves to Strawberry's pipeline, and log it once per text."""
    metrics.fell_back("prepared", reason, query, why)


def maybe_inexact(value: object) -> bool:
    """Whether orjson may have read a number in `value` otherwise than `json` (see `INEXACT`)."""
    pending = [value]
    while pending:
        found = pending.pop()
        if type(found) is dict:
            pending.extend(found.values())
        elif type(found) is list:
            pending.extend(found)
        elif type(found) is float and not -INEXACT < found < INEXACT:
            return True
    return False
