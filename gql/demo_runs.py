"""The demo's five runs, in five statuses, telling the seed's stories: `build_runs(now)`.

Every kind appears at least once (a kind no story tells, with its declared example). Each
run's first line is a note from `DEMO_ACTOR`, which is how gql/demo.py knows its runs.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import Any

from .details import EXAMPLES
from .kinds import Kind

DEMO_ACTOR = "python -m gql demo"

DRY_RUN = 35  # completed: the dry run that verified version 3
INVASION = 37  # live: holds invasion:Yew; the gate, the caps, the boss
BLOCKED = 38  # scheduled: did not start, because run 37 holds invasion:Yew
TREASURE_HUNT = 39  # cancelled: what it left behind, and the cleanup
RELAY = 40  # failed: retried, then gave up
RUN_IDS = (DRY_RUN, INVASION, BLOCKED, TREASURE_HUNT, RELAY)

CONCURRENCY_KEY = "invasion:Yew"


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


# ── the stories ──────────────────────────────────────────────────────────────


class _Log:
    """Lines of one run, each a given number of minutes after the run began.

    It opens with the demo's marker note, `marked` minutes before, and `run.created` at 0.
    """

    def __init__(self, start: datetime.datetime, *, marked: float, event: int, version: str) -> None:
        self.start = start
        self.lines: list[DemoLine] = []
        self.add(marked, Kind.NOTE, {"text": _MARKER_TEXT, "actor": DEMO_ACTOR})
        self.add(
            0, Kind.RUN_CREATED, {"eventId": event, "eventVersion": version, "scheduledFor": self.iso(0)}
        )

    def at(self, minutes: float) -> datetime.datetime:
        return _millis(self.start + datetime.timedelta(minutes=minutes))

    def iso(self, minutes: float) -> str:
        return self.at(minutes).isoformat(timespec="milliseconds") + "Z"

    def add(
        self,
        minutes: float,
        kind: Kind,
        detail: dict[str, Any] | None,
        *,
        step: int | None = None,
        phase: int | None = None,
    ) -> None:
        self.lines.append(DemoLine(self.at(minutes), kind, detail, step, phase))


def _millis(value: datetime.datetime) -> datetime.datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


_MARKER_TEXT = (
    "Demo data: loaded by `python -m gql demo`, and put back as it was each time it is loaded again."
)


def build_runs(now: datetime.datetime) -> list[DemoRun]:
    """The demo runs, their times counted back from `now` (naive UTC, to the millisecond)."""
    now = _millis(now)
    runs = [
        _dry_run(now - datetime.timedelta(days=3, hours=2)),
        _invasion(now - datetime.timedelta(minutes=100)),
        _blocked(now - datetime.timedelta(minutes=21)),
        _treasure_hunt(now - datetime.timedelta(days=1, hours=3)),
        _relay(now - datetime.timedelta(hours=6)),
    ]
    told = {line.kind for run in runs for line in run.lines}
    untold = [kind for kind in Kind if kind not in told]
    return [_with_lines_of(untold, run) if run.id == INVASION else run for run in runs]


def _with_lines_of(kinds: list[Kind], run: DemoRun) -> DemoRun:
    """`run` and, after its last line, a line of each of `kinds` (no story tells them) with its example."""
    if not kinds:
        return run
    last = run.lines[-1].at
    added = [
        DemoLine(last + datetime.timedelta(seconds=n), kind, EXAMPLES[kind])
        for n, kind in enumerate(kinds, 1)
    ]
    return replace(run, lines=[*run.lines, *added], updated_at=added[-1].at)


def _dry_run(start: datetime.datetime) -> DemoRun:
    log = _Log(start, marked=-1, event=12, version="3")
    log.add(0.1, Kind.RUN_STATUS, {"from": "scheduled", "to": "live", "reason": "dry run"})
    log.add(0.2, Kind.PHASE_ENTERED, {"stepIds": [3501, 3502, 3503]}, phase=1)
    log.add(
        1,
        Kind.STEP_STATUS,
        {
            "from": "pending",
            "to": "done",
            "module": "spawner",
            "answer": {"dryRun": True, "wouldSpawn": 40, "region": "Yew"},
        },
        step=3501,
        phase=1,
    )
    log.add(
        1.5,
        Kind.STEP_REFUSED,
        {"refusal": "DISABLED", "switch": "events.dryRun.grantRewards"},
        step=3502,
        phase=1,
    )
    log.add(
        2,
        Kind.STEP_STATUS,
        {"from": "pending", "to": "done", "module": "broadcast", "answer": {"dryRun": True}},
        step=3503,
        phase=1,
    )
    log.add(
        2.1,
        Kind.PHASE_COMPLETED,
        {
            "stepCount": 3,
            "byStatus": [{"status": "done", "count": 2}, {"status": "refused", "count": 1}],
        },
        phase=1,
    )
    log.add(2.5, Kind.VERSION_VERIFIED, {"version": "3", "dryRunId": DRY_RUN})
    log.add(2.6, Kind.RUN_STATUS, {"from": "live", "to": "completed"})
    return DemoRun(
        DRY_RUN,
        "completed",
        "the dry run that verified version 3 of the invasion (a step refused: DISABLED)",
        updated_at=log.at(2.6),
        ended_at=log.at(2.6),
        lines=log.lines,
    )


def _invasion(start: datetime.datetime) -> DemoRun:
    log = _Log(start, marked=-2, event=12, version="3")
    log.add(
        0.05,
        Kind.RUN_BUDGET,
        {
            "caps": [
                {"cap": "spawns", "limit": 40, "switch": "events.caps.spawns.yew"},
                {"cap": "rewards", "limit": 200, "switch": None},
                {"cap": "broadcasts", "limit": 6, "switch": "events.caps.broadcasts"},
            ]
        },
    )
    log.add(0.1, Kind.RUN_STATUS, {"from": "scheduled", "to": "live"})
    # Phase 1: the invaders arrive.
    log.add(0.2, Kind.PHASE_ENTERED, {"stepIds": [3701, 3702, 3703]}, phase=1)
    log.add(
        0.5,
        Kind.STEP_RETRY,
        {
            "attempt": 1,
            "maxAttempts": 3,
            "error": "uo-link: broadcast timed out after 5s",
            "retryAt": log.iso(1.5),
        },
        step=3701,
        phase=1,
    )
    log.add(
        1.5,
        Kind.STEP_STATUS,
        {"from": "retrying", "to": "done", "module": "broadcast", "answer": {"delivered": 212}},
        step=3701,
        phase=1,
    )
    log.add(
        3,
        Kind.STEP_STATUS,
        {"from": "pending", "to": "done", "module": "spawner", "answer": {"spawned": 36}},
        step=3702,
        phase=1,
    )
    log.add(
        3.1,
        Kind.RESOURCE_RECORDED,
        {
            "resourceId": 901,
            "resourceType": "npc",
            "externalId": "0x0004F2A1",
            "ownership": "CREATED",
        },
        step=3702,
        phase=1,
    )
    log.add(
        3.2,
        Kind.RESOURCE_RECORDED,
        {
            "resourceId": 902,
            "resourceType": "region",
            "externalId": "Yew Crossroads",
            "ownership": "BORROWED",
        },
        step=3702,
        phase=1,
    )
    log.add(
        4,
        Kind.STEP_STATUS,
        {"from": "pending", "to": "done", "module": "spawner", "answer": {"spawned": 4}},
        step=3703,
        phase=1,
    )
    log.add(
        4.1,
        Kind.PHASE_COMPLETED,
        {"stepCount": 3, "byStatus": [{"status": "done", "count": 3}]},
        phase=1,
    )
    # Phase 2 waits for the boss, in Yew.
    log.add(
        4.2,
        Kind.PHASE_GATE,
        {
            "condition": "boss.spawned",
            "parameters": {"region": "Yew", "boss": "Lich Lord"},
            "deadline": log.iso(64.2),
        },
        phase=2,
    )
    log.add(
        31,
        Kind.CONDITION_EVALUATED,
        {
            "matched": False,
            "condition": "boss.spawned",
            "firing": "boss.spawned",
            "facts": {"region": "Britain", "boss": "Lich Lord"},
            "mismatch": "spawned in Britain, gate waits for Yew",
        },
        phase=2,
    )
    log.add(
        38,
        Kind.CONDITION_EVALUATED,
        {
            "matched": False,
            "condition": "boss.spawned",
            "firing": "boss.spawned",
            "facts": {"region": "Yew", "boss": "Ancient Wyrm"},
            "mismatch": "the Ancient Wyrm spawned, gate waits for the Lich Lord",
        },
        phase=2,
    )
    log.add(
        52,
        Kind.CONDITION_EVALUATED,
        {
            "matched": True,
            "condition": "boss.spawned",
            "firing": "boss.spawned",
            "facts": {"region": "Yew", "boss": "Lich Lord"},
        },
        phase=2,
    )
    log.add(52.01, Kind.PHASE_ADVANCED, {"via": "FIRING", "firing": "boss.spawned"}, phase=2)
    # Phase 2: the battle, against the run's caps.
    log.add(52.1, Kind.PHASE_ENTERED, {"stepIds": [3704, 3705, 3706]}, phase=2)
    log.add(
        53,
        Kind.STEP_REFUSED,
        {
            "refusal": "OVER_CAP",
            "switch": "events.caps.spawns.yew",
            "cap": "spawns",
            "limit": 40,
            "used": 40,
        },
        step=3704,
        phase=2,
    )
    log.add(
        53.2,
        Kind.RUN_HEALTH,
        {
            "from": "ok",
            "to": "degraded",
            "reason": "reinforcements refused: the spawns cap is used",
        },
    )
    log.add(
        60,
        Kind.RESOURCE_ORPHANED,
        {
            "resourceId": 901,
            "resourceType": "npc",
            "externalId": "0x0004F2A1",
            "reason": "killed by players; the module no longer sees it",
        },
        step=3702,
        phase=2,
    )
    log.add(
        75,
        Kind.STEP_PARKED,
        {
            "waitingFor": "a GM to hand the Lich Lord's crown to the winning guild",
            "reason": "rewards over 100 gold are handed out by a human",
        },
        step=3705,
        phase=2,
    )
    log.add(
        92,
        Kind.NOTE,
        {
            "text": "Asked the events team whether 37 should end early: run 38 is waiting for invasion:Yew.",
            "actor": "Iolo (GM)",
        },
    )
    return DemoRun(
        INVASION,
        "live",
        "holds invasion:Yew; a gate that waited for the boss in Yew; a step refused OVER_CAP",
        updated_at=log.at(53.2),
        lines=log.lines,
    )


def _blocked(start: datetime.datetime) -> DemoRun:
    log = _Log(start, marked=-1, event=12, version="3")
    blocked = {"blockingRunId": INVASION, "concurrencyKey": CONCURRENCY_KEY}
    log.add(0.02, Kind.RUN_BLOCKED, blocked)
    log.add(15, Kind.RUN_BLOCKED, blocked)
    return DemoRun(
        BLOCKED,
        "scheduled",
        "did not start: run 37 holds invasion:Yew (run.blocked)",
        updated_at=log.at(0.02),
        lines=log.lines,
    )


def _treasure_hunt(start: datetime.datetime) -> DemoRun:
    log = _Log(start, marked=-1, event=19, version="1")
    log.add(0.1, Kind.RUN_STATUS, {"from": "scheduled", "to": "live"})
    log.add(0.2, Kind.PHASE_ENTERED, {"stepIds": [3901, 3902]}, phase=1)
    resources = [
        (3901, 911, "item", "chest 0x40021A", "CREATED"),
        (3901, 912, "item", "chest 0x40021B", "CREATED"),
        (3902, 913, "npc", "Town Crier of Minoc", "BORROWED"),
        (3902, 914, "moongate", "moongate 0x4F2", "BORROWED"),
    ]
    for n, (step, resource_id, resource_type, external_id, ownership) in enumerate(resources):
        log.add(
            1 + n / 10,
            Kind.RESOURCE_RECORDED,
            {
                "resourceId": resource_id,
                "resourceType": resource_type,
                "externalId": external_id,
                "ownership": ownership,
            },
            step=step,
            phase=1,
        )
    log.add(
        40,
        Kind.NOTE,
        {"text": "Cancelled: the shard restarts at 21:00.", "actor": "Dupre (admin)"},
    )
    log.add(
        40.1,
        Kind.RUN_STATUS,
        {"from": "live", "to": "cancelled", "reason": "cancelled by an admin"},
    )
    # The cleanup: two chests come back, the moongate does not, the crier is gone.
    log.add(41, Kind.CLEANUP_REVERTED, {"group": "chests", "resourceIds": [911, 912]})
    log.add(
        41.5,
        Kind.RESOURCE_ORPHANED,
        {
            "resourceId": 913,
            "resourceType": "npc",
            "externalId": "Town Crier of Minoc",
            "reason": "deleted by a GM during the event",
        },
    )
    log.add(
        42,
        Kind.CLEANUP_FAILED,
        {
            "group": "moongate",
            "resourceIds": [914],
            "error": "uo-link: moongate 0x4F2 is locked by another event",
            "leftAs": "untouched",
            "attempt": 3,
        },
    )
    log.add(
        42.1,
        Kind.CLEANUP_SWEPT,
        {"checked": 4, "reverted": 2, "failed": 1, "orphaned": 1, "remaining": 1},
    )
    log.add(
        180,
        Kind.CLEANUP_RETRY,
        {"group": "moongate", "previousAttempts": 3, "actor": "Dupre (admin)"},
    )
    log.add(
        181,
        Kind.CLEANUP_FAILED,
        {
            "group": "moongate",
            "resourceIds": [914],
            "error": "uo-link: moongate 0x4F2 is locked by another event",
            "leftAs": "untouched",
            "attempt": 1,
        },
    )
    log.add(
        181.1,
        Kind.CLEANUP_SWEPT,
        {"checked": 1, "reverted": 0, "failed": 1, "orphaned": 0, "remaining": 1},
    )
    return DemoRun(
        TREASURE_HUNT,
        "cancelled",
        "its cleanup brought the chests back, but not the moongate",
        updated_at=log.at(181.1),
        ended_at=log.at(40.1),
        lines=log.lines,
    )


def _relay(start: datetime.datetime) -> DemoRun:
    log = _Log(start, marked=-1, event=23, version="2")
    log.add(0.1, Kind.RUN_STATUS, {"from": "scheduled", "to": "live"})
    log.add(0.2, Kind.PHASE_ENTERED, {"stepIds": [4001]}, phase=1)
    for attempt in (1, 2):
        log.add(
            attempt * 2,
            Kind.STEP_RETRY,
            {
                "attempt": attempt,
                "maxAttempts": 3,
                "error": "uo-link: connection refused by the lighthouse shard",
                "retryAt": log.iso(attempt * 2 + 2),
            },
            step=4001,
            phase=1,
        )
    log.add(
        6,
        Kind.STEP_STATUS,
        {
            "from": "retrying",
            "to": "failed",
            "module": "relay",
            "answer": {"error": "connection refused", "attempts": 3},
        },
        step=4001,
        phase=1,
    )
    log.add(6.05, Kind.RUN_HEALTH, {"from": "ok", "to": "failing", "reason": "3 of 3 attempts failed"})
    log.add(
        6.1,
        Kind.PHASE_COMPLETED,
        {"stepCount": 1, "byStatus": [{"status": "failed", "count": 1}]},
        phase=1,
    )
    log.add(6.2, Kind.RUN_STATUS, {"from": "live", "to": "failed", "reason": "step 4001 failed"})
    log.add(
        6.5,
        Kind.CLEANUP_SWEPT,
        {"checked": 0, "reverted": 0, "failed": 0, "orphaned": 0, "remaining": 0},
    )
    return DemoRun(
        RELAY,
        "failed",
        "a step retried twice, then gave up",
        updated_at=log.at(6.2),
        ended_at=log.at(6.2),
        lines=log.lines,
    )
