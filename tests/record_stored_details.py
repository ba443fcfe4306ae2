"""Record the detail texts this version of the schema stores, as a fixture file.

    .venv/bin/python -m tests.record_stored_details 2026-11-30

writes `tests/stored_details/2026-11-30.jsonl`: for every kind, its example
from `tests/details_examples.py` as the write path stores it (checked, then
dumped), the same detail with every field that may be left out left out, and
every detail of the demo runs (`gql/domain/demo_runs.py`) as the demo stores it.
Record a new file whenever a detail type changes, and keep the old ones:
`tests/test_stored_details.py` reads every file, so a change that would leave
an older row unreadable fails there.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

from gql.domain.demo_runs import build_runs
from gql.domain.detail_codec import DetailError, check_detail, dump_detail
from gql.kinds import Kind

from .details_examples import EXAMPLES

FOLDER = Path(__file__).resolve().parent / "stored_details"


def stored(kind: Kind, detail: dict[str, Any]) -> str:
    """The text the write path stores for `detail` (it refuses what check_detail refuses)."""
    text = dump_detail(detail)
    check_detail(kind, text)
    return text


def smallest(kind: Kind, detail: dict[str, Any]) -> dict[str, Any]:
    """`detail` without each key the kind's type lets a writer leave out."""
    kept = dict(detail)
    for key in list(kept):
        trial = {k: v for k, v in kept.items() if k != key}
        try:
            check_detail(kind, dump_detail(trial))
        except DetailError:
            continue
        kept = trial
    return kept


def records() -> list[dict[str, str]]:
    rows = []
    for kind in Kind:
        example = EXAMPLES[kind]
        for detail in (example, smallest(kind, example)):
            row = {"kind": kind.value, "detail": stored(kind, detail)}
            if row not in rows:
                rows.append(row)
    # A fixed time, so recording again gives the same file.
    for run in build_runs(datetime.datetime(2026, 6, 1, 18, 0)):
        for line in run.lines:
            if line.detail is not None:
                row = {"kind": line.kind.value, "detail": stored(line.kind, line.detail)}
                if row not in rows:
                    rows.append(row)
    return rows


def main(name: str) -> None:
    path = FOLDER / f"{name}.jsonl"
    lines = [json.dumps(row, ensure_ascii=False) for row in records()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} stored details to {path}")


if __name__ == "__main__":
    main(sys.argv[1])
