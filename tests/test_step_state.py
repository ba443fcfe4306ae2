"""event_run_log_steps, each step's newest step line, is what the whole log says, on both databases.

Kept by triggers (gql/store/step_state.py): after lines written straight into the table with `at`
going backwards against `id` and ties in `at`, after lines written through the API, after
prunes of part and then all of a run, and after init-db migrated a log written before it.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

from .conftest import ADMIN, Api, Backend
from .test_migrations import init_db_cli, seed_database

STEP_KINDS = ("step.parked", "step.retry", "step.refused", "step.status")
START = datetime.datetime(2026, 6, 1, 18, 0)


def newest(backend: Backend) -> dict[tuple[int, int], tuple[int, str]]:
    """Each (run, step)'s newest step line's (id, kind), from every line (by at, then id)."""
    found: dict[tuple[int, int], tuple[Any, int, str]] = {}
    for line_id, run_id, step_id, kind, at in backend.rows(
        "SELECT id, run_id, step_id, kind, at FROM event_run_log WHERE step_id IS NOT NULL"
    ):
        if kind not in STEP_KINDS:
            continue
        at = at if isinstance(at, datetime.datetime) else datetime.datetime.fromisoformat(at)
        held = found.get((run_id, step_id))
        if held is None or (held[0], held[1]) < (at, line_id):
            found[run_id, step_id] = (at, line_id, kind)
    return {key: (line_id, kind) for key, (_, line_id, kind) in found.items()}


def kept(backend: Backend) -> dict[tuple[int, int], tuple[int, str]]:
    """What event_run_log_steps says: the steps with a step line left, and that line's (id, kind)."""
    rows = backend.rows("SELECT run_id, step_id, id, kind FROM event_run_log_steps WHERE id IS NOT NULL")
    return {(run_id, step_id): (line_id, kind) for run_id, step_id, line_id, kind in rows}


def write_lines(backend: Backend, count: int, seed: int, runs: tuple[int, ...] = (1, 2)) -> None:
    """`count` lines straight into the table, a few to a statement: `at` drawn apart from the ids."""
    rng = random.Random(seed)
    kinds = (*STEP_KINDS, "note", "phase.completed")
    for start in range(0, count, 25):
        values = [
            {
                "run": rng.choice(runs),
                "step": rng.choice([None, 1, 2, 3, 4, 5, 6]),
                "kind": rng.choice(kinds),
                "at": (START + datetime.timedelta(seconds=rng.randint(0, 40))).strftime("%Y-%m-%d %H:%M:%S"),
            }
            for _ in range(min(25, count - start))
        ]
        with backend.sync.begin() as conn:
            for value in values:
                conn.exec_driver_sql(
                    "INSERT INTO event_run_log (run_id, step_id, kind, at) VALUES "
                    + ("(?, ?, ?, ?)" if backend.name == "sqlite" else "(%s, %s, %s, %s)"),
                    (value["run"], value["step"], value["kind"], value["at"]),
                )


def test_the_kept_lines_are_the_newest_with_at_going_backwards_and_ties(tables: Backend) -> None:
    write_lines(tables, 400, seed=45)
    assert kept(tables) == newest(tables)
    assert len(kept(tables)) == 12  # every step of both runs has a step line


def test_the_kept_lines_follow_writes_through_the_api(tables: Backend, api: Api) -> None:
    for n, kind in enumerate(("step.status", "step.parked", "note", "step.retry", "step.status")):
        assert api.write(1, kind, None, stepId=str(1 + n % 2))
    assert kept(tables) == newest(tables) == {(1, 1): (5, "step.status"), (1, 2): (4, "step.retry")}


def test_a_delete_of_any_lines_leaves_each_steps_newest_left(tables: Backend) -> None:
    write_lines(tables, 300, seed=7)
    rng = random.Random(7)
    ids = [row[0] for row in tables.rows("SELECT id FROM event_run_log")]
    while ids:
        gone = set(rng.sample(ids, min(40, len(ids))))
        ids = [i for i in ids if i not in gone]
        tables.execute(f"DELETE FROM event_run_log WHERE id IN ({', '.join(map(str, gone))})")
        assert kept(tables) == newest(tables)
    assert kept(tables) == {}


def test_a_prune_in_slices_leaves_each_steps_newest_left(tables: Backend, api: Api) -> None:
    tables.add_run(1, "completed", "2026-01-01 00:00:00", "2026-01-01 00:00:00")
    tables.add_run(2, "live", None, "2026-01-01 00:00:00")
    write_lines(tables, 200, seed=3)
    prune = "mutation($before: DateTime!, $limit: Int) { pruneTerminal(before: $before, limit: $limit) }"
    while api.post(prune, {"before": "2026-02-01T00:00:00", "limit": 30}, token=ADMIN)["data"][
        "pruneTerminal"
    ]:
        assert kept(tables) == newest(tables)
    assert {run for run, _ in kept(tables)} == {2}  # the live run's are all there still
    assert kept(tables) == newest(tables)


def test_init_db_fills_the_table_from_a_log_written_before_it(backend: Backend) -> None:
    seed_database(backend)  # the events system's table, with no trigger on it
    write_lines(backend, 300, seed=11, runs=(7, 8))
    init_db_cli(backend)
    assert kept(backend) == newest(backend)
    assert len(kept(backend)) == 12
    write_lines(backend, 50, seed=12, runs=(7,))  # and kept from then on
    assert kept(backend) == newest(backend)
