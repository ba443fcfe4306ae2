"""A request's head is bounded at 16 KiB whichever HTTP parser uvicorn runs.

h11 refuses a longer head itself; httptools, which uvicorn uses when it is
installed (pyproject.toml installs it), accepts any size. `gql.edge.server` counts
the head's bytes for both. Against a real `python -m gql serve`.
"""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

from gql.edge.server import MAX_HEAD_BYTES

from .serving import start, stop, wait_until_healthy
from .test_slow_clients import QUERY, connect, server, until_closed  # noqa: F401  (server: a fixture)


def _head(padding: int, body: bytes = QUERY) -> bytes:
    """A complete POST whose head carries `padding` bytes of one header."""
    head = (
        b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + b"X-Padding: "
        + b"a" * padding
        + b"\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    )
    return head + body


def _ask(port: int, padding: int, body: bytes = QUERY) -> bytes:
    """The server's answer to `_head(padding, body)`."""
    with connect(port) as conn:
        conn.sendall(_head(padding, body))  # one write: the body arrives with the head
        return until_closed(conn)


def test_a_complete_request_with_a_head_over_16_kib_is_refused(server: int) -> None:  # noqa: F811
    answer = _ask(server, MAX_HEAD_BYTES + 1024)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]


def test_a_head_under_the_bound_with_a_big_body_is_answered(server: int) -> None:  # noqa: F811
    # The body is not counted as head, however much of it comes in the same write.
    body = b'{"query": "{ __typename }", "variables": {"pad": "' + b"b" * 60_000 + b'"}}'
    answer = _ask(server, MAX_HEAD_BYTES - 1024, body)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert b'"__typename":"Query"' in answer


def test_a_head_sent_in_pieces_is_counted_across_them(server: int) -> None:  # noqa: F811
    head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Padding: " + b"a" * (MAX_HEAD_BYTES + 10)
    with connect(server) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start in range(0, len(head), 4096):
            conn.sendall(head[start : start + 4096])
            time.sleep(0.05)  # each piece its own read on the server
        answer = until_closed(conn)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]


def test_bytes_that_are_not_a_request_get_a_json_400_with_a_request_id_that_is_logged(
    server: int,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Answered by the server before the app, which never sees them: a head over
    # the bound, and bytes uvicorn's parser cannot read as HTTP at all.
    for sent in (b"NOT HTTP AT ALL\r\n\r\n", _head(MAX_HEAD_BYTES + 1024)):
        with connect(server) as conn:
            conn.sendall(sent)
            answer = until_closed(conn)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
        (request_id,) = re.findall(rb"\r\nx-request-id: ([0-9a-f]{16})\r\n", head.lower() + b"\r\n")
        (error,) = json.loads(body)["errors"]
        assert error["extensions"] == {"code": "BAD_REQUEST", "requestId": request_id.decode()}
        logged = (tmp_path / "serve.log").read_text()
        assert f"request {request_id.decode()} answered 400" in logged


def _answer(port: int, head: bytes) -> tuple[bytes, dict[str, object]]:
    """The status line and the JSON body the server answers `head` (a GET, no body) with."""
    with connect(port) as conn:
        conn.sendall(head + b"Connection: close\r\n\r\n")
        answer = until_closed(conn)
    status, _, rest = answer.partition(b"\r\n")
    return status, json.loads(rest.partition(b"\r\n\r\n")[2])


def test_host_is_read_as_http_1_1_has_it(tmp_path: Path) -> None:
    # RFC 9112 §3.2: one Host, and a target in absolute form names the host
    # instead of it. httptools took a second Host (the first winning) and
    # dropped the target's authority, so the Host header alone was judged.
    env = {"RUNLOG_ALLOWED_HOSTS": "api.example.com"}
    served = start(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}", **env)
    try:
        wait_until_healthy(served)
        port = int(served.base.rsplit(":", 1)[1])
        query = b"/graphql?query=%7B__typename%7D"
        status, body = _answer(port, b"GET " + query + b" HTTP/1.1\r\nHost: api.example.com\r\n")
        assert status == b"HTTP/1.1 200 OK" and body == {"data": {"__typename": "Query"}}, (status, body)
        refused = {
            b"Host: api.example.com\r\nHost: evil.example\r\n": "more than one Host header",
            b"Host: evil.example\r\nHost: api.example.com\r\n": "more than one Host header",
            b"": "must have a Host header",
        }
        for headers, words in refused.items():
            status, body = _answer(port, b"GET " + query + b" HTTP/1.1\r\n" + headers)
            assert status == b"HTTP/1.1 400 Bad Request", (headers, status)
            assert words in body["errors"][0]["message"], (headers, body)  # type: ignore[index]
        absolute = b"GET http://evil.example" + query + b" HTTP/1.1\r\nHost: api.example.com\r\n"
        status, body = _answer(port, absolute)
        assert status == b"HTTP/1.1 400 Bad Request", status
        message = body["errors"][0]["message"]  # type: ignore[index]
        assert "'evil.example'" in message and "RUNLOG_ALLOWED_HOSTS" in message, body
        # The target's authority is the host, whatever the Host header says.
        absolute = b"GET http://api.example.com:8000" + query + b" HTTP/1.1\r\nHost: evil.example\r\n"
        status, body = _answer(port, absolute)
        assert status == b"HTTP/1.1 200 OK" and body == {"data": {"__typename": "Query"}}, (status, body)
    finally:
        stop(served)
    assert "Traceback" not in served.output()
