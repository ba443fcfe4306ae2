"""Details stored by every earlier version of the schema still read as their typed detail.

`tests/stored_details/*.jsonl` holds the detail texts each version wrote
(`tests/record_stored_details.py` records them). A change to a detail type
that leaves such a row behind, such as a field made required with no default
for the rows that lack it, would turn every older line of that kind into an
`UnreadableDetail`: this test fails instead.
"""

from __future__ import annotations

import datetime
import json

import pytest
import sqlalchemy as sa

from gql.domain.detail_codec import read_detail
from gql.domain.details import DETAIL_TYPES, UnreadableDetail
from gql.kinds import Kind

from .conftest import Api, Backend
from .record_stored_details import FOLDER
from .test_read_rows import shipped_page

RUN = 7
AT = datetime.datetime(2026, 6, 1, 18, 0)


def _stored() -> list[tuple[str, dict[str, str]]]:
    rows = []
    for path in sorted(FOLDER.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            rows.append((f"{path.name}:{number}", json.loads(line)))
    return rows


STORED = _stored()


def test_there_are_stored_details_of_every_kind() -> None:
    assert {row["kind"] for _, row in STORED} == {kind.value for kind in Kind}


@pytest.mark.parametrize(("where", "row"), STORED, ids=[where for where, _ in STORED])
def test_a_stored_detail_reads_as_its_kinds_type(where: str, row: dict[str, str]) -> None:
    read = read_detail(row["kind"], row["detail"])
    assert not isinstance(read, UnreadableDetail), f"{where}: {read.problem}"
    assert isinstance(read, DETAIL_TYPES[Kind(row["kind"])])


def test_every_stored_detail_reads_through_the_api(tables: Backend, api: Api) -> None:
    """On each database, as a client reads them: none is an UnreadableDetail."""
    with tables.sync.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO event_run_log (run_id, kind, detail, at) VALUES (:run_id, :kind, :detail, :at)"
            ),
            [{"run_id": RUN, "kind": row["kind"], "detail": row["detail"], "at": AT} for _, row in STORED],
        )
    nodes = shipped_page(api, RUN, limit=2000)["nodes"]
    assert len(nodes) == len(STORED)
    for node in nodes:
        kind = Kind(node["kindName"])
        assert node["detail"]["__typename"] == DETAIL_TYPES[kind].__name__, node
