"""Running it in production: /metrics, structured logs, request ids and traces, CORS, liveness and readiness.

What an operator watches it by, checked as they would see it: a scrape of
`/metrics` (from a real `serve --workers 2` where the workers matter), the
lines a real server writes, the headers a browser gets.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient, WebSocketDenialResponse

from gql.edge.app import create_app
from gql.request_id import trace_id
from gql.settings import Settings, SettingsError

from . import local
from .conftest import Api, Backend, free_port, sqlite_alone, wait_until_healthy
from .serving import start, stop
from .serving import wait_until_healthy as wait_for_health

ROOT = Path(__file__).resolve().parent.parent
WRITE = (
    "mutation W($runId: ID!, $kind: String!, $detail: JSON) "
    "{ writeRunLog(runId: $runId, kind: $kind, detail: $detail) }"
)
READ = "query R($runId: ID!) { runLog(runId: $runId) { nodes { id } } }"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(client: httpx.Client | TestClient, path: str = "/metrics") -> Samples:
    response = client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4"), response.headers
    return parse(response.text)


def write(client: httpx.Client | TestClient, kind: str, detail: Any, **headers: str) -> Any:
    response = client.post(
        "/graphql",
        json={"query": WRITE, "variables": {"runId": "5", "kind": kind, "detail": detail}},
        headers=headers,
    )
    return response.json()["data"]["writeRunLog"]


@contextmanager
def serving(
    tmp_path: Path, url: str, *args: str, port: int | None = None, start_within: float = 90, **env: str
) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    """`python -m gql serve` on this checkout's code and `url`; its output in a file, returned too."""
    port = port or free_port()
    server = start(tmp_path, url, f"serve-{port}", *args, port=port, unhurried=False, **env)
    try:
        wait_for_health(server, within=start_within)
        yield server.base, server.process, server.log
    finally:
        stop(server)


# ── /metrics ─────────────────────────────────────────────────────────────────


def test_metrics_count_writes_by_outcome_and_reason_lines_read_and_requests_by_operation(api: Api) -> None:
    client = api.client
    before = scrape(client)
    assert write(client, "note", {"text": "one"}) is True
    assert write(client, "note", {"text": "two"}) is True
    assert write(client, "no.such.kind", None) is False
    assert write(client, "run.status", {"from": 3}) is False  # does not fit RunStatusDetail
    assert api.data(READ, {"runId": "5"})["runLog"]["nodes"] != []
    after = scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("runlog_writes_total", outcome="stored", reason="stored") == 2
    assert grew("runlog_writes_total", outcome="refused", reason="unknown_kind") == 1
    assert grew("runlog_writes_total", outcome="refused", reason="detail_does_not_fit") == 1
    assert grew("runlog_lines_read_total") == 2
    assert grew("runlog_requests_total", operation="writeRunLog", outcome="ok") == 4
    assert grew("runlog_requests_total", operation="runLog", outcome="ok") == 1
    assert grew("runlog_request_duration_seconds_count", operation="writeRunLog") == 4
    assert grew("runlog_requests_total", operation="metrics", outcome="ok") == 1  # the first scrape
    # Sampled as the scrape is answered: the query texts just used are cached.
    assert value(after, "runlog_cache_entries", cache="documents") >= 2
    for gauge in ("runlog_pool_connections_in_use", "runlog_subscriptions_open"):
        assert any(name == gauge for name, _ in after), gauge


def test_metrics_count_refused_requests_and_graphql_errors_by_operation(api: Api) -> None:
    client = api.client
    before = scrape(client)
    assert (
        client.post("/graphql", content=b"{", headers={"Content-Type": "application/json"}).status_code == 400
    )
    assert "errors" in api.post("{ runLog(runId: 0) { nodes { id } } }")  # not a run id
    assert "errors" in api.post("{ noSuchField }")
    after = scrape(client)
    for labels in (
        {"operation": "none", "outcome": "refused"},
        {"operation": "runLog", "outcome": "error"},
        {"operation": "invalid", "outcome": "error"},
    ):
        assert (
            value(after, "runlog_requests_total", **labels) - value(before, "runlog_requests_total", **labels)
            == 1
        )


