"""`python -m gql check-schema`: a breaking change fails unless announced; an additive one passes.

The earlier SDL is the current export edited the other way round: to "remove"
a field, the earlier file has one the code does not serve.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gql.api.schema import export_sdl
from gql.cli import main

ROOT = Path(__file__).resolve().parent.parent
SDL = export_sdl()


def _earlier(tmp_path: Path, old: str, new: str) -> str:
    assert old in SDL, old
    path = tmp_path / "earlier.graphql"
    path.write_text(SDL.replace(old, new, 1), encoding="utf-8")
    return str(path)


def _check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, against: str, announcements: str | None = None
) -> int:
    # tmp_path is no git checkout: the announcements are read from its docs/.
    if announcements is not None:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "schema-changes.md").write_text(announcements, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return main(["check-schema", "--against", against])


def test_a_removed_field_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = _earlier(tmp_path, "type RunLogLine {\n", "type RunLogLine {\n  formerField: String\n")
    assert _check(tmp_path, monkeypatch, earlier) == 1
    out, err = capsys.readouterr()
    assert "breaking (NOT ANNOUNCED): FIELD_REMOVED: Field RunLogLine.formerField was removed." in out
    assert "docs/schema-changes.md" in err  # the refusal says how to announce it
    assert "- Field RunLogLine.formerField was removed." in err


def test_an_argument_made_required_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Earlier, runLog's runId was optional; the code now requires it.
    required = '"""The run to read."""\n    runId: ID!'
    earlier = _earlier(tmp_path, required, required.rstrip("!"))
    assert _check(tmp_path, monkeypatch, earlier) == 1
    out = capsys.readouterr().out
    assert "breaking (NOT ANNOUNCED): ARG_CHANGED_KIND:" in out
    assert "runId" in out


def test_a_required_argument_added_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = _earlier(tmp_path, '"""The run to read."""\n    runId: ID!\n', "")
    assert _check(tmp_path, monkeypatch, earlier) == 1
    assert "REQUIRED_ARG_ADDED" in capsys.readouterr().out


def test_an_output_made_nullable_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Earlier, stepId was always there; now it may be null, which a typed client does not expect.
    line_type = SDL[SDL.index("type RunLogLine {") :]
    step_id = line_type[: line_type.index("  stepId: ID\n") + len("  stepId: ID\n")]
    earlier = _earlier(tmp_path, step_id, step_id.replace("  stepId: ID\n", "  stepId: ID!\n"))
    assert _check(tmp_path, monkeypatch, earlier) == 1
    out = capsys.readouterr().out
    assert "FIELD_CHANGED_KIND: Field RunLogLine.stepId changed type from ID! to ID." in out


def test_an_added_optional_field_and_argument_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Earlier, RunLogLine had no `phase` and writeRunLog no idempotencyKey: both are additive.
    earlier_sdl = SDL.replace('  """The phase the line is about, if any."""\n  phase: Int\n', "", 1)
    key_argument = r'\n\n    """\n    Makes a retry safe[^"]*"""\n    idempotencyKey: String = null'
    earlier_sdl = re.sub(key_argument, "", earlier_sdl)
    assert earlier_sdl.count("phase: Int\n") < SDL.count("phase: Int\n")
    assert "idempotencyKey: String" not in earlier_sdl
    path = tmp_path / "earlier.graphql"
    path.write_text(earlier_sdl, encoding="utf-8")
    assert _check(tmp_path, monkeypatch, str(path)) == 0
    out = capsys.readouterr().out
    assert "breaking (" not in out
    assert "dangerous: OPTIONAL_ARG_ADDED" in out  # said, but not a failure


def test_an_announced_breaking_change_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = _earlier(tmp_path, "type RunLogLine {\n", "type RunLogLine {\n  formerField: String\n")
    announcements = (
        "# Schema changes\n\n"
        "- `Field RunLogLine.formerField was removed.` It never held anything; clients drop it.\n"
    )
    assert _check(tmp_path, monkeypatch, earlier, announcements) == 0
    out = capsys.readouterr().out
    assert "breaking (announced): FIELD_REMOVED: Field RunLogLine.formerField was removed." in out


def test_an_announcement_only_covers_the_change_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = _earlier(
        tmp_path, "type RunLogLine {\n", "type RunLogLine {\n  formerField: String\n  otherField: Int\n"
    )
    # An example inside a code block announces nothing.
    announcements = (
        "- Field RunLogLine.formerField was removed. Unused.\n\n"
        "```\n- Field RunLogLine.otherField was removed.\n```\n"
    )
    assert _check(tmp_path, monkeypatch, earlier, announcements) == 1
    out = capsys.readouterr().out
    assert "breaking (announced): FIELD_REMOVED: Field RunLogLine.formerField was removed." in out
    assert "breaking (NOT ANNOUNCED): FIELD_REMOVED: Field RunLogLine.otherField was removed." in out


def test_an_unknown_revision_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path, monkeypatch, "no-such-revision") == 2
    assert "--against no-such-revision: neither a file nor a git revision" in capsys.readouterr().err


def test_this_checkout_passes_against_the_version_before_the_latest_schema_change() -> None:
    """What CI runs: the default baseline, from git history, on this very checkout."""
    done = subprocess.run(
        [sys.executable, "-m", "gql", "check-schema"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the version before" in done.stdout
