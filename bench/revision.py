"""An older revision of the service, served beside this tree's: `python -m bench --against REV`.

The revision's files are taken with `git archive` into a temporary directory
(removed when the run ends, however it ends) and served from there with this
tree's `.venv`: that directory goes first on PYTHONPATH and is the server's
working directory, so `python -m gql` imports its `gql` rather than the one
the venv has installed (editable, from this tree). The packages are the
venv's, so a revision is refused when the pins of its `requirements.lock`
differ from this tree's: its figures would then measure other libraries too,
not only its code.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.operations import Operation, as_at_revision, shipped_in

ROOT = Path(__file__).resolve().parent.parent
LOCK = "requirements.lock"
OPERATIONS = "gql/operations"  # where a revision ships its operations
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-\[\],]*)==(\S+)", re.MULTILINE)


class Refused(Exception):
    """The revision cannot be measured beside this tree; the message says why."""


@dataclass(frozen=True)
class Revision:
    """A revision's files, ready to serve."""

    spec: str  # as given: `main~3`, `c02314c`, ...
    commit: str  # the full hash it names
    tree: Path

    @property
    def label(self) -> str:
        short = self.commit[:7]
        return short if self.spec.lower() in self.commit else f"{self.spec} = {short}"

    def operation_files(self) -> dict[str, str]:
        """The revision's `gql/operations/*.graphql`, by file name: the operations it shipped."""
        return operation_files(self.commit)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """`base` with the revision's files first on PYTHONPATH."""
        path = [str(self.tree), *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))]
        return {**base, "PYTHONPATH": os.pathsep.join(path)}


def _git(*args: str, stdin: bytes | None = None) -> bytes:
    # Our own git arguments; `spec` only ever follows `--verify` or is a hash git gave back.
    done = subprocess.run(  # noqa: S603
        ["git", "-C", str(ROOT), *args],  # noqa: S607 -- git from PATH, as a developer runs it
        input=stdin,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise Refused(f"git {' '.join(args)} failed in {ROOT}: {done.stderr.decode().strip()}")
    return done.stdout


def operation_files(commit: str) -> dict[str, str]:
    """The `.graphql` files of `gql/operations/` at `commit`, by file name, read with `git show`."""
    names = _git("ls-tree", "--name-only", f"{commit}:{OPERATIONS}").decode().split()
    return {
        name: _git("show", f"{commit}:{OPERATIONS}/{name}").decode()
        for name in names
        if name.endswith(".graphql")
    }


def pins(lock: str) -> dict[str, str]:
    """The `name==version` pins of a lock file, by lower-cased name."""
    return {name.lower(): version for name, version in _PIN.findall(lock)}


def lock_differences(theirs: str, ours: str) -> list[str]:
    """Each package pinned otherwise in `theirs` than in `ours`, as `name: A there, B here`."""
    old, new = pins(theirs), pins(ours)
    return [
        f"{name}: {old.get(name, 'absent')} there, {new.get(name, 'absent')} here"
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    ]


def resolve(spec: str) -> str:
    """The commit `spec` names in this repository, or Refused saying it names none."""
    try:
        return (
            _git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{spec}^{{commit}}")
            .decode()
            .strip()
        )
    except Refused:
        raise Refused(
            f"--against {spec}: no commit of that name in {ROOT} (git rev-parse found none)"
        ) from None


def check_lock(spec: str, commit: str) -> None:
    """Refuse a revision whose lock file pins other packages than this tree's."""
    try:
        theirs = _git("show", f"{commit}:{LOCK}").decode()
    except Refused:
        raise Refused(
            f"--against {spec}: that revision has no {LOCK}, so what it runs on is unknown"
        ) from None
    differences = lock_differences(theirs, (ROOT / LOCK).read_text())
    if differences:
        shown = "; ".join(differences[:8]) + ("; ..." if len(differences) > 8 else "")
        raise Refused(
            f"--against {spec}: its {LOCK} pins other packages than this tree's ({shown}). "
            "It would be served with this tree's .venv, so its figures would measure those packages "
            "too, not only its code: compare revisions whose lock files pin the same versions"
        )


@contextmanager
def checkout(spec: str) -> Iterator[Revision]:
    """The files of revision `spec` in a temporary directory, removed when the block ends."""
    commit = resolve(spec)
    check_lock(spec, commit)
    archive = _git("archive", "--format=tar", commit)
    with tempfile.TemporaryDirectory(prefix=f"runlog-bench-{commit[:7]}-") as tmp:
        # tar from PATH, reading the archive git just wrote.
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)  # noqa: S603, S607
        revision = Revision(spec, commit, Path(tmp))
        found = subprocess.run(
            [sys.executable, "-c", "import gql; print(gql.__file__)"],
            env=revision.env(dict(os.environ)),
            cwd=revision.tree,
            capture_output=True,
            text=True,
            check=False,
        )
        imported = Path(found.stdout.strip() or "?")
        if found.returncode != 0 or not imported.is_relative_to(revision.tree):
            raise Refused(
                f"--against {spec}: its files in {tmp} would not be the `gql` imported "
                f"(got {imported}; {found.stderr.strip()[-300:]})"
            )
        yield revision


def against(
    stack: ExitStack, parser: argparse.ArgumentParser, spec: str | None, operation: Operation, limit: int
) -> tuple[Revision | None, str | None]:
    """`--against spec` checked out for the `stack`'s life, and the body its operation of that name is sent.

    (None, None) without `spec`; a revision that cannot be checked out, or has no such
    operation, is the parser's error.
    """
    if spec is None:
        return None, None
    try:
        revision = stack.enter_context(checkout(spec))
    except Refused as exc:
        parser.error(str(exc))
    theirs = as_at_revision(
        operation, shipped_in(revision.operation_files(), f"{revision.label}:"), revision.label
    )
    if theirs.skip is not None:
        parser.error(f"--against {spec}: {theirs.skip}")
    return revision, theirs.body(limit)
