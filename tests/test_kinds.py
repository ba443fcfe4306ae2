"""The kinds are append-only, and the checked-in SDL is what the code exports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gql.api.schema import export_sdl
from gql.kinds import Kind

ROOT = Path(__file__).resolve().parent.parent

# Frozen. Append new kinds at the end; never rename, remove or reorder one:
# a stored row would then name a kind no reader knows.
FROZEN_KINDS = [
    "run.created",
    "run.status",
    "phase.entered",
    "step.status",
    "note",
    "run.blocked",
    "run.health",
    "step.retry",
    "step.parked",
    "phase.completed",
    "phase.gate",
    "condition.evaluated",
    "phase.advanced",
    "run.budget",
    "step.refused",
    "version.verified",
    "resource.recorded",
    "resource.orphaned",
    "cleanup.reverted",
    "cleanup.failed",
    "cleanup.swept",
    "cleanup.retry",
]


def _enum_values(sdl: str) -> list[str]:
    block = re.search(r"enum RunLogKind \{(.*?)\n\}", sdl, re.S)
    assert block, "RunLogKind is missing from the SDL"
    return re.findall(r"^\s+([A-Z_]+)\s*$", block.group(1), re.M)


def test_no_kind_was_removed_renamed_or_reordered() -> None:
    wire_names = [kind.value for kind in Kind]
    assert wire_names[: len(FROZEN_KINDS)] == FROZEN_KINDS


def test_graphql_enum_is_the_upper_snake_case_of_each_wire_name_in_order() -> None:
    expected = [name.replace(".", "_").upper() for name in FROZEN_KINDS]
    assert _enum_values(export_sdl())[: len(expected)] == expected


def test_checked_in_enum_keeps_every_kind_it_had() -> None:
    """A kind in the committed schema.graphql must still be served, in place."""
    committed = _enum_values((ROOT / "schema.graphql").read_text())
    assert _enum_values(export_sdl())[: len(committed)] == committed


def test_schema_graphql_is_exactly_what_export_schema_prints() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "gql", "export-schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert printed == (ROOT / "schema.graphql").read_text(), (
        "schema.graphql is stale: run `python -m gql export-schema > schema.graphql`"
    )


def test_each_kind_keeps_the_seeds_reason_beside_its_declaration() -> None:
    """The seed's comments give a reason for these four in words of their own; each is kept."""
    assert all(kind.why.strip() for kind in Kind)
    assert "queryable from the run that did NOT start" in Kind.RUN_BLOCKED.why
    assert "Written for BOTH outcomes" in Kind.CONDITION_EVALUATED.why
    assert "a refusal is not a failure" in Kind.STEP_REFUSED.why
    assert "ANSWER rather than at the placeholder" in Kind.RESOURCE_RECORDED.why
