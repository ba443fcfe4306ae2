"""How a GraphQL request is executed: graphql-core's executor with the compiled page plan
(`PageExecutor`), and the document cache.

The schema plugs in `PageExecutor` (or `VariablesExecutor`) and `DocumentCache.extension`.
Modules outside the package import only what this module exports.
"""

from .documents import DocumentCache, DocumentCacheExtension
from .page_plan import PageExecutor
from .variables import VariablesExecutor

__all__ = [
    "DocumentCache",
    "DocumentCacheExtension",
    "PageExecutor",
    "VariablesExecutor",
]
