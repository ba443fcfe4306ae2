"""What must never reach a client: the server's insides."""

from __future__ import annotations

import re
from typing import Any

# Each says the response came from inside the server rather than from the
# schema: a stack, a driver or module name, a file path, SQL, a table name,
# a connection string.
_LEAKS = re.compile(
    r"Traceback|File \"|site-packages|\.py\b|/gql/|gql\.(?:app|schema|store|db)"
    r"|sqlalchemy|aiomysql|pymysql|aiosqlite|sqlite3|OperationalError|ProgrammingError"
    r"|event_run_log|event_runs|mysql\+|sqlite\+|Background on this error",
    re.IGNORECASE,
)
# SQL as SQLAlchemy writes it: upper-case keywords.
_SQL = re.compile(r"\b(?:SELECT|INSERT INTO|DELETE FROM|UPDATE)\b")


def leaks(text: str) -> list[str]:
    """The fragments of `text` that give away the server's insides."""
    return _LEAKS.findall(text) + _SQL.findall(text)


def assert_clean_errors(body: Any) -> None:
    """Every error in a GraphQL response says nothing of the server's insides."""
    if not isinstance(body, dict):
        return
    for error in body.get("errors") or []:
        found = leaks(str(error))
        assert not found, f"error leaks {found}: {error}"
