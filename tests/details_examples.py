"""One valid detail per kind, as a writer sends it: each kind's declared example (gql/domain/details.py)."""

from __future__ import annotations

from gql.domain.details import EXAMPLES

__all__ = ["EXAMPLES"]
