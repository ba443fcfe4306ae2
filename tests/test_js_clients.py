"""The clients a frontend reaches for, each with its defaults, against a real server.

Starts `python -m gql serve --demo` on a free port (its defaults: the
embedded SQLite, open reads and writes) and runs the Node scripts in
tests/clients/ against it: the GraphQL over HTTP specification's own audit
(`graphql-http`'s `serverAudits`), Apollo Client 4's InMemoryCache with the
generated `possibleTypes`, urql (`@urql/core`), and `graphql-ws`'s client on
the tail. Each prints one JSON report that the test judges. The packages are
pinned in tests/clients/package-lock.json (`npm ci --prefix tests/clients`).

`.ci/run` installs them and sets RUNLOG_TEST_REQUIRE_CLIENTS=1, so that in CI
a missing node or node_modules fails these tests; elsewhere it skips them
with the command that installs them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gql.domain import demo_runs

from .conftest import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "clients"
REQUIRE = os.environ.get("RUNLOG_TEST_REQUIRE_CLIENTS") == "1"
RUN = str(demo_runs.BLOCKED)  # a demo run with a few lines of several kinds


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (apt-get install -y nodejs npm)"
    if not (SCRIPTS / "node_modules" / "graphql-http").is_dir():
        return "the client packages are not installed (npm ci --prefix tests/clients)"
    return None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service as `python -m gql serve --demo` starts it: its /graphql URL."""
    missing = _missing()
    if missing is not None:
        if REQUIRE:
            pytest.fail(f"RUNLOG_TEST_REQUIRE_CLIENTS=1, but {missing}")
        pytest.skip(missing)
    database = tmp_path_factory.mktemp("clients") / "runlog.db"
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--demo", "--port", str(port)],
        env={
            **os.environ,
            "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "RUNLOG_LOG_LEVEL": "WARNING",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base, server)
        yield f"{base}/graphql"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def run_node(script: str, *args: str, node_options: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Run tests/clients/`script`; its stdout's JSON lines."""
    done = subprocess.run(
        [shutil.which("node") or "node", *node_options, str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=SCRIPTS,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_the_graphql_over_http_audit_finds_nothing_to_warn_of(served: str) -> None:
    results = run_node("audit.mjs", served)
    assert len(results) > 50  # every audit ran
    failed = [r for r in results if r["status"] != "ok"]
    assert failed == [], json.dumps(failed, indent=1)


def test_apollo_clients_cache_with_the_generated_possible_types_reads_both_ways_without_a_warning(
    served: str,
) -> None:
    # The development build, as a frontend's dev server runs it: only it warns.
    (seen,) = run_node("apollo.mjs", served, RUN, node_options=("--conditions=development",))
    # What a default cache costs, and what the generated possibleTypes saves.
    assert seen["withoutPossibleTypes"] > 0
    assert seen["warnings"] == []
    first, older, newer = seen["firstIds"], seen["afterOlder"], seen["afterNewer"]
    assert len(first) == 2 and older[:2] == first and len(older) == 4
    assert seen["written"] is True
    assert newer[1:] == older and newer[0] not in older  # the note, in front
    assert seen["newest"] == {"__typename": "NoteDetail", "text": "written from Apollo", "actor": "apollo"}
    assert seen["startCursorIsNewest"] is True


def test_urql_with_its_defaults_reads_by_get_and_post_and_refetches_after_a_write_it_is_told_of(
    served: str,
) -> None:
    (seen,) = run_node("urql.mjs", served, RUN)
    assert seen["pageError"] is None and seen["pageLines"] > 0
    assert seen["pageMethod"] == "GET"  # short: urql's preferGetMethod
    assert seen["fullError"] is None and "RunBlockedDetail" in seen["fullTypenames"]
    assert seen["fullMethod"] == "POST"  # past urql's URL limit with every fragment
    notes = seen["notes"]
    # writeRunLog answers a Boolean: urql's document cache cannot know a page
    # changed, until the mutation names RunLogPage (docs/clients.md).
    assert notes["staleAfterWrite"] == notes["before"]
    assert notes["freshAfterWrite"] == notes["before"] + 2


def test_graphql_ws_client_follows_the_tail_from_a_pages_start_cursor(served: str) -> None:
    (seen,) = run_node("ws.mjs", served, RUN)
    assert seen["written"] is True
    assert [line["kind"] for line in seen["seen"]] == ["NOTE"]
    assert seen["seen"][0]["text"].startswith("tailed ") and seen["seen"][0]["hasCursor"]
