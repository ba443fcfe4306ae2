"""The statements that read pages and recent lines, for both dialects, each shape built once."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    LargeBinary,
    Select,
    String,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    not_,
    null,
    or_,
    select,
)

from .cursors import Cursor
from .db import SQLITE_AT_ORDER, event_run_log, event_run_log_words
from .values import NO_FILTERS, Filters

_l = event_run_log
# What SQLite orders a line by; spelt as the index spells it (db.SQLITE_AT_ORDER).
sqlite_at: ColumnElement[Any] = literal_column(SQLITE_AT_ORDER)


def sqlite_text(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """A text column read as bytes: SQLite's driver fails a whole fetch on one value that is not UTF-8."""
    return cast(column, LargeBinary)


def _sqlite_number(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """An INTEGER column: text in it (maybe not UTF-8) comes as bytes, numbers as they are."""
    return case((func.typeof(column) == "text", cast(column, LargeBinary)), else_=column)


def page_query(**arguments: Any) -> Select[Any]:
    """`page_statement`'s statement with its values bound."""
    statement, values = page_statement(**arguments)
    return statement.params(values)


def page_statement(
    *,
    run_id: int,
    kinds: Sequence[str] | None,
    limit: int,
    after: Cursor | None,
    sqlite: bool = False,
    read: str = "lines",
    fits: int = 0,
    before: Cursor | None = None,
    filters: Filters = NO_FILTERS,
    ids: Sequence[int] | None = None,
) -> tuple[Select[Any], dict[str, Any]]:
    """The one statement that reads a page, built once per shape, and the values for its parameters.

    `read` is one of PAGE_READS: "lines", "lines without detail" (NULL in its place), or
    "lines with sizes" (each detail's stored bytes last, the detail NULL past `fits`).
    `ids` (a search page's matches) keeps only those lines; `filters.search` is for `ids` to say.
    """
    # One more than asked: its presence is what makes hasNextPage exact.
    values: dict[str, Any] = {"run_id": run_id, "limit": limit + 1}
    if read == "lines with sizes":
        values["fits"] = fits
    if kinds is not None:
        values["kinds"] = sorted(set(kinds))
    narrowed = bind_filters(values, filters.without_search(), sqlite)
    if ids is not None:
        values["ids"] = list(ids)
        narrowed += ("ids",)
    if before is not None:
        return _newer_statement(values, before, sqlite, kinds is not None, read, narrowed)
    cursor = None
    if after is not None and after.at is not None:
        cursor = _bind_position(values, after, "after", sqlite)
    return _page_shape(sqlite, kinds is not None, cursor, read, narrowed), values


def bind_filters(values: dict[str, Any], filters: Filters, sqlite: bool) -> tuple[str, ...]:
    """Bind the values of `filters`; answer which of them the statement has (its shape)."""
    narrowed: list[str] = []
    phases, steps, since, until, search = filters
    if phases is not None:
        values["phases"] = sorted(set(phases))
        narrowed.append("phases")
    if steps is not None:
        values["steps"] = sorted(set(steps))
        narrowed.append("steps")
    if since is not None:
        values["since"] = as_compared(since, sqlite)
        narrowed.append("since")
    if until is not None:
        values["until"] = as_compared(until, sqlite)
        narrowed.append("until")
    if search is not None:
        values["search"] = search
        narrowed.append("search")
    return tuple(narrowed)


def _narrow(
    query: Select[Any], order: ColumnElement[Any], sqlite: bool, narrowed: tuple[str, ...]
) -> Select[Any]:
    """`query` with the filters `narrowed` names (see bind_filters)."""
    at_type = _at_type(sqlite)
    for name in narrowed:
        if name == "phases":
            query = query.where(_l.c.phase.in_(bindparam("phases", expanding=True)))
        elif name == "steps":
            query = query.where(_l.c.step_id.in_(bindparam("steps", expanding=True)))
        elif name == "since":
            query = query.where(order >= bindparam("since", type_=at_type))
        elif name == "until":
            query = query.where(order < bindparam("until", type_=at_type))
        elif name == "ids":
            query = query.where(_l.c.id.in_(bindparam("ids", expanding=True)))
            # By their ids, a few rows: MariaDB would otherwise walk the run's index in page order.
            for dialect in ("mysql", "mariadb"):
                query = query.with_hint(_l, "FORCE INDEX (PRIMARY)", dialect_name=dialect)
        else:
            raise ValueError(f"{name!r} is not a filter bind_filters names")
    return query


# What a page statement reads of each line (see page_statement).
PAGE_READS = ("lines", "lines without detail", "lines with sizes")


@functools.cache
def _page_shape(
    sqlite: bool, by_kinds: bool, cursor: str | None, read: str, narrowed: tuple[str, ...] = ()
) -> Select[Any]:
    if read not in PAGE_READS:
        raise ValueError(f"read={read!r} is not one of {PAGE_READS}")
    # NULL for a detail not asked for: the row keeps its shape.
    columns = line_columns(sqlite, detail=read != "lines without detail")
    detail = columns[5]
    order = sqlite_at if sqlite else _l.c.at
    if read == "lines with sizes":
        # Bytes as stored (MariaDB's LENGTH counts bytes). No literal: the raw read on
        # MariaDB binds every value by name.
        size = func.length(detail)
        fits = bindparam("fits", type_=Integer())
        columns[5] = case((size <= fits, detail)).label("detail")
        columns.append(size.label("size"))
    query = (
        select(*columns)
        .where(_l.c.run_id == bindparam("run_id"))
        .order_by(order.desc(), _l.c.id.desc())
        .limit(bindparam("limit", type_=Integer()))
    )
    if by_kinds:
        query = query.where(_l.c.kind.in_(bindparam("kinds", expanding=True)))
    if cursor is not None:
        query = query.where(_older_than(cursor, order, sqlite=sqlite))
    return _narrow(query, order, sqlite, narrowed)


def line_columns(sqlite: bool, *, detail: bool = True) -> list[ColumnElement[Any]]:
    """What a statement reading lines selects, in the order `rows` reads it; NULL without `detail`."""
    if not sqlite:
        stored: ColumnElement[Any] = _l.c.detail if detail else null().label("detail")
        return [_l.c.id, _l.c.run_id, _l.c.step_id, _l.c.kind, _l.c.phase, stored, _l.c.at]
    return [
        _l.c.id,
        _l.c.run_id,
        _sqlite_number(_l.c.step_id).label("step_id"),
        sqlite_text(_l.c.kind).label("kind"),
        _sqlite_number(_l.c.phase).label("phase"),
        sqlite_text(_l.c.detail).label("detail") if detail else null().label("detail"),
        sqlite_at.label("at_utc"),  # not `at`: the expression names the column `at`
        sqlite_text(_l.c.at).label("stored_at"),
    ]


def _older_than(
    cursor: str, order: ColumnElement[Any], *, sqlite: bool, name: str = "after"
) -> ColumnElement[bool]:
    """The lines after the cursor's, newest first by (order, id)."""
    after_id = bindparam(f"{name}_id", type_=Integer())
    if cursor == "null":
        # A NULL `at` (an older table's) sorts after every time. `<=>`, not IS NULL:
        # MariaDB reads `at IS NULL` on a NOT NULL DATETIME as "is the zero date".
        return and_(_l.c.at.op("<=>")(null()), _l.c.id < after_id)
    # As text, where the database compares its own value so: a zero date, or SQLite's normalised text.
    value = bindparam(f"{name}_at", type_=_at_type(cursor == "text" or sqlite))
    # Not a row comparison: both databases make `at <= x` an index range.
    older = and_(order <= value, or_(order < value, and_(order == value, _l.c.id < after_id)))
    if sqlite:
        return older
    # Lines with a NULL `at` come last, after every cursor with a time.
    return or_(older, _l.c.at.op("<=>")(null()))


def _bind_position(values: dict[str, Any], position: Cursor, name: str, sqlite: bool) -> str:
    """Bind a position's `{name}_at` and `{name}_id`; answer its kind: "time", "text" or "null"."""
    values[f"{name}_id"] = position.id
    if isinstance(position.at, str):
        if not (position.at or sqlite):
            return "null"
        values[f"{name}_at"] = position.at
        return "text"
    values[f"{name}_at"] = as_compared(position.at, sqlite) if position.at is not None else None
    return "time"


def _at_type(text: bool) -> Any:
    """The type a time is bound as: text (SQLite, a zero date), or MariaDB's DATETIME."""
    return String() if text else _l.c.at.type


def as_compared(at: datetime.datetime, sqlite: bool) -> Any:
    """A time as the page statements compare it: SQLite's normalised text, MariaDB's DATETIME."""
    return at.isoformat(sep=" ", timespec="milliseconds") if sqlite else at


def _newer_statement(
    values: dict[str, Any],
    before: Cursor,
    sqlite: bool,
    by_kinds: bool,
    read: str,
    narrowed: tuple[str, ...] = (),
) -> tuple[Select[Any], dict[str, Any]]:
    window = before.window
    if window is None:
        position = _bind_position(values, before, "before", sqlite)
        return _newer_shape(sqlite, by_kinds, position, None, False, read, narrowed), values
    floor = None if window.floor is None else _bind_position(values, window.floor, "floor", sqlite)
    settled = window.settled
    values["settled"] = (
        settled.isoformat(sep=" ", timespec="milliseconds")
        if sqlite
        else settled.replace(microsecond=settled.microsecond // 1000 * 1000)
    )
    if window.seen:
        values["seen"] = sorted(line_id for line_id, _ in window.seen)
    return _newer_shape(sqlite, by_kinds, None, floor, bool(window.seen), read, narrowed), values


@functools.cache
def _newer_shape(
    sqlite: bool,
    by_kinds: bool,
    position: str | None,
    floor: str | None,
    seen: bool,
    read: str,
    narrowed: tuple[str, ...] = (),
) -> Select[Any]:
    """The lines newer than a cursor, oldest first (see `Window` for what a window leaves out)."""
    order = sqlite_at if sqlite else _l.c.at
    query = _page_shape(sqlite, by_kinds, None, read, narrowed)
    query = query.order_by(None).order_by(order.asc(), _l.c.id.asc())
    if position is not None:
        query = query.where(_newer_than(position, order, sqlite=sqlite, name="before"))
    if floor is not None:
        query = query.where(_newer_than(floor, order, sqlite=sqlite, name="floor"))
    if position is None:
        query = query.where(order >= bindparam("settled", type_=_at_type(sqlite)))
    if seen:
        query = query.where(_l.c.id.not_in(bindparam("seen", expanding=True)))
    return query


def _newer_than(cursor: str, order: ColumnElement[Any], *, sqlite: bool, name: str) -> ColumnElement[bool]:
    """The lines before the cursor's in `_older_than`'s order: newer, by (order, id)."""
    line_id = bindparam(f"{name}_id", type_=Integer())
    if cursor == "null":
        # Every line with a time is newer than one with a NULL `at` (see _older_than).
        is_null = _l.c.at.op("<=>", is_comparison=True)(null())
        return or_(not_(is_null), and_(is_null, _l.c.id > line_id))
    value = bindparam(f"{name}_at", type_=_at_type(cursor == "text" or sqlite))
    # A NULL `at` compares as NULL: such lines are never newer than a time.
    return and_(order >= value, or_(order > value, and_(order == value, _l.c.id > line_id)))


@functools.cache
def details_statement(sqlite: bool) -> Select[Any]:
    """The details of the lines `ids`, by line id (the ones a page statement left out)."""
    detail = sqlite_text(_l.c.detail) if sqlite else _l.c.detail
    return select(_l.c.id, detail.label("detail")).where(_l.c.id.in_(bindparam("ids", expanding=True)))


@functools.cache
def count_statement(sqlite: bool) -> Select[Any]:
    order = sqlite_at if sqlite else _l.c.at
    earlier, since = bindparam("earlier", type_=_at_type(sqlite)), bindparam("since", type_=_at_type(sqlite))
    return (
        select(_l.c.run_id, func.count(), func.count(case((order >= since, _l.c.id))))
        .where(_l.c.run_id.in_(bindparam("runs", expanding=True)), order >= earlier)
        .group_by(_l.c.run_id)
    )


@functools.cache
def kind_counts_statement(sqlite: bool, narrowed: tuple[str, ...]) -> Select[Any]:
    """How many of a run's lines (under the filters `narrowed`) are of each kind: one grouped query."""
    order = sqlite_at if sqlite else _l.c.at
    kind = sqlite_text(_l.c.kind) if sqlite else _l.c.kind
    query = (
        select(kind.label("kind"), func.count())
        .where(_l.c.run_id == bindparam("run_id"))
        .group_by(_l.c.kind)
        .order_by(_l.c.kind)
    )
    return _narrow(query, order, sqlite, narrowed)


@functools.cache
def line_statement(sqlite: bool, by_kinds: bool, narrowed: tuple[str, ...]) -> Select[Any]:
    """The line `around` of a run, if it passes the filters: a page of one line, by id."""
    return _page_shape(sqlite, by_kinds, None, "lines", narrowed).where(_l.c.id == bindparam("around"))


@functools.cache
def recent_statement(sqlite: bool, by_kinds: bool, narrowed: tuple[str, ...] = ()) -> Select[Any]:
    """The ids and times of a run's newest `limit` lines stamped at or after `settled`, newest first."""
    order = sqlite_at if sqlite else _l.c.at
    columns: list[ColumnElement[Any]] = [_l.c.id, order.label("at_utc")]
    query = _page_shape(sqlite, by_kinds, None, "lines without detail", narrowed).with_only_columns(*columns)
    return query.where(order >= bindparam("settled", type_=_at_type(sqlite)))


# ── search: the words of lines (store/words.py) ──────────────────────────────

_w = event_run_log_words


@functools.lru_cache(maxsize=512)
def rows_insert_sql(
    table: str, columns: tuple[str, ...], count: int, mark: str, bound: str | None, returning: str = ""
) -> str:
    """The INSERT of `count` rows as the driver takes it: `mark` its placeholder (`%s`, SQLite's `?`).

    With `bound`, MariaDB ends the statement and rolls it back past that many seconds (error 1969);
    `returning`: the columns its RETURNING answers, if any.
    """
    row = f"({', '.join([mark] * len(columns))})"
    # Only our own table and column names: every value is a bound parameter.
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * count)}"  # noqa: S608
    if returning:
        sql = f"{sql} RETURNING {returning}"
    return sql if bound is None else f"SET STATEMENT max_statement_time={bound} FOR {sql}"


