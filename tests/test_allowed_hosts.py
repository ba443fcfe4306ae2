"""RUNLOG_ALLOWED_HOSTS: the names the service answers to, against DNS rebinding.

A page on a name its author points at the service's address is, to the
browser, of that name's origin, and its Host header names it: the websocket's
same-origin check (Origin against Host) lets it in. Unset, any Host is
answered, as before; set, only its names are, but for the health checks.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from starlette.testclient import WebSocketDenialResponse

from gql.settings import Settings, SettingsError

from .conftest import Api

QUERY = {"query": "{ __typename }"}


def test_a_host_not_named_is_refused_over_http_and_websocket(make_api: Callable[..., Api]) -> None:
    api = make_api(allowed_hosts=("api.example.com", "*.runlog.example"))
    for host in ("api.example.com", "API.example.com:8443", "eu.runlog.example"):
        answered = api.client.post("/graphql", json=QUERY, headers={"host": host})
        assert answered.json() == {"data": {"__typename": "Query"}}, host
    refused = api.client.post("/graphql", json=QUERY, headers={"host": "rebind.example:8000"})
    assert refused.status_code == 400
    error = refused.json()["errors"][0]
    assert "RUNLOG_ALLOWED_HOSTS" in error["message"] and "rebind.example" in error["message"]
    assert refused.headers["x-request-id"] == error["extensions"]["requestId"]
    # The rebinding page's socket: its Origin matches the Host it names.
    rebound = {"host": "rebind.example:8000", "origin": "http://rebind.example:8000"}
    protocols = ["graphql-transport-ws"]
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        api.client.websocket_connect("/graphql", headers=rebound),
    ):
        pass
    assert denied.value.status_code == 400 and "RUNLOG_ALLOWED_HOSTS" in denied.value.text
    own = {"host": "api.example.com", "origin": "https://api.example.com"}
    with api.client.websocket_connect("/graphql", subprotocols=protocols, headers=own) as ws:
        ws.send_json({"type": "connection_init"})
        assert ws.receive_json() == {"type": "connection_ack"}
    # Probes call by address.
    for path in ("/livez", "/readyz", "/metrics"):
        assert api.client.get(path, headers={"host": "10.1.2.3:8000"}).status_code == 200, path


def test_the_allowed_hosts_are_read_and_checked_at_start_up() -> None:
    read = Settings.from_env({"RUNLOG_ALLOWED_HOSTS": "api.example.com, *.Example.org,10.0.0.5,::1"})
    assert read.allowed_hosts == ("api.example.com", "*.example.org", "10.0.0.5", "::1")
    assert Settings.from_env({}).allowed_hosts == ()
    for bad in ("https://api.example.com", "api.example.com:8000", "*", "api.*.com"):
        with pytest.raises(SettingsError, match="RUNLOG_ALLOWED_HOSTS"):
            Settings.from_env({"RUNLOG_ALLOWED_HOSTS": bad})
