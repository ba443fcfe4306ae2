"""The load generator: a process of its own, so the client does not eat the server's CPU.

It speaks HTTP/1.1 over keep-alive connections with plain asyncio streams: a
request is one pre-encoded `bytes`, a response is read by its Content-Length.
That costs the client a few tens of microseconds a request, against several
hundred for an httpx client, so the client is never what limits the rate.

Run by `bench.servers.load` with a list of jobs as JSON on stdin, done one after the
other (the rounds of several servers, alternating); answers a list of results
as JSON on stdout:

    {"port": 8100, "mode": "latency", "requests": [[path, body], ...], "count": 50, "warmup": 5}
      -> {"latencies_ms": [...], "bytes": n, "errors": 0, "sent": n}
    {"port": 8100, "mode": "throughput", "requests": [...], "clients": 8, "seconds": 10}
      (with "ports": [8100, 8101, ...] the clients take the ports in turn)
      -> {"completed": n, "seconds": s, "latencies_ms": [...], "errors": 0, "sent": n}

`sent` counts every request, warm-up ones included (what a write adds to the table).

Each client takes the requests in turn (client i starts at request i). A
response is an error when its status is not 200 or its body holds `"errors"`
or `false` answers where `expect` says they must not.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        return status, body

    def close(self) -> None:
        self.writer.close()


def encode(port: int, path: str, body: str, headers: dict[str, str]) -> bytes:
    data = body.encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    ).encode() + data


def is_error(status: int, body: bytes, expect_true: bool) -> bool:
    if status != 200 or b'"errors"' in body:
        return True
    return expect_true and b"false" in body[:64]


async def latency(job: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
    conn = await Connection.open(job["port"])
    errors = 0
    size = 0
    for i in range(job.get("warmup", 0)):
        await conn.send(raws[i % len(raws)])
    latencies = []
    for i in range(job["count"]):
        started = time.perf_counter()
        status, body = await conn.send(raws[i % len(raws)])
        latencies.append((time.perf_counter() - started) * 1000)
        errors += is_error(status, body, job.get("expect_true", False))
        size = len(body)
    conn.close()
    sent = job.get("warmup", 0) + job["count"]
    return {"latencies_ms": latencies, "bytes": size, "errors": errors, "sent": sent}


async def throughput(job: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
    clients = job["clients"]
    # With "ports", client i talks to ports[i % len(ports)]: one load spread over several servers.
    ports = job.get("ports") or [job["port"]]
    conns = [await Connection.open(ports[i % len(ports)]) for i in range(clients)]
    latencies: list[float] = []
    counts = [0] * clients
    errors = [0] * clients
    expect_true = job.get("expect_true", False)
    # Warm every connection (and the server's caches) before the clock starts.
    await asyncio.gather(*(conn.send(raws[i % len(raws)]) for i, conn in enumerate(conns)))
    started = time.perf_counter()
    deadline = started + job["seconds"]

    async def client(index: int) -> None:
        conn = conns[index]
        i = index
        while True:
            sent = time.perf_counter()
            if sent >= deadline:
                return
            status, body = await conn.send(raws[i % len(raws)])
            done = time.perf_counter()
            latencies.append((done - sent) * 1000)
            counts[index] += 1
            errors[index] += is_error(status, body, expect_true)
            i += clients

    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    return {
        "completed": sum(counts),
        "seconds": elapsed,
        "latencies_ms": latencies,
        "errors": sum(errors),
        "sent": sum(counts) + clients,
    }


async def run(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results = []
    for job in jobs:
        headers = job.get("headers", {})
        raws = [encode(job["port"], path, body, headers) for path, body in job["requests"]]
        mode = latency if job["mode"] == "latency" else throughput
        results.append(await mode(job, raws))
    return results


def main() -> None:
    json.dump(asyncio.run(run(json.load(sys.stdin))), sys.stdout)


if __name__ == "__main__":
    main()
