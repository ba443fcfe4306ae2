"""A TCP proxy between the service and MariaDB that can refuse, hang and recover.

The app under test runs in the test client's portal thread, so the proxy runs
in a thread of its own with its own event loop; the test drives it with plain
calls. Nothing is mocked: the service's driver talks to the real MariaDB
through real sockets, and the proxy only decides whether bytes get through.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    # Set once the link has lost bytes (swallowed while hanging): the
    # protocol on it can never be trusted again, so it is reset on recovery.
    broken: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    """Forward 127.0.0.1:<port> to the upstream, until told to refuse or hang.

    - `refuse()`: stop listening (a connect is refused) and reset every open
      connection, as a database that went down does.
    - `hang()`: keep accepting, but answer nothing: new connections never get
      the server's greeting, and open ones stop carrying bytes either way, as
      a database behind a dead network path does.
    - `recover()`: forward again; connections that lost bytes while hanging
      are reset (their protocol state is gone), the others carry on.
    - `commands`: every command a client sent, in order, as (name, text):
      ("query", "SELECT ..."), ("ping", ""), ...: each is one round trip.
    - `deafen()`: carry the service's bytes to the server, but lose every
      answer, as a path that fails after a statement was sent does: the server
      runs (and commits) what it gets, and the service never hears.
    - `deafen_at(text, nth)`: as `deafen()`, from the `nth` command from now
      whose text is `text` on (that command's answer is lost too).
    - `reset_open()`: reset every open connection and keep accepting new ones,
      as a server that dropped its connections does.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.links: set[_Link] = set()
        self.hanging = False
        self.commands: list[tuple[str, str]] = []
        self.deaf = False
        self.deaf_at: tuple[str, int] | None = None  # the text, and how many more to let by
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *_: object) -> None:
        self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def refuse(self) -> None:
        self._call(self._refuse())

    def hang(self) -> None:
        self._call(self._hang())

    def recover(self) -> None:
        self._call(self._recover())

    def deafen(self) -> None:
        self._call(self._deafen())

    def deafen_at(self, text: str, nth: int = 1) -> None:
        self.deaf_at = (text, nth - 1)

    def reset_open(self) -> None:
        self._call(self._reset_open())

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _refuse(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self.links):
            self._reset(link)

    async def _hang(self) -> None:
        self.hanging = True

    async def _deafen(self) -> None:
        self.deaf = True

    async def _reset_open(self) -> None:
        for link in list(self.links):
            self._reset(link)

    async def _recover(self) -> None:
        self.hanging = False
        self.deaf = False
        self.deaf_at = None
        for link in list(self.links):
            if link.broken:
                self._reset(link)
        if self._server is None:
            await self._listen()

    async def _close_all(self) -> None:
        await self._refuse()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(client=writer)
        self.links.add(link)
        try:
            if self.hanging:
                link.broken = True  # it never got its greeting
                while await reader.read(65536):
                    pass  # swallowed
                return
            try:
                up_reader, link.upstream = await asyncio.open_connection(*self.upstream)
            except OSError:
                self._reset(link)
                return
            link.tasks = [
                asyncio.ensure_future(self._pump(reader, link.upstream, link, bytearray())),
                asyncio.ensure_future(self._pump(up_reader, writer, link)),
            ]
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._reset(link)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        sent: bytearray | None = None,
    ) -> None:
        """Forward bytes; from the client (`sent` given), also note each command."""
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                # `sent` is given for the client's side: the other side carries answers.
                if self.hanging or link.broken or (sent is None and self.deaf):
                    link.broken = True
                    continue  # the bytes are lost, as on a dead path
                if sent is not None:
                    sent.extend(data)
                    self._note_commands(sent)
                writer.write(data)
                await writer.drain()

    def _note_commands(self, sent: bytearray) -> None:
        # A MySQL packet is a 3-byte length, a sequence number, the payload. A
        # client's packet with sequence number 0 starts a command (the login
        # packet after the greeting is number 1, so it is not one).
        while len(sent) >= 4:
            size = int.from_bytes(sent[:3], "little")
            if len(sent) < 4 + size:
                return
            sequence, payload = sent[3], bytes(sent[4 : 4 + size])
            del sent[: 4 + size]
            if sequence == 0 and payload:
                name = _COMMANDS.get(payload[0], f"command {payload[0]}")
                self.commands.append((name, payload[1:].decode("utf-8", "replace")))
                if self.deaf_at is not None and self.commands[-1][1] == self.deaf_at[0]:
                    text, more = self.deaf_at
                    self.deaf_at = (text, more - 1) if more else None
                    self.deaf = self.deaf or not more

    def _reset(self, link: _Link) -> None:
        """Close both sides at once; the client's side with a TCP reset."""
        if link not in self.links:
            return
        self.links.discard(link)
        for task in link.tasks:
            task.cancel()
        sock = link.client.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                # Linger 0: close sends RST, as a crashed server's host does.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        link.client.transport.abort()
        if link.upstream is not None:
            link.upstream.transport.abort()


_COMMANDS = {0x01: "quit", 0x03: "query", 0x0E: "ping", 0x16: "prepare", 0x17: "execute"}
