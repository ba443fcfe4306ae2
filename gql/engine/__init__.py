"""The engine: answers the operations clients send once they are known (`Engine`, engine.py).

The schema plugs in `PageExecutor` (or `VariablesExecutor`) and `DocumentCaches.extension`.
Modules outside the package import only what this module exports.
"""

from .coercion import VariablesExecutor
from .documents import DocumentCacheExtension, DocumentCaches
from .engine import Engine, Planned
from .page_plan import PageExecutor

__all__ = [
    "DocumentCacheExtension",
    "DocumentCaches",
    "Engine",
    "PageExecutor",
    "Planned",
    "VariablesExecutor",
]
