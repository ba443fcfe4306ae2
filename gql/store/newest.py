"""The lines a run's holds rest on, read exactly, in two rounds: `read_hold_lines`, then `read_trails`.

Round one reads each run's row in `event_runs` with its lines, so a run's holds start with one
statement. Exact whatever the size of the run: a hold's lines are found by what ends them (a
newer line about the same subject), never by a count of newest lines. The kinds written at a
phase's or a group's moments (`MARKS`) are read whole; the kinds a run writes per step or per
tick (steps' lines, `run.blocked`, `condition.evaluated`) are read only where they leave something open.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Integer,
    LargeBinary,
    Select,
    String,
    and_,
    bindparam,
    cast,
    func,
    literal_column,
    null,
    or_,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from .connections import read_rows
from .db import SQLITE_AT_ORDER, event_run_log, event_run_log_steps, event_runs
from .rows import mariadb_lines, sqlite_lines, stored_status, stored_time
from .statements import as_compared, line_columns
from .step_state import STEP_KINDS
from .values import LINE_ID_MAX, Line, Run

_l, _s = event_run_log, event_run_log_steps
# Written at a run's, a phase's or a cleanup group's moments, a few each: read whole.
MARKS: tuple[str, ...] = ("run.status", "phase.gate", "phase.advanced", "phase.entered")
MARKS += ("phase.completed", "cleanup.failed", "cleanup.reverted")
STEP_OPENERS = STEP_KINDS[:3]  # the step kinds that open a hold
TAIL = 4  # a hold's newest lines kept as evidence, beside its oldest
EVALUATIONS = 20  # a gate's evaluations read for their facts; more are counted
# Parts per statement: SQLite allows 500 terms in a compound SELECT.
PARTS_PER_STATEMENT = 480
PARTS_PER_RUN = 7  # _round_one's
_ROW = 5  # round one's part that is the run's row, not a line
_NO_RUN = [null().label(name) for name in ("run_status", "run_ended_at", "run_updated_at")]  # a line's parts


@dataclass
class HoldLines:
    """One run's lines that its holds rest on, from `read_hold_lines`."""

    run: Run | None = None  # its row in event_runs, read with its lines: None when it has none
    newest: Line | None = None  # its newest line of any kind: None when its log has none
    marks: list[Line] = field(default_factory=list)  # every line of MARKS' kinds
    blocked: list[Line] = field(default_factory=list)  # run.blocked after the newest run.status: ends
    # Each open step's hold: the lines of its newest step line's kind that no other step line or its
    # phase's `phase.completed` follows; its oldest and TAIL newest, oldest first, by step id.
    steps: dict[int, list[Line]] = field(default_factory=dict)
    no_step: Line | None = None  # the newest step line with no step id
    all_steps: list[Line] | None = None  # each step's newest step line: read for phases (`read_steps`)
    retries: dict[str, Line] = field(default_factory=dict)  # each step's newest step.retry, by step id


@dataclass(frozen=True)
class Trail:
    """What `read_trails` reads: the lines of `kind` with no step id after `after`, no other such step
    line after them (each step's own are round one's)."""

    run_id: int
    kind: str
    after: Line | None  # a line that ended the hold (a `phase.completed`), or None


@dataclass(frozen=True)
class Evaluations:
    """What `read_trails` reads: a phase's `condition.evaluated` lines after `after` (its gate's first)."""

    run_id: int
    phase: int | None
    after: Line


def _ordered(table: Any, sqlite: bool, *, named: bool = False) -> ColumnElement[Any]:
    """What `table`'s lines are ordered by with `id`: on SQLite, the normalised `at` as indexed.

    `named`: spelt with the table's name, as a correlated subquery must name the outer table.
    """
    if not sqlite:
        return table.c.at  # type: ignore[no-any-return]
    if table is _l and not named:
        return literal_column(SQLITE_AT_ORDER)
    name = table.name
    return literal_column(SQLITE_AT_ORDER.replace(" at ", f" {name}.at ").replace(", at)", f", {name}.at)"))


