"""What a failure means: unavailable or a fault, answered by the database or not; its one-line account."""

from __future__ import annotations

from typing import Any

from sqlalchemy import exc as sa_exc

# ── writing lines ────────────────────────────────────────────────────────────
# Never sent, or refused and rolled back (NotStored); or sent with no answer (OutcomeUnknown).


class NotStored(Exception):
    """Nothing of the line (or batch) was stored; `refused_by_database` when the database said no."""

    def __init__(self, reason: str, *, refused_by_database: bool = False, transient: bool = True) -> None:
        super().__init__(reason)
        self.refused_by_database = refused_by_database
        # About time or locks: trying the same lines again now would only spend their callers' time.
        self.transient = transient


class OutcomeUnknown(Exception):
    """The statement was sent and no answer came back: the line may have been stored.

    From a prune: `deleted` lines went in earlier slices, and up to `up_to` more may have.
    """

    def __init__(self, reason: str, *, deleted: int = 0, up_to: int = 0) -> None:
        super().__init__(reason)
        self.deleted = deleted
        self.up_to = up_to


class KeyReused(Exception):
    """An idempotency key already stored a different line of the same run."""


def answered_by_database(exc: BaseException, dialect_name: str) -> bool:
    """Whether `exc` is the database's own answer to a statement (so it rolled back).

    Not MySQL's client errors (2000 to 2999: the statement may have run); every SQLite error.
    """
    if not isinstance(exc, sa_exc.DBAPIError) or exc.connection_invalidated:
        return False
    if dialect_name == "sqlite":
        return True
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    code = args[0] if args else None
    return isinstance(code, int) and not 2000 <= code < 3000


def one_line_reason(exc: BaseException) -> str:
    """A one-line account of a failure for the server's log: the driver's own words."""
    original = getattr(exc, "orig", None) or exc
    return f"{type(original).__name__}: {original}".splitlines()[0]


def is_conflict(exc: BaseException | None) -> bool:
    """Whether `exc` is a deadlock (1213): a transaction rolled back whole because another won."""
    args: tuple[Any, ...] = getattr(getattr(exc, "orig", None), "args", ())
    return isinstance(exc, sa_exc.DBAPIError) and args[:1] == (1213,)


# MySQL/MariaDB errors meaning "not reachable now, try again": too many connections (1040),
# shutdown (1053), lock wait timeout (1205), deadlock (1213), interrupted (1317), killed
# (1927), max_statement_time (1969), can't connect (2002, 2003), gone away (2006), lost (2013, 2055).
_TRANSIENT_MYSQL_ERRORS = frozenset({1040, 1053, 1205, 1213, 1317, 1927, 1969, 2002, 2003, 2006, 2013, 2055})


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database is down, unreachable, slow or busy (else: a fault, no use retrying)."""
    if isinstance(exc, TimeoutError | OSError | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    original = exc.orig
    args = getattr(original, "args", ())
    if args and isinstance(args[0], int) and args[0] in _TRANSIENT_MYSQL_ERRORS:
        return True
    # SQLite: locked past busy_timeout, or the file gone or read-only.
    name = getattr(original, "sqlite_errorname", None) or ""
    return name in ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN") or name.startswith("SQLITE_READONLY")
