"""Loading the demo runs (gql/domain/demo_runs.py): `python -m gql demo`, or `python -m gql serve --demo`.

Idempotent: loading again replaces the demo's runs in one transaction. A run id holding
someone else's run is refused unless `--replace-demo-runs`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..kinds import Kind
from ..settings import Settings
from ..store import fold_log
from ..store.db import create_engine, event_run_log, event_run_log_words, event_runs, init_db, transaction
from .demo_runs import DEMO_ACTOR, RUN_IDS, DemoRun, build_runs
from .detail_codec import DetailError, check_detail, dump_detail


class DemoRefused(Exception):
    """The demo will not load here; the message says why and what to do instead."""


@dataclass(frozen=True)
class Loaded:
    runs: list[DemoRun]
    replaced: list[int]  # demo runs that were there before and were put back as new

    @property
    def line_count(self) -> int:
        return sum(len(run.lines) for run in self.runs)


def refuse_unless_embedded(settings: Settings, allow_non_embedded: bool) -> None:
    """Raise DemoRefused for a database that is not the embedded one, unless allowed."""
    if settings.is_embedded or allow_non_embedded:
        return
    raise DemoRefused(
        f"not loading the demo into {settings.safe_database_url}: it is not the embedded "
        f"database, and the demo writes runs {_ids_text()} into its event_runs and "
        "event_run_log, which belong to the events system there. Unset "
        "RUNLOG_DATABASE_URL to load it into the embedded database, or pass "
        "--allow-non-embedded if this database is a scratch one."
    )


def check_lines(runs: Sequence[DemoRun]) -> None:
    """Raise DetailError unless every detail passes the check `writeRunLog` applies."""
    for run in runs:
        for line in run.lines:
            if line.detail is None:
                continue
            try:
                check_detail(line.kind, dump_detail(line.detail))
            except DetailError as exc:
                raise DetailError(f"demo run {run.id}, line at {line.at}: {exc}") from None


async def load(
    engine: AsyncEngine, *, embedded: bool, now: datetime.datetime | None = None, replace_any: bool = False
) -> Loaded:
    """Create the tables where missing and put the demo runs in place, replacing earlier ones.

    With `replace_any`, runs with the demo's ids that did not come from the demo are replaced too.
    """
    now = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    runs = build_runs(now)
    check_lines(runs)
    await init_db(engine)
    async with transaction(engine) as conn:
        replaced = await _demo_runs_present(conn, embedded=embedded, replace_any=replace_any)
        await conn.execute(delete(event_run_log).where(event_run_log.c.run_id.in_(RUN_IDS)))
        await conn.execute(delete(event_run_log_words).where(event_run_log_words.c.run_id.in_(RUN_IDS)))
        await conn.execute(delete(event_runs).where(event_runs.c.id.in_(RUN_IDS)))
        await conn.execute(
            insert(event_runs),
            [
                {
                    "id": run.id,
                    "status": run.status,
                    "ended_at": run.ended_at,
                    "updated_at": run.updated_at,
                }
                for run in runs
            ],
        )
        await conn.execute(
            insert(event_run_log),
            [
                {
                    "run_id": run.id,
                    "step_id": line.step_id,
                    "kind": line.kind.value,
                    "phase": line.phase,
                    "detail": None if line.detail is None else dump_detail(line.detail),
                    "at": line.at,
                }
                for run in runs
                # Oldest first, so ids grow with time as they do for real lines.
                for line in sorted(run.lines, key=lambda line: line.at)
            ],
        )
    await fold_log(engine)  # lines stored with their own `at`, as by hand: folded as fold-words does
    return Loaded(runs=runs, replaced=replaced)


async def _demo_runs_present(conn: AsyncConnection, *, embedded: bool, replace_any: bool) -> list[int]:
    """The demo's run ids already present; DemoRefused if one holds another run, unless `replace_any`."""
    with_lines = set(
        (
            await conn.execute(
                select(event_run_log.c.run_id).where(event_run_log.c.run_id.in_(RUN_IDS)).distinct()
            )
        ).scalars()
    )
    rows = set((await conn.execute(select(event_runs.c.id).where(event_runs.c.id.in_(RUN_IDS)))).scalars())
    notes = (
        await conn.execute(
            select(event_run_log.c.run_id, event_run_log.c.detail).where(
                event_run_log.c.run_id.in_(RUN_IDS), event_run_log.c.kind == Kind.NOTE.value
            )
        )
    ).all()
    marked = {run_id for run_id, detail in notes if _is_marker(detail)}
    foreign = sorted((with_lines - marked) | (set() if embedded else rows - with_lines - marked))
    if foreign and not replace_any:
        runs = f"run{'s' if len(foreign) > 1 else ''} {', '.join(map(str, foreign))}"
        raise DemoRefused(
            f"not loading the demo: {runs} already exist{'' if len(foreign) > 1 else 's'} "
            "here and did not come from the demo (the demo uses runs "
            f"{_ids_text()}). Nothing was changed. To replace {runs} with the demo's, "
            "deleting their lines and leaving every other run as it is, add "
            "--replace-demo-runs (scripts/serve --demo --replace-demo-runs, or "
            ".venv/bin/python -m gql demo --replace-demo-runs)."
        )
    return sorted(with_lines | rows)


def _is_marker(detail: str | None) -> bool:
    try:
        parsed = json.loads(detail or "")
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("actor") == DEMO_ACTOR


def _ids_text() -> str:
    return ", ".join(map(str, RUN_IDS))


async def load_into(
    settings: Settings,
    *,
    allow_non_embedded: bool = False,
    now: datetime.datetime | None = None,
    replace_any: bool = False,
) -> Loaded:
    """Load the demo where `settings` says, refusing a non-embedded database unless allowed."""
    refuse_unless_embedded(settings, allow_non_embedded)
    engine = create_engine(settings)
    try:
        return await load(engine, embedded=settings.is_embedded, now=now, replace_any=replace_any)
    finally:
        await engine.dispose()


def describe(loaded: Loaded, settings: Settings) -> str:
    """What was loaded, for the terminal."""
    lines = [
        f"demo loaded into {settings.safe_database_url}: {len(loaded.runs)} runs, "
        f"{loaded.line_count} lines" + (" (the earlier demo runs were replaced)" if loaded.replaced else "")
    ]
    for run in loaded.runs:
        lines.append(f"  run {run.id}  {run.status:<10} {run.story}")
    return "\n".join(lines)
