"""`python -m gql serve | init-db | export-schema | check-schema | prune | fold-words | demo`."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import logging.config
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from .settings import Settings, SettingsError

if TYPE_CHECKING:
    from .domain import retention


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gql", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    serve = commands.add_parser("serve", help="serve the API at /graphql")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    serve.add_argument(
        "--workers", type=int, default=None, help="uvicorn worker processes (default RUNLOG_WORKERS, or 1)"
    )

    init = commands.add_parser(
        "init-db",
        help="apply the schema's migrations (safe to run twice); --sql prints them instead",
        description="Bring the database to the latest migration: create what is missing, adopt "
        "a database an earlier release made (or the events system's own event_run_log) without "
        "changing its rows, and create event_runs only where it is missing.",
    )
    init.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL that would bring this database to the latest migration, and apply "
        "nothing (for a DBA who runs schema changes by hand)",
    )
    commands.add_parser("export-schema", help="print the SDL that schema.graphql holds")
    _add_check_schema_parser(commands)
    _add_prune_parser(commands)
    commands.add_parser(
        "fold-words",
        help="keep the words search reads of every line stored without them (before migration 0008, or by "
        "hand): the upgrade step",
    )
    export = commands.add_parser(
        "export",
        help="write a run's log to standard output as NDJSON, oldest first (as GET /runs/{id}/log.ndjson)",
    )
    export.add_argument("run_id", metavar="RUN_ID")
    for name in ("kinds", "phase", "stepId", "since", "until", "search"):
        export.add_argument(f"--{name}", action="append", help=f"the export's `{name}` parameter")
    _add_demo_arguments(commands, serve)

    args = parser.parse_args(_negative_durations_as_values(argv))
    if args.command == "export-schema":
        from .api.schema import export_sdl

        sys.stdout.write(export_sdl())
        return 0
    if args.command == "check-schema":
        return _check_schema(args.against)

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .logs import logging_config

    logging.config.dictConfig(logging_config(settings.log_format, settings.log_level))
    if args.command == "init-db":
        return asyncio.run(_init_db(settings, sql=args.sql))
    if args.command == "prune":
        return _prune(settings, args)
    if args.command == "fold-words":
        return asyncio.run(_fold_words(settings))
    if args.command == "export":
        from .edge.app import create_app
        from .edge.export import export_to

        names = ("kinds", "phase", "stepId", "since", "until", "search")
        params = [(name, value) for name in names for value in getattr(args, name) or ()]
        app = create_app(settings)
        return asyncio.run(export_to(app, settings, args.run_id, params, sys.stdout.buffer, sys.stderr))
    if args.command == "serve":
        if settings.otel:
            from .tracing import TracingUnavailable, check_installed

            try:
                check_installed()
            except TracingUnavailable as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        if args.workers is None:
            args.workers = settings.workers
        refused = _refuse_workers(settings, args.workers)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return 2
    if args.command == "demo" or args.demo:
        status = _demo(
            settings, args.allow_non_embedded, args.replace_demo_runs, then_serve=args.command == "serve"
        )
        if status or args.command == "demo":
            return status
    return _serve(settings, args.host, args.port, args.workers)


def _refuse_workers(settings: Settings, workers: int) -> str | None:
    """Why `serve --workers N` cannot run on these settings, or None when it can."""
    if workers < 1:
        return f"--workers {workers} is not accepted: give a number of processes of at least 1"
    if workers > 1 and settings.is_embedded:
        return (
            f"--workers {workers} is refused on the embedded SQLite database "
            f"({settings.safe_database_url}): each worker would create the tables and run its "
            "own retention sweeper on one file, which only MySQL/MariaDB coordinate; "
            "use --workers 1 here, or set RUNLOG_DATABASE_URL to MySQL/MariaDB for several workers"
        )
    return None


async def _init_db(settings: Settings, *, sql: bool = False) -> int:
    from .store.db import create_engine, init_db

    if sql:
        return await _print_migration_sql(settings)
    engine = create_engine(settings)
    try:
        done = await init_db(engine)
    finally:
        await engine.dispose()
    for line in done.lines(settings.safe_database_url):
        print(line)
    return 0


async def _print_migration_sql(settings: Settings) -> int:
    from .store import migrations
    from .store.db import create_engine

    engine = create_engine(settings)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(migrations.write_sql, sys.stdout)
    finally:
        await engine.dispose()
    return 0


def _serve(settings: Settings, host: str, port: int, workers: int) -> int:
    import uvicorn

    from .edge import server

    made_dir = _metrics_dir(workers)
    try:
        if settings.metrics_port is not None:
            _serve_metrics(host, settings.metrics_port)
        options = server.uvicorn_options(settings)
        if workers > 1:
            # Each worker builds its own app (and pool) from the environment.
            with server.listening_socket(host, port) as sock:
                app, fd = "gql.edge.app:create_app", sock.fileno()
                uvicorn.run(app, factory=True, fd=fd, workers=workers, **options)
            return 0
        from .edge.app import create_app

        # What uvicorn.run does for one process (SIGTERM drains, then lifespan shutdown), with our Config.
        served = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, **options))
        served.run()
        return 0 if served.started else 3  # uvicorn's own exit status for a failed start
    finally:
        if made_dir is not None:
            shutil.rmtree(made_dir, ignore_errors=True)


def _metrics_dir(workers: int) -> str | None:
    """Prepare PROMETHEUS_MULTIPROC_DIR for several workers (emptied); the folder to remove, if made."""
    from .metrics import MULTIPROC_ENV

    given = os.environ.get(MULTIPROC_ENV)
    if workers <= 1 and not given:
        return None
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.remove(os.path.join(given, name))
        return None
    made = tempfile.mkdtemp(prefix="runlog-metrics-")
    os.environ[MULTIPROC_ENV] = made  # before prometheus_client is imported, here and in each worker
    return made


def _serve_metrics(host: str, port: int) -> None:
    """Serve /metrics on a port of its own, from this process (the workers' supervisor, or the server)."""
    from prometheus_client import start_http_server

    from . import metrics

    start_http_server(port, addr=host, registry=metrics.registry())
    logging.getLogger("gql.metrics").info("metrics on http://%s:%d/metrics", host, port)


# ── check-schema ─────────────────────────────────────────────────────────────


def _add_check_schema_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "check-schema",
        help="list breaking and dangerous changes against an earlier schema.graphql",
        description="Compare the schema this code serves with an earlier SDL, print each "
        "breaking and each dangerous change, and exit 1 when a breaking change is not "
        "announced in docs/schema-changes.md.",
    )
    check.add_argument(
        "--against",
        metavar="FILE_OR_REVISION",
        help="an SDL file, or a git revision whose schema.graphql to compare with "
        "(default: the version before the latest commit that changed schema.graphql)",
    )


