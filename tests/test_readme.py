"""The README's quick start runs as written; its commands and links, and the docs', lead somewhere.

Every fenced block the README marks `<!-- quick start ... -->` is cut into
commands at its blank lines; each command runs in bash, in order, against a
server started on a fresh embedded database, and a `# {...}` comment after a
command is the JSON it must print. The server is what `scripts/serve` starts
(`scripts/install`, then `python -m gql serve`), on a free port and a SQLite
file of the test's own instead of 8000 and `runlog.db`. The README's other
command, `scripts/test`, is what CI runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import free_port, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
MARKER = "<!-- quick start:"
DEFAULT = "http://127.0.0.1:8000"
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def quick_start() -> list[tuple[str, str | None]]:
    """(command, the JSON it must print or None), in README order."""
    commands: list[tuple[str, str | None]] = []
    for block in re.findall(re.escape(MARKER) + r"[^\n]*\n```sh\n(.*?)\n```", README, re.S):
        for unit in block.split("\n\n"):
            lines = unit.strip("\n").splitlines()
            said = [line[2:] for line in lines if line.startswith("# ")]
            command = "\n".join(line for line in lines if not line.startswith("# "))
            commands.append((command, said[0] if said and said[0].startswith("{") else None))
    return commands


def test_the_readme_marks_its_quick_start() -> None:
    commands = quick_start()
    assert len(commands) >= 3
    assert README.count(MARKER) == len(re.findall(re.escape(MARKER) + r"[^\n]*\n```sh\n", README))
    assert all(DEFAULT in command for command, _ in commands)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    database = tmp_path / "runlog.db"
    server = subprocess.Popen(
        [sys.executable, "-m", "gql", "serve", "--port", str(port)],
        env={**os.environ, "RUNLOG_DATABASE_URL": f"sqlite+aiosqlite:///{database}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, server)
        yield url
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_every_quick_start_command_runs_as_written(served: str, tmp_path: Path) -> None:
    for command, expected in quick_start():
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command.replace(DEFAULT, served)],  # noqa: S607
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        answer = json.loads(done.stdout)
        assert "errors" not in answer, f"{command}\n{done.stdout}"
        if expected is not None:
            assert answer == json.loads(expected), f"{command}\nsaid {done.stdout}\nREADME says {expected}"


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_leads_to_a_file(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    for target in re.findall(r"\]\((?!https?:|mailto:|#)([^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / page).parent.joinpath(target).exists(), f"{page} links to {target}, which is not there"


def _shell_lines(page: str) -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [line for block in re.findall(r"```sh\n(.*?)\n```", text, re.S) for line in block.splitlines()]


@pytest.mark.parametrize("page", PAGES)
def test_every_gql_command_is_in_the_one_form(page: str) -> None:
    """`.venv/bin/python -m gql X`, after scripts/install: a bare `python` has no sqlalchemy.

    test_promises.py parses each command in this form as the CLI would.
    """
    for line in _shell_lines(page):
        for found in re.finditer(r"(\S*python3?) -m (gql|bench)\b", line):
            assert found.group(1) == ".venv/bin/python", f"{page}: {line}"
