"""The demo's five runs, in five statuses, telling the seed's stories: `build_runs(now)`.

The stories are data, in demo_runs.json: each run's lines at minutes from its start, with
`"{at M}"` in a detail for the time M minutes from the start. Every kind appears at least once
(a kind no story tells, with its declared example). Each run's first line is a note from
`DEMO_ACTOR`, which is how gql/domain/demo.py knows its runs.
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from ..kinds import BY_WIRE_NAME, Kind
from .details import EXAMPLES

DEMO_ACTOR = "python -m gql demo"

DRY_RUN = 35  # completed: the dry run that verified version 3
INVASION = 37  # live: holds invasion:Yew; the gate, the caps, the boss
BLOCKED = 38  # scheduled: did not start, because run 37 holds invasion:Yew
TREASURE_HUNT = 39  # cancelled: what it left behind, and the cleanup
RELAY = 40  # failed: retried, then gave up
RUN_IDS = (DRY_RUN, INVASION, BLOCKED, TREASURE_HUNT, RELAY)

_MARKER_TEXT = (
    "Demo data: loaded by `python -m gql demo`, and put back as it was each time it is loaded again."
)
_AT = re.compile(r"\{at (-?[0-9.]+)\}")


@dataclass(frozen=True)
class DemoLine:
    at: datetime.datetime  # naive UTC, as stored
    kind: Kind
    detail: dict[str, Any] | None
    step_id: int | None = None
    phase: int | None = None


@dataclass(frozen=True)
class DemoRun:
    id: int
    status: str
    story: str
    updated_at: datetime.datetime
    ended_at: datetime.datetime | None = None
    lines: list[DemoLine] = field(default_factory=list)


def build_runs(now: datetime.datetime) -> list[DemoRun]:
    """The demo runs, their times counted back from `now` (naive UTC, to the millisecond)."""
    stories = json.loads(files(__package__).joinpath("demo_runs.json").read_text(encoding="utf-8"))
    runs = [_run(story, _millis(now)) for story in stories]
    told = {line.kind for run in runs for line in run.lines}
    untold = [kind for kind in Kind if kind not in told]
    return [_with_lines_of(untold, run) if run.id == INVASION else run for run in runs]


def _run(story: dict[str, Any], now: datetime.datetime) -> DemoRun:
    start = now - datetime.timedelta(minutes=story["began"])

    def at(minutes: float) -> datetime.datetime:
        return _millis(start + datetime.timedelta(minutes=minutes))

    def timed(value: Any) -> Any:
        """`value` with each `"{at M}"` the time M minutes from the start, as the runner writes it."""
        if isinstance(value, dict):
            return {key: timed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [timed(item) for item in value]
        if isinstance(value, str) and (minutes := _AT.fullmatch(value)):
            return at(float(minutes[1])).isoformat(timespec="milliseconds") + "Z"
        return value

    created = {"eventId": story["event"], "eventVersion": story["version"], "scheduledFor": "{at 0}"}
    lines = [
        DemoLine(at(story["marked"]), Kind.NOTE, {"text": _MARKER_TEXT, "actor": DEMO_ACTOR}),
        DemoLine(at(0), Kind.RUN_CREATED, timed(created)),
        *(
            DemoLine(
                at(line["at"]),
                BY_WIRE_NAME[line["kind"]],
                timed(line.get("detail")),
                line.get("step"),
                line.get("phase"),
            )
            for line in story["lines"]
        ),
    ]
    ended = story.get("ended")
    return DemoRun(
        story["id"],
        story["status"],
        story["story"],
        updated_at=at(story["updated"]),
        ended_at=None if ended is None else at(ended),
        lines=lines,
    )


def _with_lines_of(kinds: list[Kind], run: DemoRun) -> DemoRun:
    """`run` and, after its last line, a line of each of `kinds` (no story tells them) with its example."""
    if not kinds:
        return run
    last = run.lines[-1].at
    added = [
        DemoLine(last + datetime.timedelta(seconds=n), kind, EXAMPLES[kind])
        for n, kind in enumerate(kinds, 1)
    ]
    return DemoRun(run.id, run.status, run.story, added[-1].at, run.ended_at, [*run.lines, *added])


def _millis(value: datetime.datetime) -> datetime.datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)
