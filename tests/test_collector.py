"""The app and Python's cyclic garbage collector (app._start_up_frozen)."""

from __future__ import annotations

import gc
import weakref

from starlette.testclient import TestClient

from gql.edge.app import create_app

from .conftest import Backend, collect_abandoned


def test_an_app_that_stopped_is_collected_and_the_collector_is_as_it_was(tables: Backend) -> None:
    # Serving, what start-up made is kept out of the collector's walks; a
    # process that starts apps one after another (the tests do) must still
    # get each one's memory back once it stops.
    before = gc.get_threshold()
    for _ in range(2):
        app = create_app(tables.settings())
        gone = weakref.ref(app)
        with TestClient(app) as client:
            assert client.get("/healthz").status_code == 200
        del app, client
        # Quiet about another module's abandoned connections, which this collection may find.
        collect_abandoned()
        assert gone() is None
        assert gc.get_threshold() == before
