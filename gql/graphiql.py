"""GraphiQL at /graphql, opening on the example operations in `gql/operations/`.

The page is Strawberry's own (same GraphiQL release, same CDN links and
integrity hashes), changed in two places: GraphiQL gets `defaultTabs`, one tab
per example operation with variables that work on the demo runs, and Strawberry's
welcome text no longer overwrites the first tab. The examples are the very
files the generated clients are built from, so what someone tries here is what
a client sends.

GraphiQL shows `defaultTabs` when the browser has no tabs stored for this
address; once someone has edited, their own tabs come back instead (GraphiQL's
settings dialog has "Clear storage" to see the examples again).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphql import FragmentDefinitionNode, FragmentSpreadNode, OperationDefinitionNode, parse
from graphql.language import Visitor, visit
from strawberry.http.ides import get_graphql_ide_html

from . import demo

OPERATIONS_DIR = Path(__file__).parent / "operations"
FRAGMENTS_FILE = "fragments.graphql"

# Tab order, and variables that show something on the demo runs.
TABS: list[tuple[str, dict[str, Any]]] = [
    ("RunLog.graphql", {"runId": str(demo.INVASION), "limit": 50}),
    (
        "RunLogByKinds.graphql",
        {
            "runId": str(demo.INVASION),
            "kinds": ["PHASE_GATE", "CONDITION_EVALUATED", "PHASE_ADVANCED"],
        },
    ),
    ("RunLogPage.graphql", {"runId": str(demo.TREASURE_HUNT), "limit": 5, "after": None}),
    (
        "WriteNote.graphql",
        {
            "runId": str(demo.BLOCKED),
            "text": "Checked with the events team: 38 starts when 37 ends.",
            "actor": "you, in GraphiQL",
        },
    ),
]

_TABS_ELEMENT_ID = "runlog-example-tabs"

# Where Strawberry's page is changed. If a Strawberry release rewrites its page,
# `graphiql_html` fails loudly (and tests/test_graphiql.py with it) rather than
# serving a page that silently lost its examples.
_PATCHES = (
    (
        "<title>Strawberry GraphiQL</title>",
        "<title>Run log API · GraphiQL</title>",
    ),
    (
        "      // Parse URL parameters for sharing queries\n",
        "      // The run-log API's example tabs (gql/graphiql.py).\n"
        "      const RUNLOG_TABS = JSON.parse(\n"
        f'        document.getElementById("{_TABS_ELEMENT_ID}").textContent,\n'
        "      );\n"
        "      // GraphiQL 3 opens on defaultTabs only when it has no tabs stored,\n"
        "      // and then leaves the first tab's variables out of the editor.\n"
        "      const RUNLOG_FIRST_VISIT = (() => {\n"
        "        try {\n"
        '          return window.localStorage.getItem("graphiql:tabState") === null;\n'
        "        } catch {\n"
        "          return false;\n"
        "        }\n"
        "      })();\n\n"
        "      // Parse URL parameters for sharing queries\n",
    ),
    # Strawberry opens on its welcome text unless the URL carries ?q=; here the
    # first example tab is the welcome, and ?q= still opens a shared query.
    (
        "parameters.q || EXAMPLE_QUERY,",
        "parameters.q,",
    ),
    (
        "          parameters.variables,\n",
        "          parameters.variables ??\n"
        "            (RUNLOG_FIRST_VISIT && !parameters.q\n"
        "              ? RUNLOG_TABS[0].variables\n"
        "              : undefined),\n",
    ),
    (
        "React.createElement(GraphiQL, {",
        "React.createElement(GraphiQL, {\n          defaultTabs: RUNLOG_TABS,",
    ),
)


@dataclass(frozen=True)
class Tab:
    """One example tab: a whole document (operation plus the fragments it uses)."""

    name: str
    query: str
    variables: dict[str, Any]


def example_tabs() -> list[Tab]:
    fragments = _fragments()
    return [
        Tab(
            name=file.removesuffix(".graphql"),
            query=_document(file, fragments),
            variables=variables,
        )
        for file, variables in TABS
    ]


@functools.cache
def graphiql_html() -> str:
    """Strawberry's GraphiQL page, opening on the example operations."""
    html = get_graphql_ide_html("graphiql")
    for anchor, replacement in _PATCHES:
        if html.count(anchor) != 1:
            raise RuntimeError(
                f"Strawberry's GraphiQL page no longer contains {anchor!r} exactly once; "
                "update gql/graphiql.py for this Strawberry release"
            )
        html = html.replace(anchor, replacement)
    tabs = [{"query": tab.query, "variables": json.dumps(tab.variables, indent=2)} for tab in example_tabs()]
    # `<` escaped so no text in an operation can close the script element.
    payload = json.dumps(tabs).replace("<", "\\u003c")
    element = f'<script type="application/json" id="{_TABS_ELEMENT_ID}">{payload}</script>\n'
    return html.replace("</head>", element + "  </head>", 1)


def _fragments() -> dict[str, tuple[str, set[str]]]:
    """Each shared fragment's text and the fragments it spreads."""
    source = (OPERATIONS_DIR / FRAGMENTS_FILE).read_text(encoding="utf-8")
    found = {}
    for definition in parse(source).definitions:
        if isinstance(definition, FragmentDefinitionNode):
            loc = definition.loc
            if loc is None:  # parse() keeps locations unless told not to
                raise RuntimeError(f"no source location for fragment {definition.name.value}")
            text = source[loc.start : loc.end]
            found[definition.name.value] = (text, _spreads(definition))
    return found


def _document(file: str, fragments: dict[str, tuple[str, set[str]]]) -> str:
    """The operation file as written, followed by every fragment it needs."""
    source = (OPERATIONS_DIR / file).read_text(encoding="utf-8")
    needed: set[str] = set()
    pending = [
        name
        for definition in parse(source).definitions
        if isinstance(definition, OperationDefinitionNode)
        for name in _spreads(definition)
    ]
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(fragments[name][1])
    if not needed:
        return source
    # In the order of fragments.graphql, so the line fragment comes first.
    texts = [text for name, (text, _) in fragments.items() if name in needed]
    return source + f"\n# From gql/operations/{FRAGMENTS_FILE}:\n\n" + "\n\n".join(texts) + "\n"


def _spreads(node: Any) -> set[str]:
    names: set[str] = set()

    class Spreads(Visitor):
        def enter_fragment_spread(self, spread: FragmentSpreadNode, *_: Any) -> None:
            names.add(spread.name.value)

    visit(node, Spreads())
    return names
