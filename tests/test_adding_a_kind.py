"""Adding a kind is the two declarations docs/development.md shows, and nothing else.

Each test copies the package, adds the page's own code blocks (a kind in
`gql/kinds.py`, its detail type in `gql/domain/details.py`) where the page says, and
runs the copy in a subprocess: the new kind must be in the schema's enum and
union, written and read typed through the API on each database, shown by the
demo, and no breaking change. A declaration left out or left incomplete must
stop the import with a message that says what to write.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import Backend

ROOT = Path(__file__).resolve().parent.parent
KINDS_MARKER = "    # A new kind goes here, after the last one"
DETAILS_MARKER = '# "Adding a kind").\n'
FRAGMENTS = "gql/operations/fragments.graphql"


def _walkthrough_blocks() -> dict[str, str]:
    """The page's code blocks in "Adding a kind" that add to a file, by the file their first line names."""
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = page.split("\n## Adding a kind\n", 1)[1].split("\n## ", 1)[0]
    blocks = {}
    for block in re.findall(r"```(?:python|graphql)\n(.*?)```", section, re.S):
        named = re.match(r"\s*# (gql/[\w/]+\.\w+),", block)
        assert named, block
        blocks[named.group(1)] = block
    assert set(blocks) == {"gql/kinds.py", "gql/domain/details.py", FRAGMENTS}
    return blocks


BLOCKS = _walkthrough_blocks()


def _package(tmp_path: Path, kinds_block: str | None, details_block: str | None) -> Path:
    """A copy of the package with the blocks added where the walkthrough says."""
    shutil.copytree(ROOT / "gql", tmp_path / "gql", ignore=shutil.ignore_patterns("__pycache__"))
    for name, block, marker, before in (
        ("kinds.py", kinds_block, KINDS_MARKER, True),
        ("domain/details.py", details_block, DETAILS_MARKER, False),
    ):
        if block is None:
            continue
        path = tmp_path / "gql" / name
        text = path.read_text(encoding="utf-8")
        assert text.count(marker) == 1, f"the marker the walkthrough names is gone from gql/{name}"
        added = block if before else f"\n\n{block}"
        path.write_text(text.replace(marker, added + marker if before else marker + added), encoding="utf-8")
    # The fragment at the end of its file, and spread where the page says.
    fragments = tmp_path / FRAGMENTS
    [spread] = re.findall(r"spread as (\.\.\.\w+)", BLOCKS[FRAGMENTS])
    text = fragments.read_text(encoding="utf-8")
    assert text.count("    ...UnreadableFields\n") == 1
    text = text.replace("    ...UnreadableFields\n", f"    {spread}\n    ...UnreadableFields\n")
    fragments.write_text(f"{text}\n{BLOCKS[FRAGMENTS]}", encoding="utf-8")
    return tmp_path


def _run(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )


SERVE_AND_CHECK = """
import datetime, json, sys
from graphql import build_schema
from starlette.testclient import TestClient
import gql
from gql.domain import demo, demo_runs
from gql.edge.app import create_app
from gql.edge.graphiql import example_tabs
from gql.kinds import Kind
from gql.api.schema import export_sdl
from gql.api.schema_check import compare
from gql.settings import Settings

assert gql.__file__.startswith(sys.argv[1] if len(sys.argv) > 1 else "."), gql.__file__
url, committed = json.loads(input())
sdl = export_sdl()
schema = build_schema(sdl)
report = compare(committed, sdl)
runs = demo_runs.build_runs(datetime.datetime(2026, 6, 1, 18, 0))
demo.check_lines(runs)
out = {
    "enum": list(schema.type_map["RunLogKind"].values),
    "union": [t.name for t in schema.type_map["RunLogDetail"].types],
    "breaking": [c.description for c in report.breaking],
    "demo": [(run.id, line.kind.value) for run in runs for line in run.lines if line.kind is Kind.RUN_PAUSED],
}
write = "mutation($detail: JSON) { writeRunLog(runId: 7, kind: \\"run.paused\\", detail: $detail) }"
read = (
    "{ runLog(runId: 7, kinds: [RUN_PAUSED]) { nodes { kind kindName"
    " detail { __typename ... on RunPausedDetail { actor until } } } } }"
)
with TestClient(create_app(Settings(database_url=url))) as client:
    def post(query, variables=None):
        return client.post("/graphql", json={"query": query, "variables": variables or {}}).json()
    out["written"] = post(write, {"detail": {"actor": "gm.alice", "until": "2026-06-01T20:00:00Z"}})
    out["typo"] = post(write, {"detail": {"actr": "gm.alice"}})
    out["read"] = post(read)
    tab = {t.name: t for t in example_tabs()}["RunLog"]
    nodes = post(tab.query, {"runId": "7"})["data"]["runLog"]["nodes"]
    out["tab"] = [node for node in nodes if node["kindName"] == "run.paused"]
print(json.dumps(out))
"""