def _newer(a: Any, b: Any, sqlite: bool) -> ColumnElement[bool]:
    """Line `a` comes after line `b` (by at, then id); both tables aliased."""
    a_at, b_at = _ordered(a, sqlite, named=True), _ordered(b, sqlite, named=True)
    return and_(a_at >= b_at, or_(a_at > b_at, a.c.id > b.c.id))


def _bind_after(values: dict[str, Any], name: str, line: Line, sqlite: bool) -> bool:
    """Bind `line`'s position as `{name}_at` and `{name}_id`; whether `at` is bound as text."""
    values[f"{name}_id"] = line.id
    if line.position is not None:  # an `at` the database holds as no time: as it orders it
        values[f"{name}_at"] = line.position
        return True
    values[f"{name}_at"] = as_compared(line.at.replace(tzinfo=None), sqlite)
    return sqlite


def _after(table: Any, name: str, text: bool, sqlite: bool) -> ColumnElement[bool]:
    """`table`'s line comes after the line bound as `{name}_at` and `{name}_id` (`_bind_after`)."""
    at = _ordered(table, sqlite)
    bound = bindparam(f"{name}_at", type_=String() if text else _l.c.at.type)
    return and_(at >= bound, or_(at > bound, table.c.id > bindparam(f"{name}_id", type_=Integer())))


_KIND = "ix_event_run_log_run_kind_at"


def _by(query: Select[Any], table: Any, index: str) -> Select[Any]:
    """`query` reading `table` by the MariaDB index `index`, which its optimizer may not pick by itself
    (a run holding most of the table looks like a scan's worth of rows)."""
    for dialect in ("mysql", "mariadb"):
        query = query.with_hint(table, f"FORCE INDEX ({index})", dialect)
    return query


def _newest_steps(run: Any) -> Select[Any]:
    """Each step's newest step line (event_run_log_steps, kept by triggers: gql/store/step_state.py)."""
    return select(_l).select_from(_s.join(_l, _l.c.id == _s.c.id)).where(_s.c.run_id == run)


def _newest_per_step(run: Any, kinds: Sequence[str], sqlite: bool) -> Select[Any]:
    """Each step's newest line of each of `kinds` (ties in `at` all come): a group per (kind, step),
    which MariaDB reads by skipping along the index, never line by line."""
    at = _ordered(_l, sqlite)
    grouped = (
        select(_l.c.run_id, _l.c.kind, _l.c.step_id, func.max(at).label("newest"))
        .where(_l.c.run_id == run, _l.c.kind.in_(kinds), _l.c.step_id.is_not(None))
        .group_by(_l.c.run_id, _l.c.kind, _l.c.step_id)
    )
    g = _by(grouped, _l, "ix_event_run_log_run_kind_step_at").subquery("g")
    o = _l
    # Joined on the group's run, not the run's id: SQLite then reads the groups first.
    joined = g.join(o, and_(o.c.run_id == g.c.run_id, o.c.kind == g.c.kind, o.c.step_id == g.c.step_id))
    return select(o).select_from(joined).where(_ordered(o, sqlite, named=True) == g.c.newest)


def _part(sqlite: bool, query: Select[Any]) -> Select[Any]:
    # SQLite allows no ORDER BY or LIMIT in a compound's part: each goes in a subquery there.
    return select(query.subquery()) if sqlite else query


def _lines(rows: Sequence[Any], sqlite: bool) -> list[Line]:
    return sqlite_lines(rows) if sqlite else mariadb_lines(rows)


