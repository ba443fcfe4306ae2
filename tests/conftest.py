"""Every behaviour test runs once per backend: the embedded SQLite and a real MariaDB.

What the database does not change runs on SQLite alone, marked `sqlite_alone`: a
server's edge (its logs, headers, origins and connection limits), a request's limits
and the caches (tests/test_bounded.py).

MariaDB is found at RUNLOG_TEST_MARIADB_URL (default root@127.0.0.1:3306); the
suite creates a database of its own there and drops it at the end. With
RUNLOG_TEST_REQUIRE_MARIADB=1 (as `.ci/run` sets) an unreachable MariaDB fails
the MariaDB half. Without it, on a laptop with no MariaDB, the MariaDB half is
deselected and the run ends with a loud banner saying so.
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pymysql
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from gql.edge.app import create_app
from gql.settings import Settings
from gql.store.db import create_engine, metadata
from gql.store.words import fold_log

from . import local

MARIADB_URL = sa.make_url(os.environ.get("RUNLOG_TEST_MARIADB_URL", "mysql+aiomysql://root@127.0.0.1:3306/"))
REQUIRE_MARIADB = os.environ.get("RUNLOG_TEST_REQUIRE_MARIADB") == "1"
ADMIN = "admin-token-0123456789"
# The longest write deadline the service accepts (RUNLOG_WRITE_TIMEOUT's
# most), for apps in tests whose subject is not the deadline: on a loaded CI
# machine a write of theirs once waited 3.6 s for SQLite and was answered
# false by the default 3 s. The deadline's own tests (test_write_deadline.py,
# test_faults.py, test_hostile.py) set theirs.
UNHURRIED_WRITE_TIMEOUT = 4.5
# Seconds an answer held to a bound (a timeout, a deadline) may come past it
# on a loaded machine (a CI runner shares its cores): such a bound is about
# the answer coming at all, by its own timeout rather than never or a much
# later one; how fast it comes is bench/'s to say.
SLACK = 5.0

_mariadb_problem: str | None = None


def _mariadb_connect(database: str | None = None) -> pymysql.Connection:  # type: ignore[type-arg]
    return pymysql.connect(
        host=MARIADB_URL.host or "127.0.0.1",
        port=MARIADB_URL.port or 3306,
        user=MARIADB_URL.username or "root",
        password=MARIADB_URL.password or "",
        database=database,
        connect_timeout=3,
        autocommit=True,
    )


def pytest_configure(config: pytest.Config) -> None:
    global _mariadb_problem
    try:
        _mariadb_connect().close()
    except pymysql.MySQLError as exc:
        _mariadb_problem = f"{exc}"


# The files that take longest (seconds of one full run, scripts/test --junitxml, summed per
# file, 2026-12-06), run first: scripts/test gives each worker its next file as it finishes one
# (--no-loadscope-reorder keeps this order), so a long file left for last keeps the others idle.
SLOWEST_FIRST = (
    "test_promises",  # 75
    "test_cluster_galera",  # 74
    "test_page_plan",  # 38
    "test_proxy",  # 34
    "test_subscription_live",  # 34
    "test_operable",  # 33
    "test_capacity",  # 31
    "test_write_deadline",  # 28
    "test_faults",  # 26
    "test_run_page_browser",  # 25
    "test_websocket_operations",  # 25
    "test_websocket_live",  # 24
    "test_migrations",  # 23
    "test_subscription",  # 23
    "test_retention",  # 22
    "test_bounded",  # 22
    "test_alerts_live",  # 21
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: a file's order kept
    if _mariadb_problem is None or REQUIRE_MARIADB:
        return
    kept, dropped = [], []
    for item in items:
        (dropped if "mariadb" in item.keywords else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _mariadb_problem is not None and not REQUIRE_MARIADB:
        line = "!" * 78
        terminalreporter.write_line(line, red=True, bold=True)
        terminalreporter.write_line(
            f"THE MARIADB HALF DID NOT RUN: MariaDB is unreachable ({_mariadb_problem}).",
            red=True,
            bold=True,
        )
        terminalreporter.write_line(
            "Only SQLite was tested. Start MariaDB, or set RUNLOG_TEST_MARIADB_URL.",
            red=True,
            bold=True,
        )
        terminalreporter.write_line(line, red=True, bold=True)


@pytest.fixture(autouse=True, scope="module")
def _abandoned_connections_collected() -> Iterator[None]:
    """A module's abandoned driver connections are its own, collected at its end.

    A proxy that stops answering (tests/faultproxy.py), a statement killed at
    the server (a reader whose client left), or a read cancelled at shutdown
    leaves aiomysql connections that no QUIT can close; Python warns when it
    collects them, and under load that may be during another module's test,
    which the warning then fails. They are collected here, at the end of the
    module that made them.
    """
    yield
    collect_abandoned()


def pytest_sessionfinish() -> None:
    # The session's last module's connections again: a log record of the pool's that names one
    # ("Exception closing connection") is pytest's until that test's teardown has ended.
    collect_abandoned()


def collect_abandoned() -> None:
    """`gc.collect()`, quiet about the driver connections a proxy or a killed statement abandoned."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unclosed connection", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="session")
