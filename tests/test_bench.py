"""The benchmark's workload and floor (`bench/`): what it sends, and that its floor does the work."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from graphql import (
    ListValueNode,
    Node,
    OperationType,
    build_client_schema,
    get_introspection_query,
    parse,
    print_ast,
)
from starlette.testclient import TestClient

from bench import data, floor, revision, run, servers
from bench.operations import (
    COUNTS_OPERATIONS,
    HOLDS_OPERATIONS,
    HOT_RUN,
    OPERATIONS,
    Workload,
    every_detail_field_of,
    shipped,
    shipped_in,
)
from bench.report import Report
from gql.domain.details import DETAIL_TYPES
from gql.edge.app import create_app
from gql.settings import Settings

from .conftest import Backend


@pytest.fixture(autouse=True)
def _server_logs_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's servers log into the test's own folder, not the machine's temporary one."""
    monkeypatch.setattr(servers, "LOG_DIR", tmp_path)


ROOT = Path(__file__).resolve().parent.parent
GENERATED_TS = ROOT / "clients" / "ts" / "src" / "generated" / "graphql.ts"


def _as_graphql_js(node: Any) -> Any:
    """A graphql-core AST as graphql-js writes it to JSON (what the TS client's documents are)."""
    if isinstance(node, Node):
        out: dict[str, Any] = {"kind": type(node).__name__.removesuffix("Node")}
        for key in node.keys:
            value = getattr(node, key)
            if key == "loc" or value is None:
                continue
            if (value == () or value == []) and not isinstance(node, ListValueNode):
                continue  # graphql-js leaves out an empty list of a node, but keeps `[]`'s values
            if key == "block" and value is False:
                continue
            camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), key)
            out[camel] = _as_graphql_js(value)
        return out
    if isinstance(node, tuple | list):
        return [_as_graphql_js(v) for v in node]
    if isinstance(node, OperationType):
        return node.value
    return node


def _drop_false_block(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_false_block(v) for k, v in value.items() if not (k == "block" and v is False)}
    if isinstance(value, list):
        return [_drop_false_block(v) for v in value]
    return value


def test_the_bench_sends_each_operation_as_the_typescript_client_prints_it() -> None:
    # The TS client sends `print(document)`: the same document prints the same text.
    generated = GENERATED_TS.read_text()
    operations = shipped()
    assert {op.name for op in operations} >= {"RunLog", "RunLogByKinds", "RunLogPage", "WriteNote"}
    for op in operations:
        found = re.search(rf"export const {op.name}Document = (\{{.*?\}}) as unknown as", generated)
        assert found, f"{op.name} is not in {GENERATED_TS}"
        theirs = _drop_false_block(json.loads(found.group(1)))
        assert _as_graphql_js(parse(op.text, no_location=True)) == theirs, op.name


def test_an_added_operation_is_benchmarked_and_one_it_cannot_fill_is_skipped_by_name(tmp_path: Path) -> None:
    for path in OPERATIONS.glob("*.graphql"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "Newest.graphql").write_text(
        "query Newest($runId: ID!, $limit: Int) { runLog(runId: $runId, limit: $limit) "
        "{ nodes { ...RunLogLineFields } } }"
    )
    (tmp_path / "Mystery.graphql").write_text(
        "query Mystery($runId: ID!, $mystery: Int!) "
        "{ runLog(runId: $runId, limit: $mystery) { nodes { id } } }"
    )
    by_name = {op.name: op for op in shipped(tmp_path)}
    newest = by_name["Newest"]
    assert newest.skip is None
    assert json.loads(newest.body(50))["variables"] == {"runId": str(HOT_RUN), "limit": 50}
    assert "fragment RunLogLineFields on RunLogLine" in newest.text
    assert "fragment RunCreatedFields on RunCreatedDetail" in newest.text
    assert "fragment RunLogLineFields" not in by_name["Mystery"].text
    assert by_name["Mystery"].skip is not None and "$mystery: Int!" in by_name["Mystery"].skip


