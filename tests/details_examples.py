"""One valid detail per kind, as a writer would send it: each kind's declared example (gql/details.py)."""

from __future__ import annotations

from gql.details import EXAMPLES

__all__ = ["EXAMPLES"]