async def read_hold_lines(engine: AsyncEngine, run_ids: Iterable[int]) -> dict[int, HoldLines]:
    """Per run, its row and the lines its holds rest on (`HoldLines`); one statement per few dozen runs."""
    wanted = sorted({i for i in run_ids if 0 < i <= LINE_ID_MAX})
    found = {run_id: HoldLines() for run_id in wanted}
    sqlite = engine.dialect.name == "sqlite"
    per = PARTS_PER_STATEMENT // PARTS_PER_RUN
    width = 1 + len(line_columns(sqlite))  # the part's number and a line's columns; then the run's
    for start in range(0, len(wanted), per):
        chunk = wanted[start : start + per]
        values: dict[str, Any] = {f"r{j}": run_id for j, run_id in enumerate(chunk)}
        rows = await read_rows(engine, _round_one(sqlite, len(chunk)), values)
        for row in rows:
            if row[0] == _ROW:
                run_id, (status, ended, updated) = row[2], row[width:]
                found[run_id].run = Run(
                    run_id, stored_status(status), stored_time(ended), stored_time(updated)
                )
        rows = [row for row in rows if row[0] != _ROW]
        for part, line in zip(
            (row[0] for row in rows), _lines([row[1:width] for row in rows], sqlite), strict=True
        ):
            held = found[line.run_id]
            if part == 0:
                held.newest = line
            elif part == 1:
                held.marks.append(line)
            elif part == 2:
                if line not in held.blocked:
                    held.blocked.append(line)
            elif part == 3:
                held.steps.setdefault(line.step_id, []).append(line)  # type: ignore[arg-type]
            else:
                held.no_step = line
    for held in found.values():
        held.marks.sort(key=_position)
        held.blocked.sort(key=_position)
        held.steps = {step: sorted(held.steps[step], key=_position) for step in sorted(held.steps)}
    return found


def _position(line: Line) -> tuple[datetime.datetime, int]:
    return (line.at, line.id)


@functools.cache
def _round_one(sqlite: bool, runs: int) -> CompoundSelect[Any]:
    """Per run: its newest line; its MARKS; run.blocked's trail (oldest and newest); its open steps;
    its row in event_runs (after a line's columns, NULL in the lines' parts)."""
    o, e, r = _l, _l.alias("e"), event_runs
    lines = line_columns(sqlite)
    of_run: list[Any] = [r.c.status, r.c.ended_at, r.c.updated_at]
    if sqlite:  # as bytes, as store.find_runs reads them: a value the types would fail on is told
        of_run = [cast(column, LargeBinary) for column in of_run]
    parts = []
    for j in range(runs):
        run = bindparam(f"r{j}", type_=Integer())

        def part(number: int, query: Select[Any]) -> Select[Any]:
            columns = [literal_column(str(number)).label("part"), *lines, *_NO_RUN]
            return _part(sqlite, query.with_only_columns(*columns))

        newest = (
            select(o).where(o.c.run_id == run).order_by(_ordered(o, sqlite).desc(), o.c.id.desc()).limit(1)
        )
        parts.append(part(0, _by(newest, o, "ix_event_run_log_run_at")))
        marks = select(o).where(o.c.run_id == run, o.c.kind.in_(MARKS))
        parts.append(part(1, _by(marks, o, _KIND)))  # named: MariaDB weighs every index of the run otherwise
        # run.blocked with no run.status after it: the block's lines, its oldest and newest.
        ended: Select[Any] = select(literal_column("1")).select_from(e)
        ended = _by(ended.where(e.c.run_id == run, e.c.kind == "run.status", _newer(e, o, sqlite)), e, _KIND)
        blocked = _by(
            select(o).where(o.c.run_id == run, o.c.kind == "run.blocked", ~ended.exists()), o, _KIND
        )
        at = _ordered(o, sqlite)
        parts.append(part(2, blocked.order_by(at, o.c.id).limit(1)))
        parts.append(part(2, blocked.order_by(at.desc(), o.c.id.desc()).limit(TAIL)))
        parts.append(part(3, _open_steps(run, sqlite)))
        no_step = (
            select(o)
            .where(o.c.run_id == run, o.c.kind.in_(STEP_KINDS), o.c.step_id.is_(None))
            .order_by(_ordered(o, sqlite).desc(), o.c.id.desc())
            .limit(1)
        )
        parts.append(part(4, _by(no_step, o, "ix_event_run_log_run_kind_step_at")))
        blank = [null() if n != 1 else r.c.id for n in range(len(lines))]  # the run's id as a line's run_id
        parts.append(select(literal_column(str(_ROW)), *blank, *of_run).where(r.c.id == run))
    return union_all(*parts)


