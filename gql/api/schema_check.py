"""`check-schema`: what changed between an earlier SDL and the schema this code serves.

A breaking change passes only when `docs/schema-changes.md` announces it, word for word, as a list item.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

from graphql import build_schema, find_breaking_changes, find_dangerous_changes

SCHEMA_FILE = "schema.graphql"
ANNOUNCEMENTS_FILE = "docs/schema-changes.md"


class BaselineError(Exception):
    """The earlier SDL could not be found (no such file, revision or history)."""


@dataclasses.dataclass(frozen=True)
class Change:
    kind: str  # graphql-core's change type, e.g. FIELD_REMOVED
    description: str  # graphql-core's sentence, e.g. "RunLogLine.kind was removed."


@dataclasses.dataclass(frozen=True)
class Report:
    breaking: list[Change]
    dangerous: list[Change]
    announced: frozenset[str]  # the announced descriptions among `breaking`

    @property
    def unannounced(self) -> list[Change]:
        return [change for change in self.breaking if change.description not in self.announced]


def compare(old_sdl: str, new_sdl: str, announcements: str = "") -> Report:
    """The breaking and dangerous changes from `old_sdl` to `new_sdl`, and which are announced."""
    old, new = build_schema(old_sdl), build_schema(new_sdl)
    breaking = [Change(c.type.name, c.description) for c in find_breaking_changes(old, new)]
    dangerous = [Change(c.type.name, c.description) for c in find_dangerous_changes(old, new)]
    listed = announced_changes(announcements)
    return Report(breaking, dangerous, frozenset(c.description for c in breaking if c.description in listed))


def announced_changes(markdown: str) -> set[str]:
    """The list items of the announcements page, outside code blocks, as announced descriptions."""
    items: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        item = re.match(r"\s*[-*]\s+(.*)", line)
        if item and not fenced:
            text = item.group(1).replace("`", "")
            # Every sentence graphql-core writes ends with a period; keep each
            # prefix that ends at one, so the item may go on after it.
            items.update(text[: end + 1] for end in range(len(text)) if text[end] == ".")
    return items


def repo_root(start: Path) -> Path:
    """The git checkout `start` is in; `start` itself outside one (then only --against FILE works)."""
    try:
        return Path(_git(start, "rev-parse", "--show-toplevel").strip())
    except BaselineError:
        return start


def baseline(against: str | None, root: Path) -> tuple[str, str]:
    """The earlier SDL and where it came from: a file, a git revision, or before its latest change."""
    if against is not None and Path(against).is_file():
        return Path(against).read_text(encoding="utf-8"), against
    if against is None:
        latest = _git(root, "log", "-1", "--format=%h", "--", SCHEMA_FILE).strip()
        if not latest:
            raise BaselineError(f"no commit in {root} has changed {SCHEMA_FILE}; give --against FILE")
        against = f"{latest}^"
        where = f"{SCHEMA_FILE} at {against} (the version before {latest}, its latest change)"
    else:
        where = f"{SCHEMA_FILE} at {against}"
    try:
        return _git(root, "show", f"{against}:{SCHEMA_FILE}"), where
    except BaselineError as exc:
        raise BaselineError(
            f"--against {against}: neither a file nor a git revision that has {SCHEMA_FILE} ({exc})"
        ) from None


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - fixed git arguments; the revision is the caller's own
            ["git", "-C", str(root), *args],  # noqa: S607 - git from PATH, as a developer runs it
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise BaselineError("git is not installed; give --against FILE") from None
    if done.returncode != 0:
        raise BaselineError(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout
