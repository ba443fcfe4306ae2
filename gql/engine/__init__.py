"""The engine: how the operations clients send are answered once they are known.

One entry point, `Engine` (engine.py): the view hands it a request's text,
operation name and variables, and gets back a planned request to run, or
None for Strawberry's ordinary path. Inside:

- documents.py: each text parsed and validated once, under the app's rules,
  by Strawberry's own pipeline (`DocumentCaches` and its schema extension);
- plans.py: each operation planned once, by the same steps for reads and
  writes; coercion.py: how a plan reads variables and arguments;
- write_plan.py, read_plan.py: a mutation of `writeRunLog` fields, a query of
  one `runLog` field, answered without graphql-core's executor;
- page_plan.py, compiler.py: the executor Strawberry runs (`PageExecutor`,
  the schema's `execution_context_class`), which completes a `RunLogPage`
  with a function compiled once per selection; it is a `VariablesExecutor`
  (coercion.py), which refuses a null variable where a value is needed.

The schema plugs in `PageExecutor` (or, pages unplanned, `VariablesExecutor`)
and the app `DocumentCaches.extension` (a `DocumentCacheExtension`), through
Strawberry's documented seams;
everything else goes through `Engine`. Modules outside the package import
only what this module exports (tests/test_layers.py checks it).
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
