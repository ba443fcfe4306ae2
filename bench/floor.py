"""The floor: the same reads and writes as the service, with no GraphQL at all.

A plain Starlette app on the same engine (driver, pool, timeouts: `gql.db.create_engine`
with the same settings), running the same SQL (`gql.store.page_query` for a page, the
same INSERT for a line), building the response JSON by hand: each stored detail is
parsed with `json.loads` and given its `__typename`, nothing is checked, and the body
is serialised with orjson. What the service costs on top of this is what GraphQL,
typed details and checking cost.

    python -m bench.floor --port 8101        # RUNLOG_DATABASE_URL as for the service

POST /read  {"runId": 1, "kinds": ["NOTE"] | null, "limit": 50, "after": null}
POST /write {"runId": 1, "kind": "note", "stepId": null, "phase": null, "detail": {...}}
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from sqlalchemy import insert
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gql import store
from gql.db import create_engine, event_run_log
from gql.kinds import BY_WIRE_NAME, Kind
from gql.settings import Settings

_TYPENAME = {kind.value: "".join(p.title() for p in kind.value.split(".")) + "Detail" for kind in Kind}
_ENUM_NAME = {kind.value: kind.name for kind in Kind}


def _node(row: Any) -> dict[str, Any]:
    detail = row.detail
    if detail is not None:
        typename = _TYPENAME.get(row.kind, "UnreadableDetail")
        try:
            parsed = json.loads(detail)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and typename != "UnreadableDetail":
            parsed["__typename"] = typename
            detail = parsed
        else:
            detail = {"__typename": "UnreadableDetail", "text": detail, "problem": "unreadable"}
    return {
        "id": str(row.id),
        "kind": _ENUM_NAME.get(row.kind),
        "at": row.at.replace(tzinfo=datetime.UTC).isoformat(),
        "phase": row.phase,
        "stepId": None if row.step_id is None else str(row.step_id),
        "detail": detail,
    }


def create_app(settings: Settings | None = None) -> Starlette:
    settings = Settings.from_env() if settings is None else settings

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.engine = create_engine(settings)
        try:
            yield
        finally:
            await app.state.engine.dispose()

    async def read(request: Request) -> Response:
        args = json.loads(await request.body())
        kinds = args.get("kinds")
        wire = None if kinds is None else [Kind[name].value for name in kinds]
        limit = store.clamp_read_limit(args.get("limit"))
        after = store.decode_cursor(args["after"]) if args.get("after") else None
        rows: list[Any] = []
        if wire is None or wire:
            query = store.page_query(run_id=int(args["runId"]), kinds=wire, limit=limit, after=after)
            async with request.app.state.engine.connect() as conn:
                rows = list((await conn.execute(query)).all())
        page = rows[:limit]
        end = None
        if page:
            last = page[-1]
            raw = f"{last.at.isoformat(timespec='milliseconds')}|{last.id}"
            end = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
        body = {
            "data": {
                "runLog": {
                    "nodes": [_node(row) for row in page],
                    "pageInfo": {"hasNextPage": len(rows) > limit, "endCursor": end},
                }
            }
        }
        return Response(orjson.dumps(body), media_type="application/json")

    async def write(request: Request) -> Response:
        args = json.loads(await request.body())
        stored = False
        if args.get("kind") in BY_WIRE_NAME:
            detail = args.get("detail")
            async with request.app.state.engine.begin() as conn:
                await conn.execute(
                    insert(event_run_log).values(
                        run_id=int(args["runId"]),
                        step_id=args.get("stepId"),
                        kind=args["kind"],
                        phase=args.get("phase"),
                        detail=None if detail is None else json.dumps(detail, separators=(",", ":")),
                        at=store.utc_now_millis(),
                    )
                )
            stored = True
        return Response(orjson.dumps({"data": {"writeRunLog": stored}}), media_type="application/json")

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(
        routes=[
            Route("/read", read, methods=["POST"]),
            Route("/write", write, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--port", type=int, default=8101)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    # As `python -m gql serve` runs the service: the same server, the same log level.
    level = Settings.from_env().log_level.lower()
    if args.workers > 1:
        from gql.cli import _serve_workers

        # As the service runs several workers (TCP_NODELAY on the shared socket).
        _serve_workers(
            uvicorn.Config(
                "bench.floor:create_app", factory=True, port=args.port, workers=args.workers, log_level=level
            )
        )
    else:
        uvicorn.run(create_app(), port=args.port, log_level=level)


if __name__ == "__main__":
    main()
