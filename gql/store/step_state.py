"""The triggers that keep `event_run_log_steps`, each step's newest step line, as lines come and go.

Triggers, not the write path: a line is counted whoever writes it (a writer, a test, the
demo, a restore), in the transaction that writes it, and a prune or any DELETE is followed
too. `triggers(dialect)` is what db.py's model and revision 0009 create; `backfill(dialect)`
fills the table from a log already written. Newest is by `at`, then `id` (`at` as SQLite's
reads order it, gql.store.db.SQLITE_AT_ORDER); a step with no step line left keeps a row of NULLs.
"""

# ruff: noqa: S608  (every statement here is made of this module's constants: no value is spliced in)
from __future__ import annotations

STEP_KINDS = ("step.parked", "step.retry", "step.refused", "step.status")
_KINDS = ", ".join(f"'{kind}'" for kind in STEP_KINDS)
_T = "event_run_log_steps"


def _utc(at: str) -> str:
    """SQLite's normalised `at` (gql.store.db.SQLITE_AT_ORDER) of the column `at`."""
    return (
        f"coalesce(CASE WHEN {at} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' "
        f"THEN strftime('%Y-%m-%d %H:%M:%f', {at}) END, '')"
    )


def _newest_of(dialect: str, column: str) -> str:
    """The deleted line's step's newest remaining step line's `column` (in a DELETE trigger)."""
    at = _utc("at") if dialect == "sqlite" else "at"
    return (
        f"(SELECT {column} FROM event_run_log WHERE run_id = OLD.run_id AND step_id = OLD.step_id "
        f"AND kind IN ({_KINDS}) ORDER BY {at} DESC, id DESC LIMIT 1)"
    )


def _upsert(dialect: str, rows: str) -> str:
    """INSERT `rows` (run_id, step_id, id, kind, line_at), each kept where it is newer than the row's."""
    insert = f"INSERT INTO {_T} (run_id, step_id, id, kind, line_at) {rows}"
    if dialect == "sqlite":
        newer = (
            "id IS NULL OR excluded.line_at > line_at OR (excluded.line_at = line_at AND excluded.id > id)"
        )
        return (
            f"{insert} ON CONFLICT (run_id, step_id) DO UPDATE SET id = excluded.id, "
            f"kind = excluded.kind, line_at = excluded.line_at WHERE {newer}"
        )
    # MariaDB assigns in order, each seeing the last: `kind` and `id` are decided on the old row.
    id, at = f"{_T}.id", f"{_T}.line_at"  # named: a backfill's SELECT has columns of the same names
    newer = f"{id} IS NULL OR VALUES(line_at) > {at} OR (VALUES(line_at) = {at} AND VALUES(id) > {id})"
    return (
        f"{insert} ON DUPLICATE KEY UPDATE kind = IF({newer}, VALUES(kind), {_T}.kind), "
        f"id = IF({newer}, VALUES(id), {id}), line_at = IF({id} = VALUES(id), VALUES(line_at), {at})"
    )


def triggers(dialect: str) -> list[str]:
    """The CREATE TRIGGERs on event_run_log that keep the table: one for INSERT, one for DELETE.

    Each one statement on MariaDB (no DELIMITER needed where `init-db --sql` is piped).
    """
    on = "AFTER INSERT ON event_run_log"
    gone = "AFTER DELETE ON event_run_log"
    # The deleted line was its step's newest: the newest left takes its place (NULLs: none left).
    again = ", ".join(f"{name} = {_newest_of(dialect, column)}" for name, column in _REFILL[dialect])
    refill = f"UPDATE {_T} SET {again} WHERE run_id = OLD.run_id AND step_id = OLD.step_id AND id = OLD.id"
    if dialect == "sqlite":
        new = f"SELECT NEW.run_id, NEW.step_id, NEW.id, NEW.kind, {_utc('NEW.at')}"
        return [
            f"CREATE TRIGGER IF NOT EXISTS {_T}_insert {on} "
            f"WHEN NEW.step_id IS NOT NULL AND NEW.kind IN ({_KINDS}) "
            f"BEGIN {_upsert(dialect, new + ' WHERE true')}; END",
            f"CREATE TRIGGER IF NOT EXISTS {_T}_delete {gone} "
            f"WHEN OLD.step_id IS NOT NULL AND OLD.kind IN ({_KINDS}) BEGIN {refill}; END",
        ]
    new = (
        "SELECT NEW.run_id, NEW.step_id, NEW.id, NEW.kind, NEW.at FROM DUAL "
        f"WHERE NEW.step_id IS NOT NULL AND NEW.kind IN ({_KINDS})"
    )
    return [
        f"CREATE TRIGGER IF NOT EXISTS {_T}_insert {on} FOR EACH ROW {_upsert(dialect, new)}",
        f"CREATE TRIGGER IF NOT EXISTS {_T}_delete {gone} FOR EACH ROW {refill}",
    ]


# The row's columns a DELETE refills, in an order MariaDB's in-order assignment allows: `id`,
# which the other subqueries do not read, last.
_REFILL = {
    "sqlite": [("kind", "kind"), ("line_at", _utc("at")), ("id", "id")],
    "mysql": [("kind", "kind"), ("line_at", "at"), ("id", "id")],
}
_REFILL["mariadb"] = _REFILL["mysql"]


def backfill(dialect: str) -> str:
    """The INSERT that fills the table from the lines already written (kept newest-wins, as the
    triggers keep it: safe beside writers once the triggers are in place)."""
    at = _utc("at") if dialect == "sqlite" else "at"
    newest = (
        f"SELECT run_id, step_id, id, kind, line_at FROM (SELECT run_id, step_id, id, kind, {at} AS line_at, "
        f"ROW_NUMBER() OVER (PARTITION BY run_id, step_id ORDER BY {at} DESC, id DESC) AS n "
        f"FROM event_run_log WHERE step_id IS NOT NULL AND kind IN ({_KINDS})) newest WHERE n = 1"
    )
    return _upsert(dialect, newest)
