"""Instructions a request costs the serving process, counted by valgrind's callgrind.

    python -m bench.instructions --operation WriteNote --against cb6a918
    python -m bench.instructions --operation RunLog --requests 200

Each server (this tree's service; with `--against REV`, that revision's too)
runs under callgrind with counting off. Once it has answered `--warmup`
requests, counting is turned on for `--requests` more, sent one at a time,
and the count is divided by them. A count hardly moves from run to run, where
CPU time (`bench.cpu`) moves by several per cent, so it shows a change of
one or two. It counts instructions, not time: a cache miss or a system call's
wait is not in it. Needs `valgrind` and `callgrind_control` on PATH.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.data import SMALL_PAGE, bench_database, fill_base
from bench.operations import Operation, shipped
from bench.revision import against
from bench.servers import BEFORE, Server, start_many
from tests import local

_TOTALS = re.compile(rb"^totals: (\d+)", re.MULTILINE)  # one a part; the header's summary may be 0


def _callgrind(pid: int, *args: str) -> None:
    # valgrind's own tool, with arguments made here.
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)  # noqa: S603, S607


def _send(server: Server, body: str, count: int, mutation: bool) -> None:
    with local.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=120) as client:
        for _ in range(count):
            answer = client.post(
                "/graphql", content=body, headers={"Content-Type": "application/json"}
            ).json()
            if answer.get("errors") or (mutation and not all(answer.get("data", {}).values())):
                raise RuntimeError(f"{server.name} answered {answer}")


def per_request(
    server: Server, out: Path, operation: Operation, body: str, warmup: int, requests: int
) -> float:
    """Instructions `server` spent on each of `requests` requests, after `warmup` uncounted ones."""
    mutation = operation.kind == "mutation"
    _send(server, body, warmup, mutation)
    _callgrind(server.process.pid, "--instr=on")
    _send(server, body, requests, mutation)
    _callgrind(server.process.pid, "--instr=off")
    server.stop()  # callgrind writes its counts as the process ends
    return sum(int(total) for total in _TOTALS.findall(out.read_bytes())) / requests


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.instructions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--operation", default="RunLog", help="a shipped operation (default RunLog)")
    parser.add_argument("--limit", type=int, default=SMALL_PAGE, help="lines a page (default 50)")
    parser.add_argument("--warmup", type=int, default=200, help="uncounted requests first (default 200)")
    parser.add_argument("--requests", type=int, default=300, help="counted requests (default 300)")
    parser.add_argument("--against", metavar="REV", help="also the service at this git revision")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("needs valgrind and callgrind_control on PATH")
    operation = {op.name: op for op in shipped()}[args.operation]
    bodies = {"service": operation.body(args.limit)}
    with ExitStack() as stack:
        revision, theirs = against(stack, parser, args.against, operation, args.limit)
        if theirs is not None:
            bodies[BEFORE] = theirs
            print(f"{BEFORE} = {revision.label}; service = this tree, as it is on disk")
        database = stack.enter_context(bench_database())
        fill_base(database)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="runlog-callgrind-")))
        counts = {}
        for name, body in bodies.items():  # one at a time: each has the machine to itself
            out = folder / f"{name}.out"
            under = ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}")
            server = start_many([name], database, revision=revision, under=under, within=600)[name]
            try:
                counts[name] = per_request(server, out, operation, body, args.warmup, args.requests)
            finally:
                server.stop()
            print(f"{name:8} {counts[name]:14,.0f} instructions a request")
    if BEFORE in counts:
        print(f"service/{BEFORE} {counts['service'] / counts[BEFORE]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
