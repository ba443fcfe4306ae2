"""CPU per request of the service and the floor, served side by side under the bench's load.

    python -m bench.cpu                              # RunLog, 50-line pages
    python -m bench.cpu --operation WriteNote --rounds 6
    python -m bench.cpu --profile /tmp/page          # and py-spy's stacks of the first round
    python -m bench.cpu --against c02314c            # and an older revision's, served beside it

Where `python -m bench` says how fast, this says what a request costs the
serving process: each server (`python -m gql serve` and `bench/floor.py`,
as the bench starts them, on the bench's own database and data) takes
`--seconds` of 8 clients sending one shipped operation, in alternating
rounds, and its user+system CPU time (/proc) is divided by the requests it
answered. With `--profile PREFIX`, py-spy (`pip install py-spy`; not a
dependency) records each server's first round as raw stacks, in
PREFIX-service.raw and PREFIX-floor.raw, for a flame graph or a count of
where the time goes. With `--against REV`, the service at that revision
(bench/revision.py) takes its turn too, sent the operation of that name REV
shipped, so the two trees' CPU a request are measured in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
from contextlib import ExitStack

from bench.data import SMALL_PAGE, bench_database, fill_base
from bench.operations import shipped
from bench.revision import against
from bench.servers import BEFORE, load, start

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--operation", default="RunLog", help="a shipped operation (default RunLog)")
    parser.add_argument("--limit", type=int, default=SMALL_PAGE, help="lines a page (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=6.0, help="each server's turn (default 6)")
    parser.add_argument("--profile", help="py-spy's raw stacks of each first round, to PREFIX-<server>.raw")
    parser.add_argument("--against", metavar="REV", help="also the service at this git revision")
    args = parser.parse_args()
    operation = {op.name: op for op in shipped()}[args.operation]
    bodies = dict.fromkeys(("service", "floor"), operation.body(args.limit))
    spy = shutil.which("py-spy") if args.profile else None
    if args.profile and spy is None:
        parser.error("--profile needs py-spy on PATH")
    per_request: dict[str, list[float]] = {"service": [], "floor": []}
    with ExitStack() as stack:
        revision, theirs = against(stack, parser, args.against, operation, args.limit)
        if theirs is not None:
            per_request = {"service": [], BEFORE: [], "floor": []}
            bodies[BEFORE] = theirs
            print(f"{BEFORE} = {revision.label}; service = this tree, as it is on disk")
        database = stack.enter_context(bench_database())
        fill_base(database)
        servers = {name: start(name, database, revision=revision) for name in per_request}
        try:
            for round_ in range(args.rounds):
                for name, server in servers.items():
                    recording = None
                    if spy is not None and round_ == 0:
                        command = [
                            spy,
                            "record",
                            "-r",
                            "300",
                            "-f",
                            "raw",
                            "-o",
                            f"{args.profile}-{name}.raw",
                        ]
                        command += ["--pid", str(server.process.pid), "-d", str(int(args.seconds))]
                        # py-spy, found on PATH, with arguments made here.
                        recording = subprocess.Popen(  # noqa: S603
                            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                        )
                    before = _cpu_seconds(server.process.pid)
                    [result] = load(
                        [
                            {
                                "mode": "throughput",
                                "requests": [["/graphql", bodies[name]]],
                                "clients": 8,
                                "seconds": args.seconds,
                                "port": server.port,
                                "expect_true": operation.kind == "mutation",
                            }
                        ]
                    )
                    spent = _cpu_seconds(server.process.pid) - before
                    if recording is not None:
                        recording.wait()
                    if result["errors"]:
                        raise RuntimeError(f"{name} answered {result['errors']} request(s) with an error")
                    per_request[name].append(1000 * spent / result["completed"])
                    rate = result["completed"] / result["seconds"]
                    cost = per_request[name][-1]
                    print(f"round {round_ + 1}  {name:8} {rate:9.1f} req/s  {cost:.3f} ms CPU a request")
        finally:
            for server in servers.values():
                server.stop()
    service, floor = (statistics.median(per_request[name]) for name in ("service", "floor"))
    print(
        f"median CPU a request: service {service:.3f} ms, floor {floor:.3f} ms, ratio {service / floor:.3f}"
    )
    if BEFORE in per_request:
        before = statistics.median(per_request[BEFORE])
        print(
            f"median CPU a request: {BEFORE} {before:.3f} ms, ratio {before / floor:.3f}; "
            f"service/{BEFORE} {service / before:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
