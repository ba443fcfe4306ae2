"""One valid detail per kind, as a writer would send it."""

from __future__ import annotations

from typing import Any

from gql.kinds import Kind

EXAMPLES: dict[Kind, dict[str, Any]] = {
    Kind.RUN_CREATED: {"eventId": 12, "eventVersion": "3", "scheduledFor": "2026-06-01T18:00:00Z"},
    Kind.RUN_STATUS: {"from": "scheduled", "to": "live"},
    Kind.PHASE_ENTERED: {"stepIds": [101, 102]},
    Kind.STEP_STATUS: {"from": "pending", "to": "done", "module": "spawn", "answer": {"ok": True}},
    Kind.NOTE: {"text": "paused for the server restart", "actor": "gm.alice"},
    Kind.RUN_BLOCKED: {"blockingRunId": 37, "concurrencyKey": "invasion:Yew"},
    Kind.RUN_HEALTH: {"from": "ok", "to": "degraded", "reason": "module timeouts"},
    Kind.STEP_RETRY: {"attempt": 2, "maxAttempts": 5, "error": "timeout", "retryAt": None},
    Kind.STEP_PARKED: {"waitingFor": "a GM to confirm the reward"},
    Kind.PHASE_COMPLETED: {"stepCount": 3, "byStatus": [{"status": "done", "count": 3}]},
    Kind.PHASE_GATE: {
        "condition": "boss.spawned",
        "parameters": {"region": "Yew"},
        "deadline": "2026-06-01T19:00:00Z",
    },
    Kind.CONDITION_EVALUATED: {
        "matched": False,
        "condition": "boss.spawned",
        "firing": "boss.spawned",
        "facts": {"region": "Britain"},
        "mismatch": "spawned in Britain, the gate waits for Yew",
    },
    Kind.PHASE_ADVANCED: {"via": "FIRING", "firing": "boss.spawned"},
    Kind.RUN_BUDGET: {"caps": [{"cap": "spawns", "limit": 40, "switch": "events.spawns.small"}]},
    Kind.STEP_REFUSED: {"refusal": "OVER_CAP", "cap": "spawns", "limit": 40, "used": 40},
    Kind.VERSION_VERIFIED: {"version": "3", "dryRunId": 77},
    Kind.RESOURCE_RECORDED: {
        "resourceId": 5,
        "resourceType": "npc",
        "externalId": "0x4001",
        "ownership": "CREATED",
    },
    Kind.RESOURCE_ORPHANED: {"resourceId": 5, "resourceType": "npc", "externalId": "0x4001"},
    Kind.CLEANUP_REVERTED: {"group": "spawns", "resourceIds": [5, 6]},
    Kind.CLEANUP_FAILED: {
        "group": "decorations",
        "resourceIds": [7],
        "error": "item is in a player's backpack",
        "leftAs": "untouched",
        "attempt": 1,
    },
    Kind.CLEANUP_SWEPT: {"checked": 3, "reverted": 2, "failed": 1, "orphaned": 0, "remaining": 1},
    Kind.CLEANUP_RETRY: {"group": "decorations", "previousAttempts": 3, "actor": "gm.bob"},
}