def _open_steps(run: Any, sqlite: bool) -> Select[Any]:
    """Each open step's hold (HoldLines.steps), from event_run_log_steps' rows of an opening kind.

    A step's lines of its newest line's kind, each with no later step line of another kind and no
    later `phase.completed` of the newest line's phase; numbered both ways to keep the oldest and
    TAIL newest. Reads each open step's lines of that kind: a handful, never the run's.
    """
    o, n, e, c = _l, _l.alias("n"), _l.alias("e"), _l.alias("c")
    at = _ordered(o, sqlite, named=True)
    other: Select[Any] = select(literal_column("1")).select_from(e)
    other = other.where(
        e.c.run_id == run,
        e.c.step_id == o.c.step_id,
        e.c.kind.in_(STEP_KINDS),
        e.c.kind != o.c.kind,
        _newer(e, o, sqlite),
    )
    completed: Select[Any] = select(literal_column("1")).select_from(c)
    completed = completed.where(
        c.c.run_id == run,
        c.c.kind == "phase.completed",
        c.c.phase.is_not_distinct_from(n.c.phase),
        _newer(c, o, sqlite),
    )
    by_step = o.c.step_id
    numbered = (
        select(
            o.c.id,
            func.row_number().over(partition_by=by_step, order_by=(at.desc(), o.c.id.desc())).label("newer"),
            func.row_number().over(partition_by=by_step, order_by=(at, o.c.id)).label("older"),
        )
        .select_from(
            _s.join(n, n.c.id == _s.c.id).join(
                o, and_(o.c.run_id == _s.c.run_id, o.c.step_id == _s.c.step_id, o.c.kind == _s.c.kind)
            )
        )
        .where(
            _s.c.run_id == run,
            _s.c.kind.in_(STEP_OPENERS),
            ~_by(other, e, "ix_event_run_log_run_step_at").exists(),
            ~_by(completed, c, _KIND).exists(),
        )
    )
    w = _by(numbered, o, "ix_event_run_log_run_step_at").subquery("w")
    kept = or_(w.c.newer <= TAIL, w.c.older == 1)
    return select(_l).select_from(w.join(_l, _l.c.id == w.c.id)).where(kept)


async def read_steps(engine: AsyncEngine, found: dict[int, HoldLines]) -> None:
    """Each step's newest step line and newest `step.retry`, into `found`'s runs (for their phases).

    Reads a row per step, and every `step.retry`'s group: asked only when a run's phases are.
    """
    sqlite = engine.dialect.name == "sqlite"
    for run_id in sorted(found):
        rows = await read_rows(engine, _steps_statement(sqlite), {"r0": run_id})
        newest: list[dict[str, Line]] = [{}, {}]  # per part, by step: the newest of its kinds' newest
        for part, line in zip(
            (row[0] for row in rows), _lines([row[1:] for row in rows], sqlite), strict=True
        ):
            held = newest[part].get(str(line.step_id))
            if held is None or _position(held) < _position(line):
                newest[part][str(line.step_id)] = line
        found[run_id].all_steps = list(newest[0].values())
        found[run_id].retries = newest[1]


@functools.cache
def _steps_statement(sqlite: bool) -> CompoundSelect[Any]:
    run = bindparam("r0", type_=Integer())
    parts = []
    for number, query in enumerate((_newest_steps(run), _newest_per_step(run, ("step.retry",), sqlite))):
        columns = [literal_column(str(number)).label("part"), *line_columns(sqlite)]
        parts.append(_part(sqlite, query.with_only_columns(*columns)))
    return union_all(*parts)


# Of some steps of a run, those with a step line: a seek each in event_run_log_steps.
_SAID = select(_s.c.step_id).where(
    _s.c.run_id == bindparam("r0", type_=Integer()),
    _s.c.id.is_not(None),
    _s.c.step_id.in_(bindparam("steps", expanding=True)),
)