def test_open_subscriptions_and_waiting_long_polls_are_gauged(api: Api) -> None:
    client = api.client
    assert write(client, "note", {"text": "before"}) is True
    page = "query P($before: String) { runLog(runId: 5, before: $before, wait: 30) { nodes { id } } }"
    first = "{ runLog(runId: 5) { pageInfo { startCursor } } }"
    cursor = api.data(first)["runLog"]["pageInfo"]["startCursor"]
    tail = "subscription { runLogTail(runId: 5) { id } }"
    with client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        ws.send_json({"type": "subscribe", "id": "1", "payload": {"query": tail}})
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(api.data, page, {"before": cursor})  # waits for a newer line
            deadline = time.monotonic() + 30
            while value(scrape(client), "runlog_long_polls_waiting") < 1:
                assert not waiting.done(), waiting.result()
                assert time.monotonic() < deadline, "the long poll never waited"
                time.sleep(0.05)
            samples = scrape(client)
            assert value(samples, "runlog_subscriptions_open") == 1
            assert value(samples, "runlog_long_polls_waiting") == 1
            assert write(client, "note", {"text": "after"}) is True  # answers the long poll
            assert len(waiting.result(timeout=30)["runLog"]["nodes"]) == 1
        assert ws.receive_json()["type"] == "next"
        ws.send_json({"type": "complete", "id": "1"})
    samples = scrape(client)
    assert value(samples, "runlog_long_polls_waiting") == 0


def test_the_sweepers_ticks_and_the_lines_it_prunes_are_counted(
    tables: Backend, make_api: Callable[..., Api]
) -> None:
    tables.add_run(1, "completed", "2020-01-01 00:00:00", "2020-01-01 00:00:00")
    tables.execute(
        "INSERT INTO event_run_log (run_id, kind, at) VALUES (1, 'note', :at), (1, 'note', :at)",
        at="2020-01-01 00:00:00",
    )
    api = make_api(retention=86400.0, sweep_interval=7 * 86400.0)
    before = scrape(api.client)
    sweeper = api.client.app_state["sweeper"]
    api.client.portal.call(sweeper.tick)  # type: ignore[union-attr]
    after = scrape(api.client)
    assert (
        value(after, "runlog_sweeper_ticks_total", outcome="swept")
        - value(before, "runlog_sweeper_ticks_total", outcome="swept")
        == 1
    )
    assert (
        value(after, "runlog_lines_pruned_total", source="sweeper")
        - value(before, "runlog_lines_pruned_total", source="sweeper")
        == 2
    )


def test_metrics_can_be_turned_off(make_api: Callable[..., Api]) -> None:
    api = make_api(metrics="off")
    assert api.client.get("/metrics").status_code == 404
    assert Settings.from_env({"RUNLOG_METRICS": "off"}).metrics == "off"
    with pytest.raises(SettingsError, match="RUNLOG_METRICS"):
        Settings.from_env({"RUNLOG_METRICS": "/metrics"})


@sqlite_alone
def test_metrics_on_a_port_of_their_own_are_not_on_the_apis(tables: Backend, tmp_path: Path) -> None:
    metrics_port = free_port()
    with serving(tmp_path, tables.url, RUNLOG_METRICS=str(metrics_port)) as (base, _, _):
        assert local.get(f"{base}/metrics").status_code == 404
        assert local.post(f"{base}/graphql", json={"query": "{ __typename }"}).status_code == 200
        with local.Client(base_url=f"http://127.0.0.1:{metrics_port}") as metrics:
            samples = scrape(metrics)
        assert value(samples, "runlog_requests_total", operation="__typename", outcome="ok") == 1


@pytest.mark.mariadb
def _stored_by_worker(folder: Path) -> dict[int, float]:
    """Each worker's own count of stored writes, read from its file in the multiprocess folder."""
    from prometheus_client.mmap_dict import MmapedDict

    found = {}
    for path in folder.glob("counter_*.db"):
        for key, count, *_ in MmapedDict.read_all_values_from_file(str(path)):
            _name, sample, labels, *_ = json.loads(key)
            if sample == "runlog_writes_total" and labels.get("outcome") == "stored":
                found[int(path.stem.split("_")[-1])] = count
    return found


