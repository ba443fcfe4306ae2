"""The service on a primary and a read replica that `scripts/cluster start replica` starts.

Pages read from the replica (RUNLOG_READ_DATABASE_URL), `fresh: true` sees a
line just written, and a replica that is stopped, behind or killed is fallen
back from: the page comes from the primary, never stale without a word.

A line inserted on the replica alone (`sql_log_bin=0`) is the tests' marker:
a page that holds it was read on the replica, one that lacks it on the primary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings
from gql.store.db import metadata

from .conftest import MARIADB_URL

ROOT = Path(__file__).resolve().parent.parent
# scripts/cluster's own default, a fixed path on purpose (the script is run as root).
CLUSTER_DIR = Path(os.environ.get("RUNLOG_CLUSTER_DIR", "/tmp/runlog-cluster"))  # noqa: S108
pytestmark = [pytest.mark.mariadb, pytest.mark.cluster]

PAGE = (
    "query($runId: ID!, $fresh: Boolean) { runLog(runId: $runId, fresh: $fresh) "
    "{ nodes { detail { ... on NoteDetail { text } } } } }"
)
WRITE = (
    'mutation($runId: ID!, $text: String!) { writeRunLog(runId: $runId, kind: "note", '
    "detail: {text: $text}) }"
)


def _cluster(command: str) -> str:
    done = subprocess.run(
        [str(ROOT / "scripts" / "cluster"), command, "replica"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Topology:
    def __init__(self, primary: sa.URL, replica: sa.URL) -> None:
        self.primary = primary
        self.replica = replica

    def sql(self, url: sa.URL, *statements: str) -> list[tuple[Any, ...]]:
        conn = pymysql.connect(
            host="127.0.0.1", port=url.port, user="root", database=url.database, autocommit=True
        )
        try:
            rows: list[tuple[Any, ...]] = []
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
                    rows = list(cur.fetchall())
            return rows
        finally:
            conn.close()

    def mark(self, run_id: int, text: str) -> None:
        """A line on the replica alone: not logged, so the primary never has it.

        Its id is far past the primary's, whose lines replicate with theirs:
        one taken here would stop replication with a duplicate key.
        """
        self.sql(
            self.replica,
            "SET SESSION sql_log_bin = 0",
            "INSERT INTO event_run_log (id, run_id, kind, detail, at) "
            f"VALUES ({10**9 + run_id}, {run_id}, 'note', '{{\"text\": \"{text}\"}}', "
            "UTC_TIMESTAMP(3) - INTERVAL 1 HOUR)",
        )

    def caught_up(self) -> None:
        """Wait until the replica replicates and has all the primary has."""
        self.sql(self.replica, "START SLAVE")
        position = self.sql(self.primary, "SELECT @@gtid_binlog_pos")[0][0]
        assert self.sql(self.replica, f"SELECT MASTER_GTID_WAIT('{position}', 30)")[0][0] == 0

    def settings(self, **overrides: Any) -> Settings:
        return replace(
            Settings(
                database_url=self.primary.render_as_string(hide_password=False),
                read_database_url=self.replica.render_as_string(hide_password=False),
                read_check_interval=0.2,
            ),
            **overrides,
        )


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    primary, replica = (sa.make_url(line) for line in _cluster("start").split())
    database = f"runlog_replica_{uuid.uuid4().hex[:8]}"
    found = Topology(primary.set(database=database), replica.set(database=database))
    found.sql(primary, f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
    engine = sa.create_engine(found.primary.set(drivername="mysql+pymysql"))
    metadata.create_all(engine)
    engine.dispose()
    found.caught_up()
    try:
        yield found
    finally:
        _cluster("stop")


@pytest.fixture
def cluster(topology: Topology) -> Topology:
    """The topology, replicating and caught up (a test before may have stopped or delayed it)."""
    topology.caught_up()
    return topology


def _texts(client: TestClient, run_id: int, fresh: bool | None = None) -> list[str]:
    body = client.post(
        "/graphql", json={"query": PAGE, "variables": {"runId": run_id, "fresh": fresh}}
    ).json()
    assert "errors" not in body, body
    return [node["detail"]["text"] for node in body["data"]["runLog"]["nodes"]]


def _write(client: TestClient, run_id: int, text: str) -> None:
    body = client.post("/graphql", json={"query": WRITE, "variables": {"runId": run_id, "text": text}}).json()
    assert body == {"data": {"writeRunLog": True}}, body


def _replica_state(client: TestClient, wanted: str) -> dict[str, Any]:
    """/healthz's account of the replica, once it is in the `wanted` state."""
    deadline = time.monotonic() + 30
    while True:
        body = client.get("/healthz").json()
        state: dict[str, Any] = body["replica"]
        if state["state"] == wanted:
            assert body["status"] == "ok", body  # the primary serves: ready all the same
            return state
        assert time.monotonic() < deadline, f"the replica did not become {wanted!r}: {body}"
        time.sleep(0.1)


