"""`GET /runs/{runId}/log.ndjson` (`route(graphql_app)`): a run's whole log, oldest first, one JSON line each.

Pages of the shipped line fragment, read through the schema with the caller's authorization,
one at a time as the client takes them; see `Export` for its bounds.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import urllib.parse
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any, BinaryIO, TextIO

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from .. import store
from ..api.filters import FilterError, read_filters
from ..api.limits import DetailBudget
from ..domain.admission import Busy
from ..ids import id_problem, parse_id
from ..kinds import Kind
from .answers import json_error
from .graphiql import with_fragments

log = logging.getLogger("gql.edge.export")

PAGE_LINES = 500  # lines read and sent at a time
QUERY = with_fragments(
    "query RunLogExport($runId: ID!, $before: String, $limit: Int, $kinds: [RunLogKind!], $phase: [Int!], "
    "$stepId: [ID!], $since: DateTime, $until: DateTime, $search: String) {\n"
    "  runLog(runId: $runId, before: $before, limit: $limit, kinds: $kinds, phase: $phase, stepId: $stepId, "
    "since: $since, until: $until, search: $search) {\n"
    "    nodes { cursor ...RunLogLineFields }\n"
    "    pageInfo { hasPreviousPage startCursor }\n"
    "  }\n"
    "}\n"
)
_KINDS = {kind.name: kind for kind in Kind} | {kind.value: kind for kind in Kind}


class ExportError(ValueError):
    """A query parameter of the export that does not parse: the message names it."""


def variables_of(run_id: str, params: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The `RunLogExport` variables for these query parameters, and the cursor of the run's start.

    Lists repeat their parameter (`?phase=1&phase=2`) or separate values by commas; kinds: `NOTE` or `note`.
    """
    number = parse_id(run_id)
    if number is None:
        raise ExportError(id_problem("runId", run_id))
    known = {"kinds", "phase", "stepId", "since", "until", "search"}
    for name in params:
        if name not in known:
            raise ExportError(f"{name} is not a parameter of the export; it takes {', '.join(sorted(known))}")

    def listed(name: str) -> list[str] | None:
        values = params.getlist(name) if hasattr(params, "getlist") else params.get(name)
        if values is None or values == []:
            return None
        if isinstance(values, str):
            values = [values]
        return [part.strip() for value in values for part in value.split(",") if part.strip()]

    kinds = listed("kinds")
    if kinds == [] and "kinds" in params:
        # In GraphQL `kinds: []` means none; a URL's empty value is far likelier a mistake.
        raise ExportError("kinds= is empty: name at least one kind or leave kinds out")
    wire_kinds = names = None
    if kinds is not None:
        unknown = [k for k in kinds if k not in _KINDS]
        if unknown:
            raise ExportError(f"kinds: {unknown[0]!r:.60} is not a kind")
        wire_kinds = sorted({_KINDS[k].value for k in kinds})
        names = sorted({_KINDS[k].name for k in kinds})
    phases = listed("phase")
    phase = None
    if phases is not None:
        try:
            phase = [int(value) for value in phases]
        except ValueError:
            raise ExportError(f"phase must be integers, got {','.join(phases)!r:.60}") from None
    times: dict[str, datetime.datetime | None] = {}
    for name in ("since", "until"):
        text = params.get(name)
        try:
            times[name] = None if text is None else datetime.datetime.fromisoformat(text)
        except ValueError:
            raise ExportError(f"{name} must be a date and time (ISO 8601), got {text!r:.60}") from None
    try:
        filters = read_filters(
            phase=phase,
            step_id=listed("stepId"),
            since=times["since"],
            until=times["until"],
            search=params.get("search"),
        )
    except FilterError as exc:
        raise ExportError(str(exc)) from None
    start = store.encode_cursor(store.START, store.cursor_scope(number, wire_kinds, filters))
    values = {
        "runId": str(number),
        "kinds": None if wire_kinds is None else names,
        "phase": phase,
        "stepId": listed("stepId"),
        "since": None if times["since"] is None else times["since"].isoformat(),
        "until": None if times["until"] is None else times["until"].isoformat(),
        "search": params.get("search"),
        "limit": PAGE_LINES,
    }
    return values, start