def _check_schema(against: str | None) -> int:
    from pathlib import Path

    from .api import schema_check
    from .api.schema import export_sdl

    root = schema_check.repo_root(Path.cwd())
    try:
        old_sdl, where = schema_check.baseline(against, root)
    except schema_check.BaselineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    announcements = root / schema_check.ANNOUNCEMENTS_FILE
    text = announcements.read_text(encoding="utf-8") if announcements.is_file() else ""
    report = schema_check.compare(old_sdl, export_sdl(), text)
    print(f"check-schema: the schema this code serves, against {where}")
    for change in report.breaking:
        said = "announced" if change.description in report.announced else "NOT ANNOUNCED"
        print(f"breaking ({said}): {change.kind}: {change.description}")
    for change in report.dangerous:
        print(f"dangerous: {change.kind}: {change.description}")
    if not report.breaking and not report.dangerous:
        print("no breaking or dangerous change")
    if report.unannounced:
        print(
            f"error: {len(report.unannounced)} breaking change(s) not announced. Generated clients "
            f"break on them: make the change additive instead, or announce each one as a list item "
            f"in {schema_check.ANNOUNCEMENTS_FILE} that starts with its sentence above, e.g.\n"
            f"- {report.unannounced[0].description} <why, and what clients should do>",
            file=sys.stderr,
        )
        return 1
    return 0


# ── prune ────────────────────────────────────────────────────────────────────


async def _fold_words(settings: Settings) -> int:
    from .store.db import create_engine
    from .store.words import fold_log

    engine = create_engine(settings)
    try:
        folded = await fold_log(engine, on_batch=lambda n: print(n, end="\r", file=sys.stderr))
    finally:
        await engine.dispose()
    print(f"{folded} lines folded: every line's words are kept")
    return 0


def _add_prune_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prune = commands.add_parser(
        "prune",
        help="delete the lines of terminal runs that ended before a horizon, slice by slice",
        description="Delete the lines of runs in a terminal status (completed, cancelled, "
        "failed, missed) that ended longer ago than --older-than, one slice at a time (the "
        "prune pruneTerminal runs) until none is left. Runs that are not terminal keep "
        "every line.",
    )
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="prune runs that ended longer ago than this: a number and a unit, s, m, h or d (30d, 12h)",
    )
    prune.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="lines per slice (default 5000, clamped to 1..50000 like pruneTerminal)",
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")


def _negative_durations_as_values(argv: Sequence[str] | None) -> list[str]:
    """Read `--older-than -5d` as a (refused) value, not as an unknown option `-5d`."""
    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args[:-1]):
        if arg == "--older-than" and args[i + 1][:2].startswith("-") and args[i + 1][1:2].isdigit():
            args[i : i + 2] = [f"--older-than={args[i + 1]}"]
            break
    return args


def _prune(settings: Settings, args: argparse.Namespace) -> int:
    from .domain import retention
    from .store import clamp_prune_limit

    try:
        horizon = retention.horizon_from(args.older_than)
    except ValueError as exc:
        print(f"error: --older-than {args.older_than}: {exc}", file=sys.stderr)
        return 2
    limit = clamp_prune_limit(args.limit)
    if args.limit is not None and limit != args.limit:
        print(f"note: --limit {args.limit} is clamped to {limit}", file=sys.stderr)
    try:
        return asyncio.run(_run_prune(settings, horizon, limit, args.dry_run))
    except KeyboardInterrupt:  # _run_prune has said how far it got
        return 130


