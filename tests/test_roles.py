"""Roles: reader, writer and admin tokens, two at once per role, open reads and writes, admin never open."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings, SettingsError

from .conftest import Api, Backend

READER, READER_NEXT = "reader-token-aaaaaaaa", "reader-token-next-aaaa"
WRITER, WRITER_NEXT = "writer-token-bbbbbbbb", "writer-token-next-bbbb"
ADMIN, ADMIN_NEXT = "admin-token-cccccccccc", "admin-token-next-cccc"
ALL_TOKENS = (READER, READER_NEXT, WRITER, WRITER_NEXT, ADMIN, ADMIN_NEXT)

READ = "{ runLog(runId: 1) { nodes { id } } }"
WRITE = 'mutation { writeRunLog(runId: 1, kind: "note", detail: {text: "by role"}) }'
PRUNE = 'mutation { pruneTerminal(before: "2026-01-01T00:00:00Z") }'


@pytest.fixture
def closed(make_api: Callable[..., Api]) -> Api:
    """Every role needs its token; each role has two, as during a rotation."""
    return make_api(
        reader_tokens=(READER, READER_NEXT),
        writer_tokens=(WRITER, WRITER_NEXT),
        admin_tokens=(ADMIN, ADMIN_NEXT),
    )


def outcome(body: dict[str, Any]) -> Any:
    """What a caller got: the field's value, or the error code."""
    if "errors" in body:
        (error,) = body["errors"]
        return error["extensions"]["code"]
    (value,) = body["data"].values()
    return value if not isinstance(value, dict) else "read"


@pytest.mark.parametrize(
    ("token", "read", "write", "prune"),
    [
        (None, "UNAUTHENTICATED", False, "UNAUTHENTICATED"),
        ("not-a-token-of-anyone", "UNAUTHENTICATED", False, "UNAUTHENTICATED"),
        (READER, "read", False, "FORBIDDEN"),
        (READER_NEXT, "read", False, "FORBIDDEN"),
        (WRITER, "FORBIDDEN", True, "FORBIDDEN"),
        (WRITER_NEXT, "FORBIDDEN", True, "FORBIDDEN"),
        (ADMIN, "read", True, 0),
        (ADMIN_NEXT, "read", True, 0),
    ],
)
def test_each_role_reaches_what_it_may_and_no_further(
    tables: Backend, closed: Api, token: str | None, read: Any, write: Any, prune: Any
) -> None:
    assert outcome(closed.post(READ, token=token)) == read
    assert outcome(closed.post(WRITE, token=token)) is write
    assert outcome(closed.post(PRUNE, token=token)) == prune
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == (1 if write else 0)


def test_a_refused_read_says_who_the_caller_would_have_to_be(closed: Api) -> None:
    (error,) = closed.post(READ)["errors"]
    assert error["message"] == (
        "runLog is refused: the caller is not a reader "
        "(send `Authorization: Bearer <token>` with a reader's token)"
    )
    assert error["path"] == ["runLog"]
    (error,) = closed.post(READ, token=WRITER)["errors"]
    assert error["message"] == "runLog is refused: the caller is not a reader"
    assert error["extensions"] == {"code": "FORBIDDEN"}


