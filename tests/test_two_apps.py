"""Two apps in one process share nothing: what each holds hangs off its own lifespan, not a module.

A worker runs one app; tests, a future multi-tenant process or an embedding
host run several. Caches, queues, watchers and what is known of a pool
belong to the app (or to its engine, which belongs to the app), so that two
apps never see each other's, and one stopping leaves the other whole.
"""

from __future__ import annotations

import sys
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from starlette.testclient import TestClient

import gql.domain.writes
from gql.compat.strawberry import graphql_schema
from gql.edge.app import create_app
from gql.store.db import pool_state

from .conftest import UNHURRIED_WRITE_TIMEOUT, Api, Backend

WRITE = (
    "mutation W($runId: ID!, $text: String!) "
    '{ writeRunLog(runId: $runId, kind: "note", detail: {text: $text}) }'
)
READ = "query R($runId: ID!) { runLog(runId: $runId) { nodes { detail { ... on NoteDetail { text } } } } }"


# What a module keeps of every app on purpose, and why: nothing (the lifespan's signal
# handler ends its own app's long polls and tails, gql/edge/server.py's at_exit_signal).
PROCESS_WIDE: set[str] = set()


def holdings(api: Api) -> dict[str, Any]:
    """What one app holds, each thing by name."""
    app: Any = api.client.app
    (view,) = [route.endpoint for route in app.routes if getattr(route, "path", None) == "/graphql"][:1]
    state = api.client.app_state  # what the lifespan made
    engine = state["engine"]
    return {
        "app": app,
        "view": view,
        "schema": view.schema,
        "graphql schema": graphql_schema(view.schema),
        "document cache": api.document_cache(),
        "page plans": view.schema.execution_context_class.plans,
        "engine": engine,
        "sync engine": engine.sync_engine,
        "pool": engine.sync_engine.pool,
        "pool state": pool_state(engine),
        "writer": state["writer"],
        "watcher": state["watcher"],
        "tails": state["tails"],
    }


def kept_by_modules(held: list[Any]) -> list[str]:
    """Each module-level container of gql (and class attribute of its classes) that holds one of `held`."""
    ids = {id(thing) for thing in held}

    def holds(value: Any) -> bool:
        if id(value) in ids:
            return True
        if isinstance(value, (dict, OrderedDict, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)):
            return any(id(k) in ids or id(v) in ids for k, v in list(value.items()))
        if isinstance(value, (set, frozenset, list, tuple, deque, weakref.WeakSet)):
            return any(id(item) in ids for item in list(value))
        return False

    found = []
    for name, module in list(sys.modules.items()):
        if not (name == "gql" or name.startswith("gql.")):
            continue
        for attribute, value in list(vars(module).items()):
            if holds(value):
                found.append(f"{name}.{attribute}")
            if isinstance(value, type) and value.__module__ == name:
                found += [f"{name}.{attribute}.{a}" for a, v in list(vars(value).items()) if holds(v)]
    return found


def test_two_apps_in_one_process_share_nothing(tables: Backend, make_api: Callable[..., Api]) -> None:
    with TestClient(create_app(tables.settings(write_timeout=UNHURRIED_WRITE_TIMEOUT))) as client:
        first = Api(client)
        second = make_api(write_timeout=UNHURRIED_WRITE_TIMEOUT)
        second_held = both_used_and_compared(first, second)
    # The first has stopped (its pool disposed, its watcher and queues
    # ended): the second writes and reads as before, on what it holds.
    assert holdings(second) == second_held
    assert second.post(WRITE, {"runId": "31", "text": "after"}) == {"data": {"writeRunLog": True}}
    texts = [n["detail"]["text"] for n in second.post(READ, {"runId": "31"})["data"]["runLog"]["nodes"]]
    assert texts == ["after", "by the second", "by the first"]


def both_used_and_compared(first: Api, second: Api) -> dict[str, Any]:
    # Each has written, read, planned and watched before it is looked at.
    for api, text in ((first, "by the first"), (second, "by the second")):
        assert api.post(WRITE, {"runId": "31", "text": text}) == {"data": {"writeRunLog": True}}
        assert api.post(READ, {"runId": "31"})["data"]["runLog"]["nodes"]
    held = [holdings(first), holdings(second)]
    shared = [name for name, thing in held[0].items() if any(thing is other for other in held[1].values())]
    assert shared == []
    assert kept_by_modules([*held[0].values(), *held[1].values()]) == sorted(PROCESS_WIDE)
    return held[1]


def test_the_scan_sees_a_module_that_keeps_an_apps_engine(api: Api) -> None:
    engine = holdings(api)["engine"]
    registry = weakref.WeakKeyDictionary({engine.sync_engine: 1})
    gql.domain.writes._scratch_registry = registry  # type: ignore[attr-defined]
    try:
        assert "gql.domain.writes._scratch_registry" in kept_by_modules([engine, engine.sync_engine])
    finally:
        del gql.domain.writes._scratch_registry  # type: ignore[attr-defined]
