"""What an app's start-up costs, and what a shipped document's first request pays for it.

    python -m bench.startup            # 30 apps, on a temporary SQLite file
    python -m bench.startup --apps 100

Not a test: it builds the app (`create_app`) and runs its lifespan in and out,
`--apps` times after 3 uncounted, and prints the CPU an app took (process
time). Then the CPU of parsing and validating each shipped document
(gql/operations/persisted-documents.json) against the schema, which the first
request of that document pays and the document cache keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from graphql import OperationDefinitionNode, parse, validate

from gql.api.schema import build_schema
from gql.api.trusted import SHIPPED
from gql.compat.strawberry import graphql_schema
from gql.edge.app import create_app
from gql.settings import Settings
from gql.store.db import metadata


async def _start_and_stop(settings: Settings, count: int) -> None:
    for _ in range(count):
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=30, help="apps started and stopped, counted")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # each app says reads and writes are open
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runlog.db"
        metadata.create_all(sa.create_engine(f"sqlite:///{path}"))
        settings = Settings(database_url=f"sqlite+aiosqlite:///{path}")
        asyncio.run(_start_and_stop(settings, 3))
        began = time.process_time()
        asyncio.run(_start_and_stop(settings, args.apps))
        print(f"start-up: {(time.process_time() - began) / args.apps * 1000:.1f} ms CPU an app")
    schema = graphql_schema(build_schema(extensions=[]))
    for text in json.loads(SHIPPED.read_text()).values():
        validate(schema, parse(text))  # uncounted, as the apps before
    for text in json.loads(SHIPPED.read_text()).values():
        began = time.process_time()
        for _ in range(20):
            validate(schema, parse(text))
        (name,) = [d.name.value for d in parse(text).definitions if isinstance(d, OperationDefinitionNode)]
        print(f"first request of {name}: {(time.process_time() - began) / 20 * 1000:.2f} ms CPU")


if __name__ == "__main__":
    main()