@functools.cache
def unfolded_statement(sqlite: bool) -> Select[Any]:
    """The first `limit` lines past the id `past` with no words kept: id, run, detail, `at` as ordered."""
    order = sqlite_at if sqlite else _l.c.at
    detail = sqlite_text(_l.c.detail) if sqlite else _l.c.detail
    return (
        select(_l.c.id, _l.c.run_id, detail.label("detail"), order.label("at_order"))
        .outerjoin(_w, and_(_w.c.run_id == _l.c.run_id, _w.c.id == _l.c.id))
        .where(_l.c.id > bindparam("past", type_=Integer()), _w.c.id.is_(None))
        .order_by(_l.c.id.asc())
        .limit(bindparam("limit", type_=Integer()))
    )


def _words_where(
    query: Select[Any], sqlite: bool, by_kinds: bool, narrowed: tuple[str, ...], join: bool = False
) -> Select[Any]:
    """`query` over the words of `run_id` that hold `search`, under the filters `narrowed` and `kinds`.

    The line is joined where a filter needs it, or with `join`.
    """
    at_type = _at_type(sqlite)
    query = query.where(
        _w.c.run_id == bindparam("run_id"), func.instr(_w.c.words, bindparam("search", type_=String())) > 0
    )
    if join or by_kinds or "phases" in narrowed or "steps" in narrowed:
        # The line is read only for words that match: the words lead (STRAIGHT_JOIN on MariaDB).
        query = query.join(_l, _l.c.id == _w.c.id).prefix_with("STRAIGHT_JOIN", dialect="mysql")
        query = query.prefix_with("STRAIGHT_JOIN", dialect="mariadb")
    if by_kinds:
        query = query.where(_l.c.kind.in_(bindparam("kinds", expanding=True)))
    if "phases" in narrowed:
        query = query.where(_l.c.phase.in_(bindparam("phases", expanding=True)))
    if "steps" in narrowed:
        query = query.where(_l.c.step_id.in_(bindparam("steps", expanding=True)))
    if "since" in narrowed:
        query = query.where(_w.c.line_at >= bindparam("since", type_=at_type))
    if "until" in narrowed:
        query = query.where(_w.c.line_at < bindparam("until", type_=at_type))
    return query


