"""Every operation that takes a run id reads it by one rule (gql/ids.py), on both databases.

For each spelling, every operation agrees: it names run 7 everywhere or is
refused everywhere, saying what an id is. Pages, long polls, the live tail,
writes (`runId` and `stepId`) and a detail's `blockingRunId` are tried;
`pruneTerminal` takes no run id.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api, Backend

RUN = 7
ACCEPTED: list[Any] = ["7", "007", "00000000007", "0" * 500 + "7", RUN]
REFUSED: list[Any] = [
    "+7",
    " 7",
    "7 ",
    "-1",
    "0",
    "000",
    "",
    "7.0",
    "1e3",
    "0x7",
    "7_0",
    "\u0667",  # ARABIC-INDIC DIGIT SEVEN: a digit, but not a decimal one of ours
    "2147483648",
    str(2**63),
    2**63,
    -7,
]

PAGE = """query P($runId: ID!, $before: String, $wait: Int) {
  runLog(runId: $runId, before: $before, wait: $wait) {
    nodes { runId stepId cursor detail { ... on NoteDetail { text } } }
  }
}"""
WRITE = """mutation W($runId: ID!, $stepId: ID, $kind: String!, $detail: JSON) {
  writeRunLog(runId: $runId, stepId: $stepId, kind: $kind, detail: $detail)
}"""
BLOCKED = """query B($runId: ID!) {
  runLog(runId: $runId) { nodes { detail { ... on RunBlockedDetail { blockingRunId blockingRun { id } } } } }
}"""
TAIL = """subscription T($runId: ID!, $since: String) {
  runLogTail(runId: $runId, since: $since) { runId detail { ... on NoteDetail { text } } }
}"""


def written(api: Api, run_id: Any, text: str, step_id: Any = None) -> bool:
    body = api.post(WRITE, {"runId": run_id, "stepId": step_id, "kind": "note", "detail": {"text": text}})
    assert "errors" not in body, body  # a write never answers with an error
    answer: bool = body["data"]["writeRunLog"]
    return answer


def refusal(body: dict[str, Any]) -> str:
    assert "data" not in body or body["data"] is None, body
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    message: str = error["message"]
    return message


def tail_first(api: Api, run_id: Any, since: str) -> dict[str, Any]:
    """The tail's first message: a line (`next`) or the operation's refusal (`error`)."""
    with api.client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": {}})
        assert ws.receive_json() == {"type": "connection_ack"}
        ws.send_json(
            {
                "type": "subscribe",
                "id": "1",
                "payload": {"query": TAIL, "variables": {"runId": run_id, "since": since}},
            }
        )
        message: dict[str, Any] = ws.receive_json()
        if message["type"] == "next":
            ws.send_json({"type": "complete", "id": "1"})
        return message


@pytest.fixture
def older_cursor(tables: Backend, api: Api) -> str:
    """Two notes of run 7, written with the plain id; the older one's cursor."""
    tables.add_run(RUN, "running", None, "2026-01-01 00:00:00")
    assert written(api, RUN, "older")
    older = api.post(PAGE, {"runId": RUN})["data"]["runLog"]["nodes"][0]["cursor"]
    assert written(api, RUN, "newer")
    cursor: str = older
    return cursor


@pytest.mark.parametrize("spelling", ACCEPTED, ids=repr)
def test_a_spelling_accepted_names_the_same_run_in_every_operation(
    tables: Backend, api: Api, older_cursor: str, spelling: Any
) -> None:
    page = api.post(PAGE, {"runId": spelling})
    assert [n["detail"]["text"] for n in page["data"]["runLog"]["nodes"]] == ["newer", "older"]

    poll = api.post(PAGE, {"runId": spelling, "before": older_cursor, "wait": 30})
    assert [n["detail"]["text"] for n in poll["data"]["runLog"]["nodes"]] == ["newer"]

    message = tail_first(api, spelling, older_cursor)
    assert message["type"] == "next", message
    assert message["payload"]["data"]["runLogTail"] == {"runId": "7", "detail": {"text": "newer"}}

    assert written(api, spelling, "as run", step_id=spelling)
    blocked = {"blockingRunId": spelling, "concurrencyKey": "k"}
    body = api.post(WRITE, {"runId": 8, "kind": "run.blocked", "detail": blocked})
    assert body == {"data": {"writeRunLog": True}}, body

    rows = tables.rows("SELECT run_id, step_id FROM event_run_log WHERE run_id != 8 ORDER BY id")
    assert [(r.run_id, r.step_id) for r in rows] == [(7, None), (7, None), (7, 7)]
    (line,) = api.post(BLOCKED, {"runId": 8})["data"]["runLog"]["nodes"]
    assert line["detail"]["blockingRun"] == {"id": "7"}  # the detail's id names run 7 too


@pytest.mark.parametrize("spelling", REFUSED, ids=repr)
def test_a_spelling_refused_is_refused_by_every_operation_saying_what_an_id_is(
    tables: Backend, api: Api, older_cursor: str, spelling: Any
) -> None:
    says = "must be a positive integer up to 2147483647, in decimal digits"
    assert f"runId {says}" in refusal(api.post(PAGE, {"runId": spelling}))
    assert f"runId {says}" in refusal(api.post(PAGE, {"runId": spelling, "before": older_cursor, "wait": 30}))

    message = tail_first(api, spelling, older_cursor)
    assert message["type"] == "error", message
    assert f"runId {says}" in message["payload"][0]["message"]

    assert written(api, spelling, "refused") is False
    assert written(api, RUN, "refused", step_id=spelling) is False
    blocked = {"blockingRunId": spelling, "concurrencyKey": "k"}
    body = api.post(WRITE, {"runId": 8, "kind": "run.blocked", "detail": blocked})
    assert body["data"] == {"writeRunLog": False} and "errors" not in body
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 2  # the two the fixture wrote