def mariadb_database() -> Iterator[str]:
    if _mariadb_problem is not None:
        pytest.fail(f"MariaDB is required here and unreachable: {_mariadb_problem}")
    name = f"runlog_test_{uuid.uuid4().hex[:10]}"
    conn = _mariadb_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


@dataclass
class Backend:
    """One database the service runs on, plus a plain sync connection to arrange and check."""

    name: str
    url: str
    sync: sa.Engine

    def settings(self, **overrides: Any) -> Settings:
        return replace(Settings(database_url=self.url, admin_tokens=(ADMIN,)), **overrides)

    def create_tables(self) -> None:
        if self.url in _kept_tables:
            # Left empty and as created by the test before (_keep_or_drop_tables): taken
            # once, so a test that drops a table and creates the tables again gets it back.
            _kept_tables.discard(self.url)
            return
        metadata.create_all(self.sync)

    def drop_tables(self) -> None:
        metadata.drop_all(self.sync)
        # init-db's record of the migrations it applied (gql/store/migrations).
        self.execute("DROP TABLE IF EXISTS alembic_version")

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.sync.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.sync.connect() as conn:
            return list(conn.execute(sa.text(sql), params).all())

    def execute(self, sql: str, **params: Any) -> None:
        with self.sync.begin() as conn:
            conn.execute(sa.text(sql), params)

    def fold_words(self) -> int:
        """Keep the words of lines stored here by hand, as `python -m gql fold-words` does: how many."""

        async def fold() -> int:
            engine = create_engine(self.settings())
            try:
                return await fold_log(engine, on_batch=lambda _: None)
            finally:
                await engine.dispose()

        return asyncio.run(fold())

    def add_run(self, run_id: int, status: str, ended_at: str | None, updated_at: str) -> None:
        self.execute(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) "
            "VALUES (:id, :status, :ended_at, :updated_at)",
            id=run_id,
            status=status,
            ended_at=ended_at,
            updated_at=updated_at,
        )