async def _run_prune(settings: Settings, horizon: datetime.datetime, limit: int, dry_run: bool) -> int:
    from . import store
    from .domain import retention
    from .store.db import create_engine

    engine = create_engine(settings)
    when = horizon.isoformat(timespec="seconds")
    progress = ProgressBar(sys.stderr)
    bound = settings.prune_timeout
    try:
        async with asyncio.timeout(bound):
            lines = await store.count_eligible(engine, before=horizon)
        if dry_run:
            async with asyncio.timeout(bound):
                runs = await store.count_eligible_runs(engine, before=horizon)
            print(
                f"dry run: {_count(lines, 'line')} of {_count(runs, 'terminal run')} that "
                f"ended before {when} would be deleted, in slices of up to {limit:,} lines; "
                "nothing was deleted"
            )
            return 0
        progress.total = lines
        lock = retention.lock_name(settings.url)

        def waiting() -> None:
            print(
                f"waiting up to {retention.SLICE_TIMEOUT:g}s for the sweep lock {lock!r}: "
                "a server's retention sweeper is pruning a slice",
                file=sys.stderr,
            )

        # The sweepers' lock, for the whole drain: their ticks skip meanwhile.
        async with retention.sweep_lock(engine, lock, wait=retention.SLICE_TIMEOUT, on_wait=waiting) as taken:
            if not taken:
                print(
                    f"error: another process held the sweep lock {lock!r} for "
                    f"{retention.SLICE_TIMEOUT:g}s, longer than a sweeper's slice may take; "
                    "nothing was deleted, try again later",
                    file=sys.stderr,
                )
                return 1
            done = await retention.drain(
                engine, before=horizon, limit=limit, on_slice=progress.show, slice_timeout=bound
            )
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels, then raises KeyboardInterrupt
        progress.finish()
        print(
            f"interrupted after {_count(progress.deleted, 'line')}; the slice in flight was rolled back",
            file=sys.stderr,
        )
        raise
    except Exception as exc:
        progress.finish()
        print(
            f"error: prune failed after {_count(progress.deleted, 'line')} (those stay deleted): "
            f"{retention.describe_failure(exc, bound)}",
            file=sys.stderr,
        )
        return 1
    finally:
        await engine.dispose()
    progress.finish()
    if done.deleted == 0:
        print(f"nothing to prune: no line of a terminal run that ended before {when}")
        return 0
    print(
        f"pruned {_count(done.deleted, 'line')} of {_count(done.runs, 'run')} in "
        f"{_count(done.slices, 'slice')} of up to {limit:,} lines, {done.elapsed:.1f}s; "
        f"horizon {when}"
    )
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


class ProgressBar:
    """A bar redrawn in place on a terminal; a plain line every few seconds otherwise."""

    WIDTH = 30
    PLAIN_EVERY = 5.0

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.total = 0
        self.deleted = 0
        self._printed_at = -self.PLAIN_EVERY
        self._drawn = False

    def show(self, progress: retention.Progress) -> None:
        self.deleted = progress.deleted
        total = max(self.total, progress.deleted)
        share = progress.deleted / total if total else 1.0
        counts = (
            f"{progress.deleted:,}/{total:,} lines, {_count(progress.runs, 'run')}, "
            f"{_count(progress.slices, 'slice')}, {progress.elapsed:.1f}s"
        )
        if self.tty:
            filled = round(share * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.stream.write(f"\r[{bar}] {share:4.0%} {counts}\x1b[K")
            self.stream.flush()
            self._drawn = True
        elif progress.elapsed - self._printed_at >= self.PLAIN_EVERY:
            self._printed_at = progress.elapsed
            self.stream.write(f"pruning: {counts}\n")
            self.stream.flush()

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


# ── demo data (`demo`, `serve --demo`) ────────────────────────────────────────


def _add_demo_arguments(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    serve: argparse.ArgumentParser,
) -> None:
    demo = commands.add_parser(
        "demo",
        help="load demo runs into the embedded database (safe to run twice)",
        description="Load five demo runs, with lines of every kind, into the embedded "
        "database; loading again puts them back as they were.",
    )
    serve.add_argument(
        "--demo", action="store_true", help="load the demo runs first (embedded database only)"
    )
    for parser in (demo, serve):
        parser.add_argument(
            "--allow-non-embedded",
            action="store_true",
            help="load into RUNLOG_DATABASE_URL even though it is not the embedded database",
        )
        parser.add_argument(
            "--replace-demo-runs",
            action="store_true",
            help="replace runs with the demo's ids even if they did not come from the demo "
            "(deletes their lines; no other run is touched)",
        )
    demo.set_defaults(demo=True)


def _demo(settings: Settings, allow_non_embedded: bool, replace_any: bool, then_serve: bool) -> int:
    from .domain.demo import DemoRefused, describe, load_into

    try:
        loaded = asyncio.run(
            load_into(settings, allow_non_embedded=allow_non_embedded, replace_any=replace_any)
        )
    except DemoRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(loaded, settings))
    if not then_serve:
        print("Explore it: scripts/serve, then open http://127.0.0.1:8000/graphql")
    return 0