def test_metrics_under_two_workers_add_up_the_counts_of_both(mariadb: Backend, tmp_path: Path) -> None:
    mariadb.create_tables()
    folder = tmp_path / "multiproc"
    folder.mkdir()
    (folder / "counter_1.db").write_bytes(b"left by an earlier run")  # emptied at start
    env = {"PROMETHEUS_MULTIPROC_DIR": str(folder), "RUNLOG_LOG_FORMAT": "json"}
    # Worker processes import the whole service afresh: slow on a busy machine.
    with serving(tmp_path, mariadb.url, "--workers", "2", start_within=120, **env) as (base, server, logged):

        def one_write(i: int) -> bool:
            with local.Client(base_url=base) as client:  # a connection each: the kernel spreads them
                answer: bool = write(client, "note", {"text": f"line {i}"})
                return answer

        sent = 0
        while len(_stored_by_worker(folder)) < 2:  # until both workers have stored some
            with ThreadPoolExecutor(8) as pool:
                assert all(pool.map(one_write, range(24)))
            sent += 24
            assert sent < 24 * 20, "every connection went to one worker"
        assert not (folder / "counter_1.db").exists()
        for _ in range(6):  # whichever worker answers the scrape, it shows both workers' counts
            with local.Client(base_url=base) as client:
                samples = scrape(client)
            assert value(samples, "runlog_writes_total", outcome="stored", reason="stored") == sent
            assert value(samples, "runlog_requests_total", operation="writeRunLog", outcome="ok") == sent

        # A worker that dies: uvicorn starts another, and the dead one's
        # gauges go (its counts stay).
        dead = min(_stored_by_worker(folder))
        gauges = folder / f"gauge_livesum_{dead}.db"
        assert gauges.exists()
        os.kill(dead, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while gauges.exists():
            assert time.monotonic() < deadline, "the dead worker's gauges are still counted"
            time.sleep(0.2)
        wait_until_healthy(base, server)
        with local.Client(base_url=base) as client:
            assert value(scrape(client), "runlog_writes_total", outcome="stored", reason="stored") == sent
    # Every worker logs as configured: JSON, on every line.
    records = [json.loads(line) for line in logged.read_text().splitlines() if line.strip()]
    assert sum(1 for r in records if r["logger"] == "uvicorn.access") >= sent


# ── logs ─────────────────────────────────────────────────────────────────────


@sqlite_alone
def test_json_logs_are_one_object_per_line_and_follow_a_callers_request_id(
    tables: Backend, tmp_path: Path
) -> None:
    with serving(tmp_path, tables.url, RUNLOG_LOG_FORMAT="json") as (base, server, logged):
        with local.Client(base_url=base) as client:
            headers = {"X-Request-Id": "frontend-req-17", "traceparent": TRACEPARENT}
            refused = {"text": "x", "unexpected": "a\nforged line"}
            assert write(client, "note", refused, **headers) is False
            assert (
                client.post("/graphql", json={"query": READ, "variables": {"runId": "9"}}).status_code == 200
            )
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    lines = [line for line in logged.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "message", "logger"} <= set(r) for r in records), records
    ours = [r for r in records if r.get("request_id") == "frontend-req-17"]
    (access,) = [r for r in ours if r["logger"] == "uvicorn.access"]
    assert access["method"] == "POST" and access["path"] == "/graphql" and access["status"] == 200
    assert access["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert access["operation"] == "writeRunLog" and access["duration_ms"] >= 0
    (refusal,) = [r for r in ours if r["logger"] == "gql.runlog"]
    assert refusal["level"] == "warning" and refusal["message"] == "run log line not stored"
    assert refusal["line"] == {"runId": "5", "kind": "note", "stepId": None, "phase": None, "detail": refused}
    assert refusal["run_id"] == "5" and "does not fit" in refusal["reason"]
    (read,) = [r for r in records if r.get("operation") == "runLog"]
    assert read["run_id"] == 9 and read["status"] == 200
    assert any(r["logger"].startswith("uvicorn.error") for r in records)  # uvicorn's own, as JSON too


@sqlite_alone
def test_text_logs_name_the_request_on_its_access_line(tables: Backend, tmp_path: Path) -> None:
    with serving(tmp_path, tables.url) as (base, server, logged):
        local.post(
            f"{base}/graphql", json={"query": "{ __typename }"}, headers={"X-Request-Id": "text-req-3"}
        )
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    (line,) = [line for line in logged.read_text().splitlines() if "text-req-3" in line]
    assert '"POST /graphql HTTP/1.1" 200 (request text-req-3)' in line


def test_a_bad_log_format_is_refused() -> None:
    with pytest.raises(SettingsError, match="RUNLOG_LOG_FORMAT"):
        Settings.from_env({"RUNLOG_LOG_FORMAT": "yaml"})


# ── request ids and traces ───────────────────────────────────────────────────


def test_only_a_valid_traceparent_gives_a_trace_id() -> None:
    assert trace_id(TRACEPARENT) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later") is not None
    for refused in (
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # no trace
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # no parent
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  # version 00 has four fields
        "not a traceparent",
    ):
        assert trace_id(refused) is None, refused


# ── CORS ─────────────────────────────────────────────────────────────────────

ADMIN_FRONTEND = "https://admin.example.com"
PREFLIGHT = {
    "Origin": ADMIN_FRONTEND,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


def test_the_admin_frontends_origin_may_call_the_api(make_api: Callable[..., Api]) -> None:
    api = make_api(cors_origins=(ADMIN_FRONTEND,))
    preflight = api.client.options("/graphql", headers=PREFLIGHT)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ADMIN_FRONTEND
    allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-max-age"] == "600"
    assert "access-control-allow-credentials" not in preflight.headers
    assert preflight.headers["x-request-id"]  # the preflight's answer carries an id too

    called = api.client.post("/graphql", json={"query": "{ __typename }"}, headers={"Origin": ADMIN_FRONTEND})
    assert called.json() == {"data": {"__typename": "Query"}}
    assert called.headers["access-control-allow-origin"] == ADMIN_FRONTEND
    assert "x-request-id" in called.headers["access-control-expose-headers"].lower()


def test_another_origin_gets_no_cors_answer(make_api: Callable[..., Api]) -> None:
    api = make_api(cors_origins=(ADMIN_FRONTEND,))
    preflight = api.client.options("/graphql", headers={**PREFLIGHT, "Origin": "https://elsewhere.example"})
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    assert preflight.headers["x-request-id"]
    unset = make_api().client.options("/graphql", headers=PREFLIGHT)  # RUNLOG_CORS_ORIGINS unset: none
    assert "access-control-allow-origin" not in unset.headers


def _open_websocket(client: TestClient, origin: str | None) -> int | None:
    """Open the subscription's websocket as a page of `origin` would: the 403 refusing it, or None."""
    headers = {} if origin is None else {"Origin": origin}
    try:
        with client.websocket_connect(
            "/graphql", subprotocols=["graphql-transport-ws"], headers=headers
        ) as ws:
            ws.send_json({"type": "connection_init", "payload": {}})
            assert ws.receive_json() == {"type": "connection_ack"}
            return None
    except WebSocketDenialResponse as refused:  # answered before the socket was accepted
        (error,) = refused.json()["errors"]
        assert error["extensions"]["requestId"] == refused.headers["x-request-id"]
        assert "RUNLOG_CORS_ORIGINS" in error["message"]
        return refused.status_code


def test_a_websocket_from_a_page_of_another_origin_is_refused_before_it_is_accepted(
    make_api: Callable[..., Api],
) -> None:
    # Browsers apply no CORS to a websocket: the service checks the Origin itself.
    client = make_api(cors_origins=(ADMIN_FRONTEND,)).client
    assert _open_websocket(client, "https://elsewhere.example") == 403
    assert _open_websocket(client, ADMIN_FRONTEND) is None
    assert _open_websocket(client, "http://testserver") is None  # the service's own page (GraphiQL)
    assert _open_websocket(client, None) is None  # not a browser: no page to act for
    unset = make_api().client  # RUNLOG_CORS_ORIGINS unset: no other origin at all
    assert _open_websocket(unset, ADMIN_FRONTEND) == 403
    assert _open_websocket(unset, "http://testserver") is None


@sqlite_alone
def test_a_real_server_refuses_another_origins_websocket_with_a_403_that_carries_an_id(
    tables: Backend, tmp_path: Path
) -> None:
    with serving(tmp_path, tables.url, RUNLOG_CORS_ORIGINS=ADMIN_FRONTEND) as (base, _, _):
        port = int(base.rsplit(":", 1)[1])
        for origin, answer in (("https://elsewhere.example", b"403"), (ADMIN_FRONTEND, b"101")):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(
                    b"GET /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n"
                    b"X-Request-Id: ws-req-1\r\nOrigin: " + origin.encode() + b"\r\n\r\n"
                )
                head = b""
                while b"\r\n\r\n" not in head:
                    head += raw.recv(1)
            assert head.startswith(b"HTTP/1.1 " + answer + b" "), head
            assert b"\r\nx-request-id: ws-req-1\r\n" in head.lower(), head


def test_a_wildcard_origin_is_refused_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"RUNLOG_CORS_ORIGINS.*wildcard"):
        Settings.from_env({"RUNLOG_CORS_ORIGINS": "https://admin.example.com, *"})
    assert Settings.from_env(
        {"RUNLOG_CORS_ORIGINS": "https://a.example, http://b.example:8080"}
    ).cors_origins == (
        "https://a.example",
        "http://b.example:8080",
    )
    done = subprocess.run(
        [sys.executable, "-m", "gql", "serve", "--port", str(free_port())],
        env={
            **os.environ,
            "RUNLOG_CORS_ORIGINS": "*",
            "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/x.db",
        },
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and "RUNLOG_CORS_ORIGINS" in done.stderr and "wildcard" in done.stderr


# ── liveness and readiness ───────────────────────────────────────────────────


def test_liveness_answers_while_readiness_and_healthz_say_the_database_is_down() -> None:
    settings = Settings(
        database_url=f"mysql+aiomysql://root@127.0.0.1:{free_port()}/events", connect_timeout=0.5
    )
    with TestClient(create_app(settings)) as client:
        live = client.get("/livez")
        assert (live.status_code, live.json()) == (200, {"status": "alive"})
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {
            "status": "unavailable",
            "reason": "the database refused or dropped the connection",
        }
        assert client.get("/healthz").status_code == 503  # as before


def test_readiness_says_ready_when_the_database_answers(api: Api) -> None:
    ready = api.client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


@pytest.mark.mariadb
def test_readiness_says_so_when_the_writes_pool_has_no_connection_to_spare(mariadb: Backend) -> None:
    mariadb.create_tables()
    with TestClient(create_app(mariadb.settings(pool_size=1, write_pool_size=1))) as client:
        portal = client.portal  # type: ignore[union-attr]
        # Readers holding every connection of theirs leave the process ready: writes have their own.
        readers = client.app_state["engine"]
        held = [portal.call(readers.connect().start) for _ in range(2)]  # the pool's one and its one overflow
        assert client.get("/readyz").status_code == 200
        engine = client.app_state["write_engine"]
        held += [portal.call(engine.connect().start) for _ in range(2)]
        try:
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["reason"].startswith(
                "the writes' connection pool is full: 2 of 2 connections in use (RUNLOG_WRITE_POOL_SIZE"
            )
            assert client.get("/livez").status_code == 200
        finally:
            for conn in held:
                portal.call(conn.close)
        assert client.get("/readyz").status_code == 200


# ── the server production runs ───────────────────────────────────────────────


def _dockerfile() -> list[str]:
    return [line.strip() for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()]


@sqlite_alone
def test_the_images_healthcheck_asks_liveness_and_passes_on_a_running_server(
    tables: Backend, tmp_path: Path
) -> None:
    lines = _dockerfile()
    (check,) = [line for line in lines if line.startswith("CMD [") and "urlopen" in line]
    command = json.loads(check[len("CMD ") :])
    assert "/livez" in command[-1]
    port = free_port()
    with serving(tmp_path, tables.url, port=port):
        done = subprocess.run(
            [sys.executable, *command[1:-1], command[-1].replace(":8000/", f":{port}/")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.mariadb
def test_compose_runs_init_db_then_serve_on_mariadb_as_its_commands_say(tmp_path: Path) -> None:
    """compose.yaml's init-db and serve, run as it runs them, on a fresh MariaDB database."""
    import re

    from .conftest import MARIADB_URL, _mariadb_connect

    compose = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    (url,) = re.findall(r"RUNLOG_DATABASE_URL: (mysql\+aiomysql://\S+)", compose)
    (init_db,) = re.findall(r"^\s+command: (\[.*\])$", compose, re.MULTILINE)
    assert "service_completed_successfully" in compose.split("\n  runlog:", 1)[1]
    assert json.loads(init_db)[:3] == ["python", "-m", "gql"]
    name = f"runlog_test_compose_{os.getpid()}"
    admin = _mariadb_connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    # The compose file's URL, pointed at the test server: same driver, same shape.
    assert sa.engine.make_url(url).drivername == MARIADB_URL.drivername
    here = MARIADB_URL.set(database=name).render_as_string(hide_password=False)
    try:
        done = subprocess.run(
            [sys.executable, *json.loads(init_db)[1:]],
            env={**os.environ, "RUNLOG_DATABASE_URL": here},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        server = start(tmp_path, here)
        try:
            wait_for_health(server)
            answer = local.post(
                f"{server.base}/graphql", json={"query": "{ runLog(runId: 1) { nodes { id } } }"}
            )
        finally:
            stop(server)
        assert answer.json() == {"data": {"runLog": {"nodes": []}}}
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE `{name}`")
        admin.close()


def test_the_image_installs_what_the_lock_file_pins_with_hashes_checked() -> None:
    text = "\n".join(_dockerfile())
    assert "COPY requirements.lock" in text
    assert "pip install --require-hashes -r requirements.lock" in text
    assert "pip install --no-deps ." in text  # the service itself, resolving nothing again


@sqlite_alone
@pytest.mark.parametrize(("trusted", "client"), [("127.0.0.1", "203.0.113.7"), ("10.9.9.9", "127.0.0.1")])
def test_a_forwarded_client_address_is_believed_only_from_a_trusted_proxy(
    tables: Backend, tmp_path: Path, trusted: str, client: str
) -> None:
    with serving(tmp_path, tables.url, RUNLOG_FORWARDED_ALLOW_IPS=trusted) as (base, server, logged):
        local.get(f"{base}/livez", headers={"X-Forwarded-For": "203.0.113.7", "X-Request-Id": "fwd-1"})
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    (line,) = [line for line in logged.read_text().splitlines() if "fwd-1" in line]
    assert f"{client}:" in line and '"GET /livez HTTP/1.1" 200' in line, line


def test_serve_starts_uvicorn_behind_a_proxy_with_the_settings_bounds() -> None:
    import uvicorn

    from gql.edge import server

    settings = Settings(forwarded_allow_ips="10.0.0.0/8", keepalive_timeout=7.0)
    # What `serve` passes to uvicorn, with one worker or several.
    made = uvicorn.Config("gql.edge.app:create_app", factory=True, **server.uvicorn_options(settings))
    assert made.proxy_headers is True
    assert made.forwarded_allow_ips == "10.0.0.0/8"
    assert made.timeout_keep_alive == 7
    assert made.timeout_graceful_shutdown == server.GRACEFUL_SHUTDOWN
    assert made.limit_concurrency is None  # the app's InFlightCap, which lets /livez and co. past


# ── OpenTelemetry (the otel extra) ───────────────────────────────────────────


def test_otel_spans_for_requests_and_sql_continue_the_callers_trace(
    tables: Backend,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(tables.settings(), tracer_provider=provider)
    with TestClient(app) as client:
        assert write(client, "note", {"text": "traced"}) is True
        for _ in range(2):
            response = client.post(
                "/graphql",
                json={"query": READ, "variables": {"runId": "5"}},
                headers={"traceparent": TRACEPARENT},
            )
            assert len(response.json()["data"]["runLog"]["nodes"]) == 1
        for route in ("/livez", "/readyz", "/healthz", "/metrics"):
            assert client.get(route).status_code == 200
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    assert len(servers) == 3 and all(s.name == "POST /graphql" for s in servers)
    continued = [s for s in servers if format(s.context.trace_id, "032x") == TRACEPARENT.split("-")[1]]
    assert len(continued) == 2
    statements = [
        s for s in spans if s.kind is SpanKind.CLIENT and s.attributes and "db.system" in s.attributes
    ]
    assert statements, [s.name for s in spans]


def test_otel_asked_for_without_the_extra_stops_start_up(tmp_path: Path) -> None:
    hide = "import sys; sys.modules['opentelemetry.instrumentation.asgi'] = None; "  # as if not installed
    done = subprocess.run(
        [sys.executable, "-c", hide + "from gql.cli import main; sys.exit(main(['serve', '--port', '1']))"],
        env={
            **os.environ,
            "RUNLOG_OTEL": "true",
            "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/x.db",
        },
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "RUNLOG_OTEL is set but OpenTelemetry is not installed" in done.stderr
    assert "pip install .[otel]" in done.stderr


def test_the_otel_extra_is_locked_for_the_tests_and_left_out_of_the_image() -> None:
    def pins(lock: str) -> set[str]:
        text = (ROOT / lock).read_text(encoding="utf-8")
        return {
            line.split("==")[0].lower() for line in text.splitlines() if "==" in line and line[0].isalnum()
        }

    extra = {
        "opentelemetry-sdk",
        "opentelemetry-instrumentation-asgi",
    }
    assert extra <= pins("requirements-test.lock")
    assert not extra & pins("requirements.lock")
    assert "prometheus-client" in pins("requirements.lock")


def test_otel_sql_spans_show_the_reads_and_writes(tables: Backend) -> None:
    # Every statement goes through SQLAlchemy, whose execution events span it (gql/tracing.py).
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with TestClient(create_app(tables.settings(), tracer_provider=provider)) as client:
        exporter.clear()
        headers = {"traceparent": TRACEPARENT}
        assert write(client, "note", {"text": "traced"}, **headers) is True
        response = client.post("/graphql", json={"query": READ, "variables": {"runId": "5"}}, headers=headers)
        assert len(response.json()["data"]["runLog"]["nodes"]) == 1
    statements = {
        str((s.attributes or {}).get("db.statement")): s
        for s in exporter.get_finished_spans()
        if s.kind is SpanKind.CLIENT
    }
    (insert,) = [s for sql, s in statements.items() if "INSERT INTO event_run_log " in sql]
    (read,) = [s for sql, s in statements.items() if "FROM event_run_log \nWHERE" in sql]
    mariadb = tables.name == "mariadb"
    for span, operation in ((insert, "INSERT"), (read, "SELECT")):
        assert span.attributes is not None
        assert span.attributes["db.system"] == ("mysql" if mariadb else "sqlite")
        assert span.name.split()[0] == operation  # SQLite's adds the file
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "gql.tracing", span.name
        assert format(span.context.trace_id, "032x") == TRACEPARENT.split("-")[1]  # the caller's trace


def test_otel_a_statement_sqlalchemy_executes_is_a_span_and_a_failed_one_says_so() -> None:
    import asyncio

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, StatusCode
    from sqlalchemy.ext.asyncio import create_async_engine

    from gql.tracing import instrument_engine

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        engine = create_async_engine("sqlite+aiosqlite://")
        instrument_engine(engine, provider)
        try:
            async with engine.connect() as conn:
                assert (await conn.execute(sa.text("SELECT 1"))).scalar() == 1
                with pytest.raises(sa.exc.OperationalError):
                    await conn.execute(sa.text("SELECT * FROM no_such_table"))
                assert (await conn.execute(sa.text("SELECT 2"))).scalar() == 2
        finally:
            await engine.dispose()

    asyncio.run(main())
    spans = [
        (s.name, s.kind, s.status.status_code, (s.attributes or {}).get("db.statement"))
        for s in exporter.get_finished_spans()
    ]
    assert spans == [
        ("SELECT", SpanKind.CLIENT, StatusCode.UNSET, "SELECT 1"),
        ("SELECT", SpanKind.CLIENT, StatusCode.ERROR, "SELECT * FROM no_such_table"),
        ("SELECT", SpanKind.CLIENT, StatusCode.UNSET, "SELECT 2"),
    ]


@pytest.mark.mariadb
def test_otel_spans_the_read_replicas_statements_too(mariadb: Backend) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mariadb.create_tables()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The same server under another name, as the replica: its spans say which.
    replica = sa.make_url(mariadb.url).set(host="localhost").render_as_string(hide_password=False)
    with TestClient(create_app(mariadb.settings(read_database_url=replica), tracer_provider=provider)):
        pass  # start-up looks at the replica once
    looked = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes and s.attributes.get("db.statement") == "SHOW ALL SLAVES STATUS"
    ]
    assert looked and all(s.attributes and s.attributes["net.peer.name"] == "localhost" for s in looked)
