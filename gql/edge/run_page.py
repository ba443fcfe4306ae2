"""The run page: `/runs` (the runs in flight) and `/runs/{runId}` (one run), from `routes(trusted_documents)`.

One HTML shell and gql/static/runpage.js (with runpage-timeline.js: times and the Gantt chart),
calling /graphql with the shipped operations.
"""

from __future__ import annotations

import functools
import html
import json
from typing import Any

from graphql import OperationDefinitionNode, parse
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ..api.trusted import SHIPPED
from ..domain.holds import HoldReason
from ..kinds import Kind
from . import graphiql

VENDOR_DIR = graphiql.STATIC_DIR / "runpage"
OWN_FILES = ("runpage.js", "runpage-timeline.js", "runpage.css")
ASSETS_PATH = "/runs/assets/{digest}/{name}"
# The operations the script sends, by name (each a file in gql/operations/).
OPERATIONS = ("RunsInFlight", "RunHead", "RunLines", "RunTail")
VENDORED = ("preact.min.umd.js", "hooks.umd.js", "htm.umd.js", "graphql-ws.min.js")
SCRIPTS = (*VENDORED, "runpage-timeline.js", "runpage.js")


@functools.cache
def assets() -> dict[str, graphiql.Asset]:
    """The files the page loads, by name, checked against gql/static/runpage/assets.json."""
    return graphiql.load_assets(VENDOR_DIR, graphiql.STATIC_DIR, OWN_FILES)


@functools.cache
def operations() -> dict[str, dict[str, str]]:
    """The page's operations by name: each one's `documentId` and text, as the shipped manifest has them."""
    manifest: dict[str, str] = json.loads(SHIPPED.read_text(encoding="utf-8"))
    found = {}
    for key, text in manifest.items():
        for definition in parse(text).definitions:
            if isinstance(definition, OperationDefinitionNode) and definition.name is not None:
                found[definition.name.value] = {"documentId": key, "query": text}
    missing = [name for name in OPERATIONS if name not in found]
    if missing:
        raise RuntimeError(f"{SHIPPED} has no operation {missing}: regenerate it (clients/check.sh says how)")
    return {name: found[name] for name in OPERATIONS}


def routes(trusted_documents: bool) -> list[BaseRoute]:
    """The page's routes; `trusted_documents` (RUNLOG_TRUSTED_DOCUMENTS) is told to the script."""
    assets()  # read and checked now, so a damaged file stops start-up
    operations()

    async def runs(request: Request) -> Response:
        return _page(None, "", trusted_documents)

    async def run(request: Request) -> Response:
        return _page(request.path_params["runId"], "../", trusted_documents)

    async def asset(request: Request) -> Response:
        return graphiql.asset_response(assets(), request)

    return [
        Route("/runs", runs, methods=["GET"]),
        Route(ASSETS_PATH, asset, methods=["GET"]),
        Route("/runs/{runId}", run, methods=["GET"]),
    ]


def _page(run_id: str | None, root: str, trusted_documents: bool) -> Response:
    # `root` leads from the page's URL to the service's root, under any proxy prefix.
    files = assets()

    def url(name: str) -> str:
        asset = files[name]
        return html.escape(root + ASSETS_PATH.format(digest=asset.digest, name=name).removeprefix("/"))

    config: dict[str, Any] = {
        "root": root,
        "runId": run_id,
        "trustedDocuments": trusted_documents,
        "operations": operations(),
        # The kind filter's choices, as RunLogKind names them.
        "kinds": [{"kind": kind.name, "kindName": kind.value} for kind in Kind],
        # The runs list's filter by what holds a run, as HoldReason names them.
        "holdReasons": [{"reason": reason.name, "words": reason.value} for reason in HoldReason],
    }
    # `<` escaped so no text (a run id from the URL) can close the script element.
    payload = json.dumps(config).replace("<", "\\u003c")
    css = files["runpage.css"]
    title = "Runs in flight" if run_id is None else f"Run {run_id}"
    scripts = "".join(
        f'    <script src="{url(name)}" integrity="{files[name].integrity}"></script>\n' for name in SCRIPTS
    )
    body = (
        "<!doctype html>\n"
        '<html lang="en">\n'
        "  <head>\n"
        '    <meta charset="utf-8" />\n'
        '    <meta name="viewport" content="width=device-width, initial-scale=1" />\n'
        # No favicon request: an empty icon, which the policy allows (img-src data:).
        '    <link rel="icon" href="data:," />\n'
        f"    <title>{html.escape(title)} · Run log</title>\n"
        f'    <link rel="stylesheet" href="{url("runpage.css")}" integrity="{css.integrity}" />\n'
        f'    <script type="application/json" id="runpage-config">{payload}</script>\n'
        "  </head>\n"
        "  <body>\n"
        '    <div id="app"><main><p>Loading…</p></main></div>\n' + scripts + "  </body>\n"
        "</html>\n"
    )
    return HTMLResponse(body, headers=graphiql.PAGE_HEADERS)
