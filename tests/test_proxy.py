"""deploy/nginx/runlog.conf in front of a real `python -m gql serve`: what the proxy takes on.

A client that trickles its head or reads nothing is dropped by nginx, a head too large or a
Host given twice is refused; websockets, long polls and exports pass through it as they
are. On SQLite: the database is not what is tested. Needs Debian's nginx (tests/nginx.py).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import local
from .nginx import Proxy, proxying
from .serving import Server, start, stop, wait_until_healthy
from .test_slow_clients import BOUND, QUERY, connect, until_closed
from .test_subscription_live import (
    PATIENCE,
    TAIL,
    frame,
    initialise,
    newest_cursor,
    next_line,
    open_tail,
    write,
)
from .test_websocket_live import metric, wait_for

RUN = 11


@contextlib.contextmanager
def behind_nginx(tmp_path: Path, **env: str) -> Iterator[tuple[Server, Proxy]]:
    server = start(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}", **env)
    try:
        wait_until_healthy(server)
        with proxying(tmp_path, server.base) as proxy:
            yield server, proxy
    finally:
        stop(server)
    assert "Traceback" not in server.output() and " ERROR " not in server.output(), server.output()


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Server, Proxy]]:
    with behind_nginx(tmp_path, RUNLOG_ALLOWED_HOSTS="api.example.com,127.0.0.1") as both:
        yield both


def ask(proxy: Proxy, head: bytes) -> tuple[bytes, bytes]:
    """The status line and body nginx answers `head` (a GET, no body) with, on a connection of its own."""
    with connect(proxy.port) as conn:
        conn.sendall(head + b"Connection: close\r\n\r\n")
        answer = until_closed(conn)
    status, _, rest = answer.partition(b"\r\n")
    return status, rest.partition(b"\r\n\r\n")[2]


GET = b"GET /graphql?query=%7B__typename%7D HTTP/1.1\r\n"


def test_a_head_trickled_in_is_cut_off_while_others_are_answered(proxied: tuple[Server, Proxy]) -> None:
    _, proxy = proxied
    sent = threading.Event()
    answers: list[bytes] = []

    def trickle() -> None:
        with connect(proxy.port) as conn:
            conn.sendall(b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            answers.append(until_closed(conn, trickle=b"X-Padding: " + b"a" * 500, sent=sent))

    slow = threading.Thread(target=trickle)
    slow.start()
    assert sent.wait(BOUND)
    answered = local.post(
        f"{proxy.base}/graphql", content=QUERY, headers={"content-type": "application/json"}
    )
    assert answered.json() == {"data": {"__typename": "Query"}}
    slow.join(BOUND + 5)
    # Closed by nginx (client_header_timeout), with at most its 408: the service never saw it.
    assert answers and (answers[0] == b"" or answers[0].startswith(b"HTTP/1.1 408 ")), answers
    assert "client timed out" in proxy.errors()


def test_a_head_too_large_is_refused_and_a_big_body_is_not(proxied: tuple[Server, Proxy]) -> None:
    _, proxy = proxied
    status, _ = ask(proxy, GET + b"Host: 127.0.0.1\r\nX-Padding: " + b"a" * 9 * 1024 + b"\r\n")
    assert status.startswith(b"HTTP/1.1 400 "), status
    # Many headers together past 32 KiB, each under 8 KiB.
    padding = b"".join(b"X-Padding-%d: " % n + b"a" * 4000 + b"\r\n" for n in range(10))
    status, _ = ask(proxy, GET + b"Host: 127.0.0.1\r\n" + padding)
    assert status.startswith(b"HTTP/1.1 400 "), status
    # A body is not head, however big.
    body = json.dumps({"query": "{ __typename }", "variables": {"pad": "b" * 60_000}})
    answered = local.post(f"{proxy.base}/graphql", content=body, headers={"content-type": "application/json"})
    assert answered.json() == {"data": {"__typename": "Query"}}


def test_host_is_read_as_http_1_1_has_it(proxied: tuple[Server, Proxy]) -> None:
    server, proxy = proxied
    status, body = ask(proxy, GET + b"Host: api.example.com\r\n")
    assert status == b"HTTP/1.1 200 OK" and json.loads(body) == {"data": {"__typename": "Query"}}, body
    # A second Host, or none in HTTP/1.1: refused by nginx, before the service.
    for headers in (b"Host: api.example.com\r\nHost: evil.example\r\n", b""):
        status, _ = ask(proxy, GET + headers)
        assert status.startswith(b"HTTP/1.1 400 "), (headers, status)
    # The target's authority is the host, whatever the Host header says: the service judges it.
    status, body = ask(proxy, b"GET http://evil.example/graphql HTTP/1.1\r\nHost: api.example.com\r\n")
    assert status.startswith(b"HTTP/1.1 400 "), status
    assert "RUNLOG_ALLOWED_HOSTS" in json.loads(body)["errors"][0]["message"], body
    absolute = (
        b"GET http://api.example.com:8000/graphql?query=%7B__typename%7D HTTP/1.1\r\nHost: evil.example\r\n"
    )
    status, body = ask(proxy, absolute)
    assert status == b"HTTP/1.1 200 OK" and json.loads(body) == {"data": {"__typename": "Query"}}, body
    assert "'evil.example' is not in RUNLOG_ALLOWED_HOSTS" in server.output()


def test_the_client_address_is_the_proxys_forwarded_one(proxied: tuple[Server, Proxy]) -> None:
    server, proxy = proxied
    local.get(f"{proxy.base}/livez", headers={"x-request-id": "through-nginx-1"})
    (line,) = [line for line in server.output().splitlines() if "through-nginx-1" in line]
    # uvicorn took X-Forwarded-For from nginx (RUNLOG_FORWARDED_ALLOW_IPS): an address with no port.
    assert '127.0.0.1:0 - "GET /livez HTTP/1.1" 200' in line, line


def test_a_subscription_a_long_poll_and_an_export_pass_through(proxied: tuple[Server, Proxy]) -> None:
    server, proxy = proxied
    write(proxy.base, RUN, "first")
    since = newest_cursor(proxy.base, RUN)
    with open_tail(proxy.base, RUN, since) as ws:
        write(proxy.base, RUN, "live")
        assert next_line(ws)["detail"]["text"] == "live"
    # A long poll waits at the service, through nginx, and is answered by the next line.
    cursor = newest_cursor(proxy.base, RUN)
    answer: dict[str, object] = {}
    poll = (
        "query P($b: String) { runLog(runId: 11, before: $b, wait: 30)"
        " { nodes { detail { ... on NoteDetail { text } } } } }"
    )

    def wait() -> None:
        answer.update(
            local.post(
                f"{proxy.base}/graphql", json={"query": poll, "variables": {"b": cursor}}, timeout=PATIENCE
            ).json()
        )

    waiting = threading.Thread(target=wait)
    waiting.start()
    wait_for("the poll waiting", lambda: metric(server, "runlog_long_polls_waiting") == 1)
    write(proxy.base, RUN, "polled")
    waiting.join(PATIENCE)
    assert answer == {"data": {"runLog": {"nodes": [{"detail": {"text": "polled"}}]}}}, answer
    with local.stream("GET", f"{proxy.base}/runs/{RUN}/log.ndjson", timeout=PATIENCE) as exported:
        lines = [json.loads(line) for line in exported.iter_lines() if line]
    assert [line["detail"]["text"] for line in lines] == ["first", "live", "polled"], lines


def subscriber_that_never_reads(proxy: Proxy, since: str) -> socket.socket:
    """A graphql-transport-ws tail from `since`, on a socket with a tiny receive buffer, read no further."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(PATIENCE)
    raw.connect(("127.0.0.1", proxy.port))
    initialise(raw)
    subscribe = {
        "type": "subscribe",
        "id": "t",
        "payload": {"query": TAIL, "variables": {"runId": RUN, "since": since}},
    }
    raw.sendall(frame(0x1, json.dumps(subscribe).encode()))
    return raw