def test_a_forbidden_write_answers_false_and_logs_the_whole_line(
    tables: Backend, closed: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gql"):
        body = closed.post(WRITE, token=READER)
    assert body["data"] == {"writeRunLog": False} and "errors" not in body
    assert [e["reason"] for e in body["extensions"]["runlog"]["notStored"]] == ["FORBIDDEN"]
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith("run log line not stored: the caller is not a writer; request ")
    assert '"detail": {"text": "by role"}' in message and '"kind": "note"' in message
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 0


def test_a_rotation_retires_the_old_token(tables: Backend, make_api: Callable[..., Api]) -> None:
    # Configure old and new, move the callers, then drop the old one.
    during = make_api(reader_tokens=(READER, READER_NEXT), writer_tokens=(WRITER, WRITER_NEXT))
    assert outcome(during.post(READ, token=READER)) == "read"
    assert outcome(during.post(READ, token=READER_NEXT)) == "read"
    assert outcome(during.post(WRITE, token=WRITER)) is True
    assert outcome(during.post(WRITE, token=WRITER_NEXT)) is True
    after = make_api(reader_tokens=(READER_NEXT,), writer_tokens=(WRITER_NEXT,), admin_tokens=(ADMIN_NEXT,))
    assert outcome(after.post(READ, token=READER)) == "UNAUTHENTICATED"
    assert outcome(after.post(READ, token=READER_NEXT)) == "read"
    assert outcome(after.post(WRITE, token=WRITER)) is False
    assert outcome(after.post(WRITE, token=WRITER_NEXT)) is True
    assert outcome(after.post(PRUNE, token=ADMIN)) == "UNAUTHENTICATED"
    assert outcome(after.post(PRUNE, token=ADMIN_NEXT)) == 0
    assert tables.scalar("SELECT COUNT(*) FROM event_run_log") == 3


@pytest.mark.parametrize("token", [None, "not-a-token-of-anyone", WRITER, READER])
def test_with_no_reader_or_writer_token_reads_and_writes_are_open_but_admin_is_not(
    make_api: Callable[..., Api], token: str | None
) -> None:
    api = make_api(admin_tokens=(ADMIN,))
    assert outcome(api.post(READ, token=token)) == "read"
    assert outcome(api.post(WRITE, token=token)) is True
    assert outcome(api.post(PRUNE, token=token)) in ("UNAUTHENTICATED", "FORBIDDEN")


def test_open_reads_do_not_open_writes_and_the_other_way_round(make_api: Callable[..., Api]) -> None:
    reads_open = make_api(writer_tokens=(WRITER,))
    assert outcome(reads_open.post(READ)) == "read"
    assert outcome(reads_open.post(WRITE)) is False
    assert outcome(reads_open.post(WRITE, token=WRITER)) is True
    writes_open = make_api(reader_tokens=(READER,))
    assert outcome(writes_open.post(READ)) == "UNAUTHENTICATED"
    assert outcome(writes_open.post(READ, token=READER)) == "read"
    assert outcome(writes_open.post(WRITE)) is True


def test_with_no_admin_token_no_one_is_an_admin(make_api: Callable[..., Api]) -> None:
    api = make_api(admin_tokens=(), reader_tokens=(READER,), writer_tokens=(WRITER,))
    for token in (None, "", READER, WRITER, ADMIN):
        assert outcome(api.post(PRUNE, token=token)) in ("UNAUTHENTICATED", "FORBIDDEN")


@pytest.mark.parametrize(
    ("header", "reads"),
    [
        (f"Bearer {READER}", True),
        (f"bearer {READER}", True),
        (f"  Bearer   {READER}  ", True),
        (f"Basic {READER}", False),
        (f"Token {READER}", False),
        (READER, False),
        ("Bearer", False),
        (f"Bearer {READER}x", False),
        (f"Bearer {READER[:-1]}", False),
        ("Bearer \u00e9t\u00e9-token-aaaaaaaaaa", False),
    ],
)
def test_only_a_bearer_header_with_an_exact_token_counts(
    make_api: Callable[..., Api], header: str, reads: bool
) -> None:
    api = make_api(reader_tokens=(READER,))
    # As bytes: a header is not always ASCII on the wire.
    sent = {"Authorization": header.encode("latin-1")}
    response = api.client.post("/graphql", json={"query": READ}, headers=sent)
    assert response.status_code == 200
    assert ("errors" not in response.json()) is reads


def start_up_log(settings: Settings, caplog: pytest.LogCaptureFixture) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gql"), TestClient(create_app(settings)):
        pass
    return caplog.text


def test_the_start_up_log_says_plainly_what_is_open(
    tables: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    text = start_up_log(tables.settings(admin_tokens=()), caplog)
    assert "reads are OPEN: no RUNLOG_READER_TOKEN is set, anyone can call runLog" in text
    assert "writes are OPEN: no RUNLOG_WRITER_TOKEN is set, anyone can call writeRunLog" in text
    assert "no RUNLOG_ADMIN_TOKEN is set: no one is an admin, pruneTerminal is refused" in text
    text = start_up_log(
        tables.settings(reader_tokens=(READER,), writer_tokens=(WRITER,), admin_tokens=(ADMIN,)), caplog
    )
    assert "OPEN" not in text and "no one is an admin" not in text
    assert not any(token in text for token in ALL_TOKENS)


def test_no_token_is_ever_logged(closed: Api, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        for token in (*ALL_TOKENS, "guessed-token-zzzzzzzz"):
            for query in (READ, WRITE, PRUNE, "{ nope }"):
                closed.post(query, token=token)
    assert caplog.records, "the requests were logged at all"
    assert not any(token in caplog.text for token in (*ALL_TOKENS, "guessed-token-zzzzzzzz"))


def test_role_tokens_and_their_next_are_read_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "RUNLOG_READER_TOKEN": READER,
            "RUNLOG_READER_TOKEN_NEXT": READER_NEXT,
            "RUNLOG_WRITER_TOKEN_NEXT": WRITER_NEXT,
            "RUNLOG_ADMIN_TOKEN": ADMIN,
        }
    )
    assert settings.reader_tokens == (READER, READER_NEXT)
    assert settings.writer_tokens == (WRITER_NEXT,)
    assert settings.admin_tokens == (ADMIN,)


@pytest.mark.parametrize("value", ["short", "has a space in it ok", "\u00e9t\u00e9-token-aaaaaaaaaa"])
def test_a_token_that_could_never_match_stops_start_up(value: str) -> None:
    with pytest.raises(SettingsError, match="RUNLOG_WRITER_TOKEN"):
        Settings.from_env({"RUNLOG_WRITER_TOKEN": value})
