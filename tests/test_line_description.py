"""One description of a line: each `RunLogLine` field says once how it is read from a stored line.

The compiled page plan (gql/api/execution/page_plan.py) and `page.as_line` (graphql-core's
pages, the tail) are both made from the field's `_read`. Adding a field to a
line is one edit to `RunLogLine` (and the regenerated SDL): the scratch copy
below makes exactly that edit and serves the new field both ways.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from strawberry.types import get_object_definition

from gql.api import page
from gql.store import Line, utc_now_millis

ROOT = Path(__file__).resolve().parent.parent


def test_the_plan_and_graphql_core_read_each_field_from_its_one_description() -> None:
    fields = get_object_definition(page.RunLogLine, strict=True).fields
    described = {f.python_name: f.metadata[page.READ] for f in fields if page.READ in f.metadata}
    # Every field but the detail (read by its kind's type) says how it is read, and the plan's
    # sources are exactly those descriptions.
    assert {f.python_name for f in fields} - set(described) == {"detail"}
    assert described == page.LINE_SOURCES
    # `as_line` is made from them: a row read through it gives what each expression gives.
    at = utc_now_millis()
    row = Line(id=5, run_id=7, step_id=None, kind="note", phase=2, detail='{"text": "x"}', at=at)
    made = page.as_line(row, "cursor-1")
    for name, (expression, names) in described.items():
        assert getattr(made, name) == eval(expression, dict(names), {"r": row, "c": "cursor-1"})  # noqa: S307


SCRATCH = """
import json, sys
from starlette.testclient import TestClient
from gql import metrics, store
from gql.edge.app import create_app
from gql.api.page import as_line
from gql.settings import Settings

settings = Settings(database_url=f"sqlite+aiosqlite:///{sys.argv[1]}")
with TestClient(create_app(settings)) as client:
    write = 'mutation { writeRunLog(runId: "41", kind: "note", detail: {text: "hi"}) }'
    assert client.post("/graphql", json={"query": write}).json() == {"data": {"writeRunLog": True}}
    page = client.post("/graphql", json={"query": "{ runLog(runId: 41) { nodes { runNumber kindName } } }"})
    scrape = client.get("/metrics").text
fell_back = [x for x in scrape.splitlines() if x.startswith("runlog_fallbacks_total") and "page_plan" in x]
now = store.utc_now_millis()
row = store.Line(id=1, run_id=41, step_id=None, kind="note", phase=None, detail=None, at=now)
print(json.dumps({"page": page.json(), "fell_back": fell_back, "line": as_line(row).run_number}))
"""


def test_a_field_added_in_one_place_is_served_by_the_plan_and_by_graphql_core(tmp_path: Path) -> None:
    copy = tmp_path / "gql"
    shutil.copytree(ROOT / "gql", copy, ignore=shutil.ignore_patterns("static", "__pycache__"))
    (copy / "static").symlink_to(ROOT / "gql" / "static")  # GraphiQL's files, read at start-up
    source = copy / "api" / "page.py"
    text = source.read_text()
    # RunLogLine's own kind_name, the first of the module's (KindCount has one too).
    anchor = "    kind_name: str = strawberry.field("
    assert text.count(anchor) >= 1
    added = textwrap.indent(
        "run_number: int = strawberry.field(\n"
        '    description="The run, as a number.", metadata=_read("r.run_id")\n'
        ")\n",
        "    ",
    )
    source.write_text(text.replace(anchor, added + anchor, 1))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for name in [n for n in env if n.startswith("RUNLOG_")]:
        del env[name]
    ran = subprocess.run(
        [sys.executable, "-c", SCRATCH, str(tmp_path / "scratch.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    # The plan served the page (no page fell back to graphql-core) with the new field...
    assert found["page"] == {"data": {"runLog": {"nodes": [{"runNumber": 41, "kindName": "note"}]}}}
    assert found["fell_back"] == []
    # ...and `as_line`, which graphql-core's pages and the tail use, has it too.
    assert found["line"] == 41