def test_a_clusters_node_keeps_its_temporary_files_out_of_the_test_servers_tmpdir(cluster: Topology) -> None:
    """A mariadbd deletes every #sql* file in its tmpdir as it starts: in a shared /tmp, the
    temporary tables of queries running on the tests' MariaDB meanwhile (a CI run failed so)."""
    node_dirs = {cluster.sql(url, "SELECT @@tmpdir")[0][0] for url in (cluster.primary, cluster.replica)}
    tests_tmpdir = Topology(MARIADB_URL, MARIADB_URL).sql(MARIADB_URL, "SELECT @@tmpdir")[0][0]
    assert tests_tmpdir not in node_dirs
    assert len(node_dirs) == 2


def test_pages_are_read_from_the_replica(cluster: Topology) -> None:
    cluster.mark(101, "only on the replica")
    with TestClient(create_app(cluster.settings())) as client:
        assert _replica_state(client, "in use")["reason"] is None
        assert _texts(client, 101) == ["only on the replica"]


def test_fresh_waits_for_the_replica_to_have_the_line_just_written(cluster: Topology) -> None:
    cluster.mark(102, "marker")
    # No look at the replica during the test: it stays in use while its SQL thread is stopped.
    with TestClient(create_app(cluster.settings(read_check_interval=60, read_max_lag=20))) as client:
        cluster.sql(cluster.replica, "STOP SLAVE SQL_THREAD")
        _write(client, 102, "just written")
        assert _texts(client, 102) == ["marker"]  # the replica trails: the line is not there yet
        starter = threading.Timer(1.0, cluster.sql, (cluster.replica, "START SLAVE SQL_THREAD"))
        starter.start()
        try:
            # Read on the replica (the marker) once it has the line.
            assert _texts(client, 102, fresh=True) == ["just written", "marker"]
        finally:
            starter.join()


def test_fresh_reads_the_primary_when_the_replica_does_not_catch_up(cluster: Topology) -> None:
    cluster.mark(103, "marker")
    with TestClient(create_app(cluster.settings(read_check_interval=60, read_max_lag=0.5))) as client:
        cluster.sql(cluster.replica, "STOP SLAVE SQL_THREAD")
        _write(client, 103, "just written")
        assert _texts(client, 103) == ["marker"]
        assert _texts(client, 103, fresh=True) == ["just written"]  # the primary's page


def test_a_line_the_replica_lacked_is_found_reading_newer_lines_from_its_page(cluster: Topology) -> None:
    """A page read on a replica that trails: its startCursor, passed as `before`, still finds the line."""
    # A short write deadline makes the late window short (3.05 s): a line
    # stamped longer ago than that has committed on the primary, and only
    # the lag a replica page may have keeps it in the window of its cursors.
    settings = cluster.settings(read_check_interval=60, read_max_lag=20, write_timeout=0.05)
    with TestClient(create_app(settings)) as client:
        cluster.sql(cluster.replica, "STOP SLAVE SQL_THREAD")
        cluster.sql(
            cluster.primary,
            "INSERT INTO event_run_log (run_id, kind, detail, at) "
            "VALUES (107, 'note', '{\"text\": \"missing on the replica\"}', UTC_TIMESTAMP(3))",
        )
        time.sleep(3.5)  # the line is older than the late window now
        cluster.sql(
            cluster.replica,
            "SET SESSION sql_log_bin = 0",
            "INSERT INTO event_run_log (id, run_id, kind, detail, at) "
            f"VALUES ({10**9 + 107}, 107, 'note', '{{\"text\": \"marker\"}}', UTC_TIMESTAMP(3))",
        )
        body = client.post(
            "/graphql",
            json={
                "query": "query($runId: ID!) { runLog(runId: $runId) { nodes { detail "
                "{ ... on NoteDetail { text } } } pageInfo { startCursor } } }",
                "variables": {"runId": 107},
            },
        ).json()
        page = body["data"]["runLog"]
        assert [n["detail"]["text"] for n in page["nodes"]] == ["marker"]  # read on the trailing replica
        newer = client.post(
            "/graphql",
            json={
                "query": "query($runId: ID!, $before: String) { runLog(runId: $runId, before: $before) "
                "{ nodes { detail { ... on NoteDetail { text } } } } }",
                "variables": {"runId": 107, "before": page["pageInfo"]["startCursor"]},
            },
        ).json()
        assert [n["detail"]["text"] for n in newer["data"]["runLog"]["nodes"]] == ["missing on the replica"]


