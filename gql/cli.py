"""`python -m gql serve | init-db | export-schema`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from .settings import Settings, SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gql", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    serve = commands.add_parser("serve", help="serve the API at /graphql")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")

    commands.add_parser("init-db", help="create the tables where missing (safe to run twice)")
    commands.add_parser("export-schema", help="print the SDL that schema.graphql holds")

    args = parser.parse_args(argv)
    if args.command == "export-schema":
        from .schema import export_sdl

        sys.stdout.write(export_sdl())
        return 0

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "init-db":
        return asyncio.run(_init_db(settings))
    return _serve(settings, args.host, args.port, args.workers)


async def _init_db(settings: Settings) -> int:
    from .db import create_engine, init_db

    engine = create_engine(settings)
    try:
        created = await init_db(engine)
    finally:
        await engine.dispose()
    made = f"created {', '.join(created)}" if created else "nothing to create"
    print(f"tables ready on {settings.safe_database_url} ({made})")
    return 0


def _serve(settings: Settings, host: str, port: int, workers: int) -> int:
    import uvicorn

    if workers > 1:
        # Each worker builds its own app (and pool) from the environment.
        uvicorn.run(
            "gql.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=settings.log_level.lower(),
            proxy_headers=True,
        )
        return 0
    from .app import create_app

    # uvicorn handles SIGTERM and SIGINT: it stops accepting, lets requests in
    # flight finish, then runs the lifespan's shutdown (which disposes the pool).
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=10,
    )
    return 0
