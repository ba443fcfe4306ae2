"""A request's head is bounded at 16 KiB whichever HTTP parser uvicorn runs.

h11 refuses a longer head itself; httptools, which uvicorn uses when it is
installed (pyproject.toml installs it), accepts any size. `gql.server` counts
the head's bytes for both. Against a real `python -m gql serve`.
"""

from __future__ import annotations

import socket
import time

from gql.server import MAX_HEAD_BYTES

from .test_slow_clients import QUERY, connect, server, until_closed  # noqa: F401  (server: a fixture)


def _ask(port: int, padding: int, body: bytes = QUERY) -> bytes:
    """A complete POST whose head carries `padding` bytes of one header; the server's answer."""
    head = (
        b"POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + b"X-Padding: "
        + b"a" * padding
        + b"\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
    )
    with connect(port) as conn:
        conn.sendall(head + body)  # one write: the body arrives with the head
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
