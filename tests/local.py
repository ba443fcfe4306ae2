"""HTTP clients for the servers the tests and benches start on 127.0.0.1: `local.get`, `local.Client`.

Each is httpx's own, with one SSL context shared by all. httpx makes a client for
every `httpx.get` and `httpx.post`, and loads the CA bundle into a new context for
each client it makes: tens of milliseconds of CPU, spent again on every poll of a
starting server and on every write of a concurrent test. Nothing here speaks TLS,
so one context, made once, serves them all. Ruff refuses httpx's one-call
functions elsewhere (pyproject.toml, TID251).
"""

from __future__ import annotations

import ssl
from functools import partial

import httpx

TLS = ssl.create_default_context()

get = partial(httpx.get, verify=TLS)  # noqa: TID251
post = partial(httpx.post, verify=TLS)  # noqa: TID251
stream = partial(httpx.stream, verify=TLS)  # noqa: TID251
Client = partial(httpx.Client, verify=TLS)
AsyncClient = partial(httpx.AsyncClient, verify=TLS)
