"""GraphiQL at /graphql, served entirely by the service (no CDN), opening on the example operations.

Its files are `gql/static/graphiql/` (from `scripts/graphiql-assets`), served at
`/graphiql/<digest>/<name>` under a same-origin CSP.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphql import FragmentDefinitionNode, FragmentSpreadNode, OperationDefinitionNode, parse
from graphql.language import Visitor, visit
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from ..domain import demo_runs

OPERATIONS_DIR = Path(__file__).parents[1] / "operations"
FRAGMENTS_FILE = "fragments.graphql"
STATIC_DIR = Path(__file__).parents[1] / "static"
VENDOR_DIR = STATIC_DIR / "graphiql"
# The page's own script and style, written here (not from npm).
OWN_FILES = ("runlog-graphiql.js", "runlog-graphiql.css")

# Relative to the page, so a proxy serving the API under a prefix serves these under it too.
ASSETS_PATH = "/graphiql/{digest}/{name}"

# Tab order, and variables that show something on the demo runs.
TABS: list[tuple[str, dict[str, Any]]] = [
    ("RunLog.graphql", {"runId": str(demo_runs.INVASION), "limit": 50}),
    ("RunHolds.graphql", {"runId": str(demo_runs.BLOCKED)}),
    ("RunsInFlight.graphql", {"limit": 20, "after": None}),
    (
        "RunLogByKinds.graphql",
        {
            "runId": str(demo_runs.INVASION),
            "kinds": ["PHASE_GATE", "CONDITION_EVALUATED", "PHASE_ADVANCED"],
        },
    ),
    ("RunLogPage.graphql", {"runId": str(demo_runs.TREASURE_HUNT), "limit": 5, "after": None}),
    # Finding a line: the run page's operation, which takes every filter. Not RunLog
    # again: GraphiQL names a tab after its operation, and two tabs named alike
    # could not be told apart.
    ("RunLines.graphql", {"runId": str(demo_runs.INVASION), "search": "Yew", "limit": 20}),
    (
        "WriteNote.graphql",
        {
            "runId": str(demo_runs.BLOCKED),
            "text": "Checked with the events team: 38 starts when 37 ends.",
            "actor": "you, in GraphiQL",
        },
    ),
    # The run WriteNote writes to: the note arrives here.
    ("RunLogTail.graphql", {"runId": str(demo_runs.BLOCKED), "since": None}),
]

_TABS_ELEMENT_ID = "runlog-example-tabs"

# Only this origin (CSP 3's 'self' covers ws: and wss:); fonts and icons are data: URLs.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# A URL names one file's bytes for good (its digest is in the path).
_IMMUTABLE = "public, max-age=31536000, immutable"
_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


@dataclass(frozen=True)
class Asset:
    name: str
    body: bytes
    digest: str  # the first 16 hex digits of the sha256, in the URL
    integrity: str  # for the page's `integrity` attributes

    @property
    def url(self) -> str:
        return ASSETS_PATH.format(digest=self.digest, name=self.name).removeprefix("/")

    @functools.cached_property
    def gzipped(self) -> bytes:
        # Once per process.
        return gzip.compress(self.body, compresslevel=6, mtime=0)


@functools.cache
def assets() -> dict[str, Asset]:
    """The files the page loads, by name, checked against `assets.json`."""
    return load_assets(VENDOR_DIR, STATIC_DIR)


def load_assets(
    vendor_dir: Path, static_dir: Path, own_files: tuple[str, ...] = OWN_FILES
) -> dict[str, Asset]:
    """The files of `vendor_dir`'s `assets.json`, checked, and `own_files` of `static_dir`."""
    manifest = json.loads((vendor_dir / "assets.json").read_text(encoding="utf-8"))
    found = {}
    paths = [(vendor_dir / name, digest) for name, digest in manifest["files"].items()]
    paths += [(static_dir / name, None) for name in own_files]
    for path, recorded in paths:
        body = path.read_bytes()
        sha256 = hashlib.sha256(body).hexdigest()
        if recorded is not None and sha256 != recorded:
            raise RuntimeError(
                f"{path} is not the file scripts/graphiql-assets took from npm "
                f"(sha256 {sha256}, recorded {recorded}); run scripts/graphiql-assets"
            )
        integrity = "sha384-" + base64.b64encode(hashlib.sha384(body).digest()).decode()
        found[path.name] = Asset(path.name, body, sha256[:16], integrity)
    return found


async def serve_asset(request: Request) -> Response:
    """One of the page's files, by its digest and name; 404 for any other."""
    return asset_response(assets(), request)


def asset_response(files: dict[str, Asset], request: Request) -> Response:
    """The file of `files` that the request's `digest` and `name` name, or 404."""
    asset = files.get(request.path_params["name"])
    media_type = _MEDIA_TYPES.get(Path(asset.name).suffix) if asset is not None else None
    # The licences are in the package, not served.
    if asset is None or media_type is None or asset.digest != request.path_params["digest"]:
        return PlainTextResponse("Not Found", status_code=404)
    headers = {
        "Cache-Control": _IMMUTABLE,
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(asset.gzipped, media_type=media_type, headers=headers)
    return Response(asset.body, media_type=media_type, headers=headers)


def graphiql_response() -> Response:
    """The GraphiQL page, with its Content-Security-Policy."""
    return HTMLResponse(graphiql_html(), headers=PAGE_HEADERS)


# Every page's headers (GraphiQL's and the run page's).
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The page changes with the service; its assets are what is cached.
    "Cache-Control": "no-cache",
}


@functools.cache
def graphiql_html() -> str:
    """The GraphiQL page, opening on the example operations."""
    files = assets()

    def script(name: str) -> str:
        asset = files[name]
        return f'    <script src="{asset.url}" integrity="{asset.integrity}"></script>\n'

    def style(name: str) -> str:
        asset = files[name]
        return f'    <link rel="stylesheet" href="{asset.url}" integrity="{asset.integrity}" />\n'

    tabs = [{"query": tab.query, "variables": json.dumps(tab.variables, indent=2)} for tab in example_tabs()]
    # `<` escaped so no text in an operation can close the script element.
    payload = json.dumps(tabs).replace("<", "\\u003c")
    return (
        "<!doctype html>\n"
        '<html lang="en">\n'
        "  <head>\n"
        '    <meta charset="utf-8" />\n'
        "    <title>Run log API · GraphiQL</title>\n"
        + style("graphiql.min.css")
        + style("plugin-explorer.css")
        + style("runlog-graphiql.css")
        + f'    <script type="application/json" id="{_TABS_ELEMENT_ID}">{payload}</script>\n'
        "  </head>\n"
        "  <body>\n"
        '    <div id="graphiql" class="graphiql-container">Loading...</div>\n'
        + script("react.production.min.js")
        + script("react-dom.production.min.js")
        + script("graphiql.min.js")
        + script("plugin-explorer.umd.js")
        + script("runlog-graphiql.js")
        + "  </body>\n"
        "</html>\n"
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
            query=with_fragments((OPERATIONS_DIR / file).read_text(encoding="utf-8"), fragments),
            variables=variables,
        )
        for file, variables in TABS
    ]


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


def with_fragments(source: str, fragments: dict[str, tuple[str, set[str]]] | None = None) -> str:
    """An operation's text followed by every shared fragment it needs (and no other)."""
    fragments = _fragments() if fragments is None else fragments
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