async def read_silent(engine: AsyncEngine, named: dict[int, tuple[int, ...]]) -> dict[int, frozenset[str]]:
    """Of each run's `named` steps, those with no step line in its log, by run."""
    silent: dict[int, frozenset[str]] = {}
    for run_id, steps in named.items():
        if not steps:
            silent[run_id] = frozenset()
            continue
        rows = await read_rows(engine, _SAID, {"r0": run_id, "steps": list(steps)})
        said = {str(row[0]) for row in rows}
        silent[run_id] = frozenset(str(step) for step in steps) - said
    return silent


def take_steps(held: HoldLines, step_lines: Sequence[Line]) -> None:
    """`read_steps`' answer for a run, from every one of its step lines (`read_step_lines`, oldest first)."""
    held.all_steps = list(
        {str(line.step_id): line for line in step_lines if line.step_id is not None}.values()
    )
    held.retries = {str(line.step_id): line for line in step_lines if line.kind == "step.retry"}


async def read_step_lines(engine: AsyncEngine, run_id: int) -> list[Line]:
    """Every line of a step kind of the run, oldest first: what its timeline is drawn from."""
    sqlite = engine.dialect.name == "sqlite"
    query = (
        select(*line_columns(sqlite))
        .where(_l.c.run_id == run_id, _l.c.kind.in_(STEP_KINDS))
        .order_by(_ordered(_l, sqlite), _l.c.id)
    )
    return _lines(await read_rows(engine, query), sqlite)


async def read_trails(
    engine: AsyncEngine, trails: Sequence[Trail], evaluations: Sequence[Evaluations]
) -> tuple[dict[Trail, list[Line]], dict[Evaluations, tuple[list[Line], int]]]:
    """Each trail's lines (its oldest and up to TAIL newest, oldest first); each gate's evaluations.

    A gate's: up to EVALUATIONS newest, oldest first, and how many there are in all. A trail's
    TAIL + 1 newest are read first; its oldest, in a second statement, only when there are more.
    """
    sqlite = engine.dialect.name == "sqlite"
    lines = await _read_asked(engine, sqlite, [*trails, *evaluations], oldest=False)
    longer = [trail for trail in trails if len(lines[trail]) > TAIL]
    if longer:  # a run of more lines than the evidence shows: its oldest too
        oldest = await _read_asked(engine, sqlite, longer, oldest=True)
        for trail in longer:
            newest = sorted(lines[trail], key=_position)[-TAIL:]
            lines[trail] = [*(line for line in oldest[trail] if line not in newest), *newest]
    counted: dict[Evaluations, tuple[list[Line], int]] = {}
    for ask in evaluations:
        read = sorted(lines[ask], key=_position)
        total = len(read)
        if total > EVALUATIONS:
            read = read[-EVALUATIONS:]
            total = await _count_evaluations(engine, ask, sqlite)
        counted[ask] = (read, total)
    return {trail: sorted(lines[trail], key=_position) for trail in trails}, counted


async def _read_asked(
    engine: AsyncEngine, sqlite: bool, asked: Sequence[Trail | Evaluations], *, oldest: bool
) -> dict[Any, list[Line]]:
    """The lines of each of `asked` (`oldest`: each trail's oldest alone), a statement per few hundred."""
    lines: dict[Any, list[Line]] = {ask: [] for ask in asked}
    for start in range(0, len(asked), PARTS_PER_STATEMENT):
        chunk = asked[start : start + PARTS_PER_STATEMENT]
        values: dict[str, Any] = {}
        shapes = tuple(_bind(j, ask, values, sqlite, oldest=oldest) for j, ask in enumerate(chunk))
        rows = await read_rows(engine, _trails_statement(sqlite, shapes), values)
        for index, line in zip(
            (row[0] for row in rows), _lines([row[1:] for row in rows], sqlite), strict=True
        ):
            lines[chunk[index]].append(line)
    return lines


