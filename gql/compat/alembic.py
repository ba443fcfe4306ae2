"""Alembic's non-public names the service relies on (tested in tests/test_compat.py)."""

from __future__ import annotations

from typing import Any

from alembic.script import ScriptDirectory

__all__ = ["adopt_and_upgrade_steps", "upgrade_steps"]


def upgrade_steps(script: ScriptDirectory, start: str | None) -> list[Any]:
    """The steps from `start` (or an empty database) to the head (`ScriptDirectory._upgrade_revs`).

    What `alembic.command.upgrade` hands its environment; the command itself
    reads alembic.ini's env.py, which the service does not ship.
    """
    return list(script._upgrade_revs("head", start or "base"))


def adopt_and_upgrade_steps(script: ScriptDirectory, adopted: str) -> list[Any]:
    """Stamp an unversioned database at `adopted`, then the steps to the head, in one pass.

    `ScriptDirectory._stamp_revs` and `_upgrade_revs` are what
    `alembic.command.stamp` and `upgrade` run; no public call runs both in
    one environment, which is what makes `init-db` create alembic_version,
    stamp it and apply the rest online and in the printed SQL alike. Without
    them a database made by a release before migrations cannot be adopted.
    """
    return [*script._stamp_revs(adopted, ()), *script._upgrade_revs("head", adopted)]