class _Refused(Exception):
    """A page GraphQL refused: its status, message and code, for the answer (or the log, if not first)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


# A refusal's status by its code; any other error is a fault of ours (500).
_STATUS = {
    "BAD_USER_INPUT": 400,
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "DATABASE_UNAVAILABLE": 503,
}
# Stored detail bytes one page of the export holds at most: the most it keeps in memory at a time.
PAGE_BYTES = 1024 * 1024
CHUNK_BYTES = 64 * 1024  # bytes handed to the server at a time: it holds no more for a slow client


async def _pages(
    graphql_app: Any, context: Any, variables: dict[str, Any], start: str
) -> AsyncIterator[bytes]:
    """Each page's lines, oldest first, as NDJSON: `before` pages from the run's start until none is newer."""
    before: str | None = start
    page_bytes = min(PAGE_BYTES, context.settings.max_page_bytes)
    while before is not None:
        context.detail_budget = DetailBudget(page_bytes)  # one page is held at a time
        asked = {**variables, "before": before}
        result = await graphql_app.schema.execute(
            QUERY, variable_values=asked, context_value=context, operation_name="RunLogExport"
        )
        if result.errors:
            error = result.errors[0]
            code = (error.extensions or {}).get("code")
            if code is None and error.path is None:
                code = "BAD_USER_INPUT"  # a variable that does not coerce: refused before it ran
            if code not in _STATUS:
                # Masked by MaskUnexpected: a fault of ours, logged there with its stack.
                raise _Refused(500, f"the export failed (request id {context.request_id})")
            raise _Refused(_STATUS[code], error.message, code)
        page = result.data["runLog"]
        nodes = page["nodes"]
        info = page["pageInfo"]
        before = info["startCursor"] if info["hasPreviousPage"] else None
        del result, page  # only the page's bytes are held while the client takes them
        if nodes:
            yield b"".join(graphql_app.encode_json(node) + b"\n" for node in reversed(nodes))


def route(graphql_app: Any) -> Any:
    """The export's endpoint, answering through `graphql_app`'s schema and context."""

    async def export(request: Request) -> Any:
        try:
            variables, start = variables_of(request.path_params["runId"], request.query_params)
        except ExportError as exc:
            return json_error(request, 400, str(exc))
        context = await graphql_app.get_context(request, response=None)
        return Export(request, _pages(graphql_app, context, variables, start), context, variables["runId"])

    return export


class Export:
    """The export's answer: admitted among RUNLOG_MAX_EXPORTS, page by page as the client takes them.

    It ends, its statement with it, as soon as the client leaves (hangup.py), and drops a client
    that takes nothing for RUNLOG_SEND_TIMEOUT.
    """

    def __init__(self, request: Request, pages: AsyncIterator[bytes], context: Any, run_id: str) -> None:
        self.request = request
        self.pages = pages
        self.context = context
        self.run_id = run_id
        self.sent = 0  # lines sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            running = self.context.admissions.exports.enter()
        except Busy as exc:
            log.warning("export of run %s refused: %s", self.run_id, exc.message)
            answer = json_error(
                self.request, 503, exc.message, {"Retry-After": str(exc.retry_after)}, code=exc.code
            )
            await answer(scope, receive, send)
            return
        with running:
            self.context.admissions = None  # its pages are admitted with it, not as searches
            try:
                await self._pages_sent(scope, receive, send)
            finally:
                await self.pages.aclose()  # type: ignore[attr-defined]

    async def _pages_sent(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            # Read before the head is sent: a refusal of the first page is the answer's status.
            chunk: bytes | None = await anext(self.pages, b"")
        except _Refused as exc:
            headers = {"WWW-Authenticate": 'Bearer realm="runlog"'} if exc.status == 401 else None
            extensions = {} if exc.code is None else {"code": exc.code}
            await json_error(self.request, exc.status, exc.message, headers, **extensions)(
                scope, receive, send
            )
            return
        head = [(b"content-type", b"application/x-ndjson; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        patience = self.context.settings.send_timeout
        try:
            while chunk is not None:
                for start in range(0, len(chunk), CHUNK_BYTES):
                    # The server's send waits while the client's socket is full: nothing queues ahead.
                    async with asyncio.timeout(patience):
                        await send(
                            {
                                "type": "http.response.body",
                                "body": chunk[start : start + CHUNK_BYTES],
                                "more_body": True,
                            }
                        )
                self.sent += chunk.count(b"\n")
                chunk = None  # not held while the next page is read
                chunk = await anext(self.pages, None)
        except TimeoutError:
            log.warning(
                "export of run %s: dropped after %d lines, its client took nothing in %s s "
                "(RUNLOG_SEND_TIMEOUT)",
                self.run_id,
                self.sent,
                patience,
            )
            return
        except _Refused as exc:
            log.error("export of run %s ended early: %s", self.run_id, exc.message)
            return
        except OSError:
            return  # the client went away
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def export_to(
    app: Any, settings: Any, run_id: str, params: list[tuple[str, str]], out: BinaryIO, errors: TextIO
) -> int:
    """`python -m gql export`: the route's answer from `app`, as the first reader token, written to `out`.

    Answers the exit status: 0, or 1 with the refusal on `errors`.
    """
    token = settings.reader_tokens[0] if settings.reader_tokens else None
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/runs/{urllib.parse.quote(run_id, safe='')}/log.ndjson",
        "raw_path": b"",
        "root_path": "",
        "query_string": urllib.parse.urlencode(params).encode(),
        "headers": [(b"host", b"localhost")]
        + ([(b"authorization", f"Bearer {token}".encode())] if token else []),
        "client": ("127.0.0.1", 0),
        "server": ("localhost", 80),
    }
    status = 0
    body = bytearray()

    asked: list[bool] = []

    async def receive() -> dict[str, Any]:
        if not asked:
            asked.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # standard output never hangs up: the export ends by itself
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif status == 200:
            out.write(message.get("body", b""))
        else:
            body.extend(message.get("body", b""))

    async with app.router.lifespan_context(app) as state:
        await app({**scope, "state": dict(state)}, receive, send)
    out.flush()
    if status != 200:
        try:
            message = json.loads(body)["errors"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            message = body.decode(errors="replace")
        errors.write(f"error: {message}\n")
        return 1
    return 0