def _open_backend(name: str, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    if name == "sqlite":
        path = tmp_path / "runlog.db"
        engine = sa.create_engine(f"sqlite:///{path}")
        yield Backend("sqlite", f"sqlite+aiosqlite:///{path}", engine)
        engine.dispose()
        return
    database = request.getfixturevalue("mariadb_database")
    url = MARIADB_URL.set(database=database)
    engine = sa.create_engine(url.set(drivername="mysql+pymysql"))
    backend = Backend("mariadb", url.render_as_string(hide_password=False), engine)
    wants_tables = "tables" in request.fixturenames
    if not wants_tables or backend.url not in _kept_tables:
        _kept_tables.discard(backend.url)
        backend.drop_tables()
    yield backend
    if wants_tables:
        _keep_or_drop_tables(backend)
    else:
        backend.drop_tables()
    engine.dispose()


# The MariaDB databases whose tables a test left empty and as created, for the next test
# that wants tables to take rather than create again: dropping and creating them took a
# test 0.1 to 0.4 s of DDL, most of a MariaDB test's setup.
_kept_tables: set[str] = set()
# By database URL: SHOW CREATE TABLE of each table as metadata.create_all makes them.
_as_created: dict[str, dict[str, str]] = {}
_AUTO_INCREMENT = re.compile(r" AUTO_INCREMENT=\d+")


def _show_tables(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {
            name: conn.exec_driver_sql(f"SHOW CREATE TABLE `{name}`").one()[1]
            for (name,) in conn.exec_driver_sql("SHOW TABLES").all()
        }


def _keep_or_drop_tables(backend: Backend) -> None:
    """Empty the tables a test leaves exactly as created (no other table, none altered), else drop them."""
    shown = _show_tables(backend.sync)
    left = {name: _AUTO_INCREMENT.sub("", text) for name, text in shown.items()}
    if backend.url not in _as_created:
        _as_created[backend.url] = _created_tables(backend.sync.url)
    if left != _as_created[backend.url]:
        _kept_tables.discard(backend.url)
        backend.drop_tables()
        return
    with backend.sync.connect() as conn:
        for name in shown:
            # Empty, its AUTO_INCREMENT and statistics new, as creating it leaves it (and cheaper).
            conn.exec_driver_sql(f"TRUNCATE TABLE `{name}`")
    _kept_tables.add(backend.url)


def _created_tables(url: sa.URL) -> dict[str, str]:
    """The tables as `metadata.create_all` makes them, shown from a scratch database beside `url`'s."""
    scratch = f"{url.database}_created"
    conn = _mariadb_connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{scratch}`")
        cur.execute(f"CREATE DATABASE `{scratch}` CHARACTER SET utf8mb4")
    engine = sa.create_engine(url.set(database=scratch))
    try:
        metadata.create_all(engine)
        return _show_tables(engine)
    finally:
        engine.dispose()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{scratch}`")
        conn.close()


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    """Each backend in turn: the test runs once on SQLite and once on MariaDB."""
    yield from _open_backend(request.param, request, tmp_path)


# For a test that takes `backend` (or `tables`, `api`) where the database plays no part:
# it runs once, on SQLite, rather than once per backend.
sqlite_alone = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def mariadb(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Backend]:
    """MariaDB alone, for what only MariaDB has (EXPLAIN, GET_LOCK)."""
    yield from _open_backend("mariadb", request, tmp_path)


@pytest.fixture
def tables(backend: Backend) -> Backend:
    """The backend with empty tables in place (as init-db leaves them)."""
    backend.create_tables()
    return backend


class Api:
    """The HTTP app under test, with the lifespan running."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def post(
        self, query: str, variables: dict[str, Any] | None = None, token: str | None = None
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = self.client.post(
            "/graphql", json={"query": query, "variables": variables or {}}, headers=headers
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def data(self, query: str, variables: dict[str, Any] | None = None, token: str | None = None) -> Any:
        body = self.post(query, variables, token)
        assert "errors" not in body, body["errors"]
        return body["data"]

    def write(self, run_id: Any, kind: str, detail: Any = None, **extra: Any) -> bool:
        body = self.post(
            "mutation W($runId: ID!, $kind: String!, $stepId: ID, $phase: Int, $detail: JSON) {"
            " writeRunLog(runId: $runId, kind: $kind, stepId: $stepId, phase: $phase,"
            " detail: $detail) }",
            {"runId": run_id, "kind": kind, "detail": detail, **extra},
        )
        assert "errors" not in body, body
        result: bool = body["data"]["writeRunLog"]
        return result

    def document_cache(self) -> Any:
        """The app's document cache (gql/api/execution/documents.py), found among its schema's extensions."""
        view: Any = self.client.app.routes[0].endpoint  # type: ignore[attr-defined]
        (found,) = [e.__self__ for e in view.schema.extensions if hasattr(e, "__self__")]
        return found


@pytest.fixture
def make_api(tables: Backend) -> Iterator[Callable[..., Api]]:
    """Start the app on the test backend with settings overrides; stopped at teardown."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> Api:
        client = TestClient(create_app(tables.settings(**overrides)))
        client.__enter__()
        clients.append(client)
        return Api(client)

    yield make
    for client in clients:
        with _tasks_shown_if_stuck():
            client.__exit__(None, None, None)


@contextmanager
def _tasks_shown_if_stuck(seconds: float = 60) -> Iterator[None]:
    """Print each pending asyncio task's stack to stderr if the block is still running after `seconds`.

    A TestClient's exit once waited until pytest-timeout on a task that did not end when
    cancelled; this names the task in the failure's captured output.
    """

    def show() -> None:
        pending = [o for o in gc.get_objects() if isinstance(o, asyncio.Task) and not o.done()]
        print(f"still running after {seconds:g} s; {len(pending)} pending tasks:", file=sys.stderr)
        for task in pending:
            print(f"- {task!r}", file=sys.stderr)
            for frame in task.get_stack():
                print("".join(traceback.format_stack(frame, limit=1)), end="", file=sys.stderr)

    timer = threading.Timer(seconds, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api()


@contextmanager
def sent_statements(engine: Any, before: Callable[[str], None] | None = None) -> Iterator[list[str]]:
    """Every SQL text `engine` (an AsyncEngine) sends while the block runs.

    `before(sql)` is called as each is about to go.
    """
    seen: list[str] = []
    lock = threading.Lock()

    def listener(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        with lock:
            seen.append(statement)
        if before is not None:
            before(statement)

    sa.event.listen(engine.sync_engine, "before_cursor_execute", listener)
    try:
        yield seen
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", listener)


def free_port() -> int:
    """A local port with nothing listening on it (until someone binds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_healthy(base_url: str, server: subprocess.Popen[str], timeout: float = 90) -> None:
    """Wait for a started `python -m gql serve` to answer /healthz with 200 (generous: CI may be loaded)."""

    def output() -> str:
        # A pipe is read only once the server has exited: a running one's would block.
        exited = server.poll() is not None
        return server.stdout.read() if exited and server.stdout else "(its output is not read here)"

    wait_until_answered(f"{base_url}/healthz", server, output, timeout)


def wait_until_answered(
    url: str, process: subprocess.Popen[Any], output: Callable[[], str], within: float
) -> None:
    """Wait for `url` to answer 200; fail with `output()` if `process` exits or `within` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        assert process.poll() is None, f"the process exited:\n{output()}"
        try:
            if local.get(url).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {within}s:\n{output()}"
        time.sleep(0.1)