def test_a_kind_declared_as_the_walkthrough_shows_is_served_written_read_and_in_the_demo(
    tmp_path: Path, tables: Backend
) -> None:
    root = _package(tmp_path, BLOCKS["gql/kinds.py"], BLOCKS["gql/domain/details.py"])
    committed = (ROOT / "schema.graphql").read_text(encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", SERVE_AND_CHECK, str(root)],
        cwd=root,
        input=json.dumps([tables.url, committed]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert out["enum"][-1] == "RUN_PAUSED"
    assert out["union"][-2:] == ["RunPausedDetail", "UnreadableDetail"]
    assert out["breaking"] == []
    assert out["demo"] == [[37, "run.paused"]]
    assert out["written"] == {"data": {"writeRunLog": True}}
    assert out["typo"]["data"] == {"writeRunLog": False}
    assert [e["reason"] for e in out["typo"]["extensions"]["runlog"]["notStored"]] == ["DETAIL_DOES_NOT_FIT"]
    detail = {"__typename": "RunPausedDetail", "actor": "gm.alice", "until": "2026-06-01T20:00:00+00:00"}
    [line] = out["read"]["data"]["runLog"]["nodes"]
    assert line == {"kind": "RUN_PAUSED", "kindName": "run.paused", "detail": detail}
    [tab_line] = out["tab"]
    assert tab_line["detail"] == detail


def test_a_kind_without_a_detail_type_stops_the_import_saying_what_to_write(tmp_path: Path) -> None:
    root = _package(tmp_path, BLOCKS["gql/kinds.py"], None)
    done = _run(root, "import gql.api.schema")
    assert done.returncode == 1
    assert "kind 'run.paused' has no detail type: declare one in gql/domain/details.py" in done.stderr
    assert "@detail_of(Kind.RUN_PAUSED, example={...})" in done.stderr
    assert "class RunPausedDetail:" in done.stderr


def test_a_kind_without_a_reason_stops_the_import(tmp_path: Path) -> None:
    declared = BLOCKS["gql/kinds.py"]
    reason = re.findall(r'\n        "(.*)",\n', declared)[-1]
    root = _package(tmp_path, declared.replace(reason, ""), BLOCKS["gql/domain/details.py"])
    done = _run(root, "import gql.kinds")
    assert done.returncode == 1
    assert "kind 'run.paused' is declared without a reason" in done.stderr


def test_a_detail_type_not_named_after_its_kind_stops_the_import(tmp_path: Path) -> None:
    misnamed = BLOCKS["gql/domain/details.py"].replace("class RunPausedDetail:", "class PausedDetail:")
    root = _package(tmp_path, BLOCKS["gql/kinds.py"], misnamed)
    done = _run(root, "import gql.domain.details")
    assert done.returncode == 1
    assert "run.paused's detail type must be named RunPausedDetail" in done.stderr