def test_a_stopped_replica_is_fallen_back_from_and_used_again_once_it_runs(
    cluster: Topology, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.mark(104, "marker")
    with TestClient(create_app(cluster.settings())) as client:
        _replica_state(client, "in use")
        cluster.sql(cluster.replica, "STOP SLAVE")
        state = _replica_state(client, "fallen back")
        assert "Slave_SQL_Running: No" in state["reason"], state
        ready = client.get("/readyz")  # the primary serves: ready, and says the replica is not used
        assert ready.status_code == 200, ready.text
        assert ready.json()["replica"]["state"] == "fallen back", ready.text
        _write(client, 104, "written while the replica is stopped")
        assert _texts(client, 104) == ["written while the replica is stopped"]
        cluster.sql(cluster.replica, "START SLAVE")
        _replica_state(client, "in use")
        assert _texts(client, 104, fresh=True) == ["written while the replica is stopped", "marker"]
    # Each switch is logged, with why.
    switches = [
        r.getMessage() for r in caplog.records if r.name == "gql.store.replica" and r.levelname == "WARNING"
    ]
    assert any("read from the primary: the replica does not apply changes" in m for m in switches), switches
    assert any("read from it again" in m for m in switches), switches


def test_a_replica_behind_more_than_the_lag_allowed_is_fallen_back_from(cluster: Topology) -> None:
    cluster.mark(105, "marker")
    cluster.sql(cluster.replica, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY = 4", "START SLAVE")
    try:
        with TestClient(create_app(cluster.settings(read_max_lag=1))) as client:
            _replica_state(client, "in use")
            _write(client, 105, "written while the replica is behind")
            state = _replica_state(client, "fallen back")
            assert "behind its primary, more than RUNLOG_READ_MAX_LAG" in state["reason"], state
            assert _texts(client, 105) == ["written while the replica is behind"]
    finally:
        cluster.sql(cluster.replica, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY = 0", "START SLAVE")


def _restart_replica() -> None:
    # As scripts/cluster starts a node (setsid, so it outlives the test), but
    # without the init file: its users and database are there already, and
    # statements of its own would give the replica GTIDs its primary never sent.
    subprocess.run(
        [
            "/usr/bin/setsid",
            "--fork",
            "/usr/sbin/mariadbd",
            f"--defaults-file={CLUSTER_DIR / 'replica-2' / 'my.cnf'}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )


def test_a_killed_replica_is_fallen_back_from_at_once(cluster: Topology) -> None:
    cluster.mark(106, "marker")
    pid_file = CLUSTER_DIR / "replica-2" / "mariadbd.pid"
    try:
        # No look during the test: the page's own read finds the replica gone.
        with TestClient(create_app(cluster.settings(read_check_interval=60))) as client:
            assert _texts(client, 106) == ["marker"]
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            _write(client, 106, "written after the replica died")
            assert _texts(client, 106) == ["written after the replica died"]
            state = client.get("/healthz").json()["replica"]
            assert state["state"] == "fallen back", state
            assert "failed a read" in state["reason"], state
    finally:
        deadline = time.monotonic() + 30
        while True:
            try:
                os.kill(int(pid_file.read_text()), 0)
            except (ProcessLookupError, FileNotFoundError, ValueError):
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pid_file.unlink(missing_ok=True)
        _restart_replica()
        deadline = time.monotonic() + 60
        while True:
            try:
                cluster.sql(cluster.replica, "SELECT 1")
                break
            except pymysql.MySQLError:
                assert time.monotonic() < deadline, "the replica did not come back"
                time.sleep(0.2)
