"""The lock files: made from pyproject.toml as it is, consistent, and what every install uses."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text(encoding="utf-8")
    return {name.lower(): version for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def _check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/lock", "--check"],  # noqa: S607 - bash from PATH, as CI runs it
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "checkout"
    (copy / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "requirements.lock", "requirements-test.lock", "scripts/lock"):
        shutil.copy(ROOT / name, copy / name)
    return copy


def test_the_lock_files_are_current() -> None:
    done = _check(ROOT)
    assert done.returncode == 0, done.stderr


def test_a_dependency_added_to_pyproject_makes_the_lock_stale_and_says_the_fix(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    pyproject.write_text(text.replace('    "orjson>=3.10",\n', '    "orjson>=3.10",\n    "uvloop>=0.21",\n'))
    done = _check(copy)
    assert done.returncode == 1
    assert "requirements-test.lock is stale" in done.stderr
    assert "Run scripts/lock" in done.stderr


def test_a_comment_or_tool_setting_does_not_make_the_lock_stale(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + "\n# a note\n[tool.example]\nx = 1\n")
    assert _check(copy).returncode == 0


def test_every_declared_dependency_is_pinned_and_the_runtime_pins_equal_the_test_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    test_pins, runtime_pins = _pins("requirements-test.lock"), _pins("requirements.lock")

    def name(requirement: str) -> str:
        found = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert found, requirement
        return found.group(0).lower().replace("_", "-")

    assert {name(r) for r in project["dependencies"]} <= runtime_pins.keys()
    assert {name(r) for r in project["optional-dependencies"]["test"]} <= test_pins.keys()
    assert runtime_pins.items() <= test_pins.items()  # the image runs what CI tested


def test_every_install_goes_through_the_lock() -> None:
    install = (ROOT / "scripts/install").read_text(encoding="utf-8")
    assert "--require-hashes -r requirements-test.lock" in install
    assert "scripts/lock --check" in install
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "pip install --require-hashes -r requirements.lock" in dockerfile
    assert "scripts/lock --check" in (ROOT / ".ci/run").read_text(encoding="utf-8")