@functools.cache
def words_scan_statement(
    sqlite: bool, newest_first: bool, by_kinds: bool, narrowed: tuple[str, ...], bound: str | None
) -> Select[Any]:
    """The ids and `at` of the first `limit` lines, in a page's order, whose words hold `search`.

    `bound`: None; "coarse" (`at` up to `from_at` newest first, else from it); "exact" (past the
    line `from_at`, `from_id`).
    """
    at_type = _at_type(sqlite)
    query = _words_where(select(_w.c.id, _w.c.line_at), sqlite, by_kinds, narrowed)
    if newest_first:
        query = query.order_by(_w.c.line_at.desc(), _w.c.id.desc())
    else:
        query = query.order_by(_w.c.line_at.asc(), _w.c.id.asc())
    if bound is not None:
        at, line_id = bindparam("from_at", type_=at_type), bindparam("from_id", type_=Integer())
        if bound == "coarse":
            query = query.where(_w.c.line_at <= at if newest_first else _w.c.line_at >= at)
        elif newest_first:
            query = query.where(_w.c.line_at <= at, or_(_w.c.line_at < at, _w.c.id < line_id))
        else:
            query = query.where(_w.c.line_at >= at, or_(_w.c.line_at > at, _w.c.id > line_id))
    return query.limit(bindparam("limit", type_=Integer()))


@functools.cache
def words_counts_statement(sqlite: bool, narrowed: tuple[str, ...]) -> Select[Any]:
    """How many of a run's lines whose words hold `search` (under `narrowed`) are of each kind."""
    kind = sqlite_text(_l.c.kind) if sqlite else _l.c.kind
    query = select(kind.label("kind"), func.count()).select_from(_w)
    return _words_where(query, sqlite, False, narrowed, join=True).group_by(_l.c.kind)