# What a trail's or a gate's statement depends on besides its bound values: the statement of a
# set of them is made once (functools.cache), as its shape recurs from request to request.
Shape = tuple[str, str | None, bool, bool | None]  # what, a trail's kind, no step/phase, `after` as text


def _bind(
    j: int, ask: Trail | Evaluations, values: dict[str, Any], sqlite: bool, *, oldest: bool = False
) -> Shape:
    """Bind `ask`'s values as part `j`'s, and say its shape (`oldest`: a trail's oldest line alone)."""
    values[f"r{j}"] = ask.run_id
    text = None if ask.after is None else _bind_after(values, f"a{j}", ask.after, sqlite)
    if isinstance(ask, Evaluations):
        if ask.phase is not None:
            values[f"p{j}"] = ask.phase
        return ("evaluations", None, ask.phase is None, text)
    return ("oldest" if oldest else "trail", ask.kind, True, text)


@functools.lru_cache(maxsize=256)
def _trails_statement(sqlite: bool, shapes: tuple[Shape, ...]) -> CompoundSelect[Any]:
    parts = (part for j, shape in enumerate(shapes) for part in _trail_parts(sqlite, j, shape))
    return union_all(*parts)


def _trail_parts(sqlite: bool, j: int, shape: Shape) -> tuple[Select[Any], ...]:
    what, kind, none, text = shape  # a trail's `none` is always True: its lines have no step
    o, e = _l, _l.alias("e")
    run = bindparam(f"r{j}", type_=Integer())
    columns = [literal_column(str(j)).label("part"), *line_columns(sqlite)]
    at = _ordered(o, sqlite)
    if what == "evaluations":
        phase = o.c.phase.is_(None) if none else o.c.phase == bindparam(f"p{j}", type_=Integer())
        query = select(o).where(o.c.run_id == run, o.c.kind == "condition.evaluated", phase)
        query = _by(query.where(_after(o, f"a{j}", bool(text), sqlite)), o, _KIND)  # named: as for the marks
        newest = query.order_by(at.desc(), o.c.id.desc()).limit(EVALUATIONS + 1)
        return (_part(sqlite, newest.with_only_columns(*columns)),)
    # A later line with no step of another step kind: a seek per kind, each with its kind a
    # constant (MariaDB seeks an IN list with a column of the outer query only by its first values).
    others = []
    for other in (k for k in STEP_KINDS if k != kind):
        later: Select[Any] = select(literal_column("1")).select_from(e)
        later = later.where(e.c.run_id == run, e.c.kind == other, e.c.step_id.is_(None), _newer(e, o, sqlite))
        others.append(_by(later, e, "ix_event_run_log_run_kind_step_at").exists())
    query = _by(
        select(o).where(o.c.run_id == run, o.c.kind == kind, o.c.step_id.is_(None), ~or_(*others)),
        o,
        "ix_event_run_log_run_kind_step_at",
    )
    if text is not None:
        query = query.where(_after(o, f"a{j}", text, sqlite))
    if what == "oldest":
        return (_part(sqlite, query.order_by(at, o.c.id).limit(1).with_only_columns(*columns)),)
    newest = query.order_by(at.desc(), o.c.id.desc()).limit(TAIL + 1)
    return (_part(sqlite, newest.with_only_columns(*columns)),)


async def _count_evaluations(engine: AsyncEngine, ask: Evaluations, sqlite: bool) -> int:
    values: dict[str, Any] = {}
    shape = _bind(0, ask, values, sqlite)
    rows = await read_rows(engine, _count_statement(sqlite, shape), values)
    return int(rows[0][0])


@functools.lru_cache(maxsize=16)
def _count_statement(sqlite: bool, shape: Shape) -> Select[Any]:
    _, _, none, text = shape
    o = _l
    phase = o.c.phase.is_(None) if none else o.c.phase == bindparam("p0", type_=Integer())
    counted = select(func.count()).where(
        o.c.run_id == bindparam("r0", type_=Integer()),
        o.c.kind == "condition.evaluated",
        phase,
        _after(o, "a0", bool(text), sqlite),
    )
    return _by(counted, o, _KIND)