def test_the_introspection_query_selects_every_field_of_every_detail(tmp_path: Path) -> None:
    with TestClient(
        create_app(Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'runlog.db'}"))
    ) as client:
        introspection = client.post("/graphql", json={"query": get_introspection_query()}).json()["data"]
        op = every_detail_field_of(build_client_schema(introspection))
        answer = client.post("/graphql", content=op.body(50), headers={"Content-Type": "application/json"})
    assert "errors" not in answer.json(), answer.json()
    for detail in [*DETAIL_TYPES.values(), "UnreadableDetail"]:
        name = detail if isinstance(detail, str) else detail.__name__
        assert f"... on {name} {{" in op.text
    for nested in ("blockingRun {", "byStatus {", "caps {", "kindName", "endCursor"):
        assert nested in op.text
    assert "endedAt" in op.text and "maxAttempts" in op.text


@pytest.mark.mariadb
def test_the_floor_answers_the_lines_the_service_answers(mariadb: Backend) -> None:
    """Same request bytes, same lines, ids, page info and fields: a floor that does less would fail here."""
    mariadb.create_tables()
    rows = data.base_rows()[: 4 * 300]  # 300 lines a run
    with mariadb.sync.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )
        conn.exec_driver_sql(
            "INSERT INTO event_runs (id, status, ended_at, updated_at) VALUES (%s, %s, NULL, '2026-02-01')",
            list(data.KNOWN_BLOCKING.items()),
        )
    settings = mariadb.settings()
    apps = {
        "service": create_app(settings),
        "floor": floor.create_app(settings),
        "sa floor": floor.create_app(settings, driver="sqlalchemy"),
    }
    clients = {name: TestClient(app) for name, app in apps.items()}
    for client in clients.values():
        client.__enter__()
    try:
        # What holds a run and the counts by kind are no floor's: bench/holds.py and bench/find.py time them.
        beside = (*HOLDS_OPERATIONS, *COUNTS_OPERATIONS)
        reads = [op for op in shipped() if op.kind == "query" and not op.live and op.name not in beside]
        blocking_seen = False
        for op in reads:
            for limit in (50, 2000):
                body = op.body(limit)
                answers = {
                    name: client.post(
                        "/graphql", content=body, headers={"Content-Type": "application/json"}
                    ).json()
                    for name, client in clients.items()
                }
                run.compare_answers(answers)
                cursor = answers["service"]["data"]["runLog"]["pageInfo"]["endCursor"]
                if op.has_variable("after") and cursor is not None:
                    # The next page: the floors read the service's cursor as the service does.
                    after = op.body(limit, after=cursor)
                    run.compare_answers(
                        {
                            name: client.post(
                                "/graphql", content=after, headers={"Content-Type": "application/json"}
                            ).json()
                            for name, client in clients.items()
                        }
                    )
                nodes = answers["floor"]["data"]["runLog"]["nodes"]
                blocked = [n["detail"] for n in nodes if (n.get("detail") or {}).get("blockingRun")]
                blocking_seen = blocking_seen or bool(blocked)
        assert blocking_seen, "no page had a blocking run looked up: the floor skipped the second round trip"

        # A floor that answered fewer lines would not pass.
        answers["floor"]["data"]["runLog"]["nodes"].pop()
        with pytest.raises(run.Mismatch):
            run.compare_answers(answers)

        (write,) = [op for op in shipped() if op.kind == "mutation"]
        for name, client in clients.items():
            before = mariadb.scalar("SELECT COUNT(*) FROM event_run_log")
            answer = client.post(
                "/graphql", content=write.body(50), headers={"Content-Type": "application/json"}
            ).json()
            assert answer == {"data": {"writeRunLog": True}}, name
            assert mariadb.scalar("SELECT COUNT(*) FROM event_run_log") == before + 1, name
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)