def lines_past_the_buffers() -> int:
    """Lines of 60 KiB that hold twice what a socket can buffer on this machine (net.ipv4.tcp_wmem's most).

    On 4 MiB, 137 lines: 40 lines (2.4 MB) fit, and nginx never times the client out.
    """
    most = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    return 2 * most // (60 * 1024) + 1


def test_a_subscriber_that_reads_nothing_is_dropped_and_its_subscription_ends(tmp_path: Path) -> None:
    with behind_nginx(tmp_path) as (server, proxy):
        write(server.base, RUN, "first")
        since = newest_cursor(server.base, RUN)
        for n in range(lines_past_the_buffers()):
            write(server.base, RUN, f"{n:05d}" + "x" * 60 * 1024)
        with contextlib.ExitStack() as stack:
            for _ in range(3):
                stack.enter_context(subscriber_that_never_reads(proxy, since))
            wait_for("three subscriptions", lambda: metric(server, "runlog_subscriptions_open") == 3)
            # nginx's send_timeout drops each client, and with it its connection to the service.
            wait_for("no subscription left", lambda: metric(server, "runlog_subscriptions_open") == 0)
        assert proxy.errors().count("client timed out") >= 3, proxy.errors()
        with open_tail(proxy.base, RUN, since) as ws:
            assert next_line(ws)["detail"]["text"].startswith("00000")