@pytest.mark.mariadb
def test_against_an_older_revision_the_bench_serves_it_beside_this_tree_and_compares_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--against REV` for real, kept small: one case (WriteNote), one round."""
    status = run.main(["--quick", "--only", "writes", "--rounds", "1", "--against", "HEAD"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    head, _, compared = out.partition("before = HEAD = ")
    assert re.search(r"^case +unit +service +before +floor +sa floor +ratio", head, re.MULTILINE), out
    # Each server wrote its one line before timing, and the revision's figure has its column.
    assert re.search(r"^WriteNote, 8 clients +req/s( +[\d,.]+){5} ", head, re.MULTILINE), out
    row = re.search(r"^WriteNote, 8 clients +([\d.]+) +([\d.]+) +([\d.]+) +(.+)$", compared, re.MULTILINE)
    assert row, out
    before, now, now_over = (float(row.group(i)) for i in (1, 2, 3))
    # Each printed to three places (off by at most half of 0.001): their quotient is now/before
    # within that rounding, which is more than 1% of it when a ratio is as small as 0.013.
    half = 0.0005
    assert (now - half) / (before + half) - half <= now_over <= (now + half) / (before - half) + half, out
    assert re.fullmatch(r"same|\d+\.\d% (better|worse)( \(more than 5%\))?", row.group(4)), row.group(4)
    served = re.search(r"served from (\S+)", err)
    assert served, err
    assert not Path(served.group(1)).exists(), "the revision's files were left behind"


def test_against_a_revision_before_is_sent_the_operation_of_that_name_the_revision_shipped() -> None:
    """cb6a918's RunLog declares none of the filters since added, nor selects `scanLimitReached`."""
    workload = Workload(reads=[op for op in shipped() if op.name in ("RunLog", "RunLines")])
    workload.against(shipped_in(revision.operation_files("cb6a918"), "cb6a918:"), "cb6a918")
    runlog, lines = workload.read("RunLog"), workload.read("RunLines")
    assert runlog is not None and lines is not None
    servers = {name: object() for name in ("service", "before", "floor")}

    for limit in (2000, 50):
        sent = {
            name: json.loads(body) for name, (_, body) in run.requests_for(servers, runlog, limit).items()
        }
        assert sent["floor"] == sent["service"]
        assert "$phase" in sent["service"]["query"] and "scanLimitReached" in sent["service"]["query"]
        # The revision's own text: the operation in its file, and the fragments it spreads.
        ours = parse(revision._git("show", "cb6a918:gql/operations/RunLog.graphql").decode())
        assert sent["before"]["query"].startswith(print_ast(ours.definitions[0]) + "\n\n")
        assert "fragment RunLogLineFields on RunLogLine" in sent["before"]["query"]
        assert "$phase" not in sent["before"]["query"] and "scanLimitReached" not in sent["before"]["query"]
        # The same request: the same run and limit, no filter and no cursor at either.
        assert (
            sent["before"]["variables"]
            == sent["service"]["variables"]
            == {"runId": str(HOT_RUN), "limit": limit}
        )

    # An operation the revision did not ship is timed without it, and says why.
    assert lines.at_revision is not None and lines.at_revision.skip == "cb6a918 ships no operation RunLines"
    assert list(run.serving(servers, lines)) == ["service", "floor"]
    assert list(run.serving(servers, runlog)) == ["service", "before", "floor"]
    assert run.why_not_before(servers, lines) == "cb6a918 ships no operation RunLines"
    report = Report(
        targets=("service", "before", "floor"),
        against=revision.Revision("cb6a918", "cb6a918" + "0" * 33, ROOT),
    )
    report.add(
        "RunLines, 50-line pages, 8 clients",
        "req/s",
        {"service": 8.0, "floor": 10.0},
        0.8,
        "",
        "",
        None,
        run.why_not_before(servers, lines),
    )
    assert report.changes[-1][-1] == "not measured at the revision: cb6a918 ships no operation RunLines"


def test_a_revision_whose_answer_differs_from_this_tree_s_is_not_compared() -> None:
    page = {"nodes": [{"id": "1", "kind": "NOTE", "detail": {"text": "a"}}], "pageInfo": {"endCursor": "x"}}
    now = {"data": {"runLog": page}}
    answers = {"service": now, "before": json.loads(json.dumps(now)), "floor": now}
    assert "before the same answer" in run.compare_answers(answers)

    answers["before"]["data"]["runLog"]["nodes"][0]["detail"]["text"] = "b"
    with pytest.raises(
        run.Mismatch, match=r"otherwise than this tree at data\.runLog\.nodes\[0\]\.detail\.text"
    ):
        run.compare_answers(answers)

    # Its own operation selects fewer fields: compared on those it selects, the others named.
    answers["before"] = json.loads(json.dumps(now))
    now["data"]["runLog"]["pageInfo"]["scanLimitReached"] = False
    found = run.compare_answers(answers)
    assert "before the same answer on the fields both select" in found
    assert "this tree's alone: data.runLog.pageInfo.scanLimitReached" in found
    answers["before"]["data"]["runLog"]["pageInfo"]["endCursor"] = None
    with pytest.raises(run.Mismatch, match=r"at data\.runLog\.pageInfo\.endCursor"):
        run.compare_answers(answers)
    # A field the revision answers and this tree does not: not the same work.
    answers["before"] = json.loads(json.dumps(now))
    answers["before"]["data"]["runLog"]["nodes"][0]["gone"] = 1
    with pytest.raises(run.Mismatch, match=r"otherwise than this tree at data\.runLog\.nodes\[0\]"):
        run.compare_answers(answers)

    # An operation (or a field) newer than the revision: it answers with errors.
    answers["before"] = {
        "data": None,
        "errors": [{"message": "Cannot query field 'newField' on type 'Run'."}],
    }
    with pytest.raises(run.Mismatch, match=r"errors where this tree did not: Cannot query field 'newField'"):
        run.compare_answers(answers)


def test_a_revision_is_refused_by_name_when_git_has_none_or_its_lock_pins_other_packages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run.main(["--against", "no-such-revision~1"]) == 2
    assert "--against no-such-revision~1: no commit of that name" in capsys.readouterr().err

    # The commit before the lock file's pins last changed was locked otherwise
    # (a change of its header alone pins nothing else).
    ours = (revision.ROOT / revision.LOCK).read_text()
    changes = revision._git("log", "--format=%H", "--", revision.LOCK).decode().split()

    def pins_differ(commit: str) -> bool:
        theirs = revision._git("show", f"{commit}^:{revision.LOCK}").decode()
        return bool(revision.lock_differences(theirs, ours))

    changed = next(c for c in changes if pins_differ(c))
    assert run.main(["--against", f"{changed}^"]) == 2
    err = capsys.readouterr().err
    assert f"--against {changed}^: " in err
    assert "requirements.lock pins other packages than this tree's" in err


def test_the_revision_s_files_are_removed_when_the_bench_fails() -> None:
    with pytest.raises(RuntimeError, match="a case failed"), revision.checkout("HEAD") as found:
        tree = found.tree
        assert (tree / "gql" / "__main__.py").is_file()
        raise RuntimeError("a case failed")
    assert not tree.exists()


def test_the_floor_serves_with_several_workers_as_the_bench_starts_it(mariadb: Backend) -> None:
    """The bench's uvicorn-workers case starts the floor with --workers 2: it answers its health check."""
    from sqlalchemy.engine import make_url

    from bench.servers import _children, start_many

    mariadb.create_tables()
    url = make_url(mariadb.url)
    servers = start_many(["floor"], url.database or "", workers=2, pin=None, server=url.set(database=None))
    try:
        # start_many has seen it answer /healthz; uvicorn's workers are its children.
        assert servers["floor"].process.poll() is None
        assert len(_children(servers["floor"].process.pid)) >= 2
    finally:
        servers["floor"].stop()
