"""The floor: the same requests answered with no GraphQL and no SQLAlchemy.

A plain Starlette endpoint at `POST /graphql` that takes the same request bytes
as the service and does the work of answering them, and nothing else:

- a page (`runLog`): one round trip for the page's lines (the statement of
  `gql.store.page_query`, written out), rows to JSON with each stored detail
  parsed and shaped into its type's fields, and, when the page names any
  blocking run and the request selects `blockingRun`, one more round trip for
  all of them;
- a write (`writeRunLog`): the line and its words (`gql.store.words_of`) in one
  transaction, as the service keeps them: BEGIN, the INSERT ... RETURNING, the
  words' INSERT, COMMIT.

With `--driver physical` (the default) it talks to MariaDB with aiomysql
directly, on a pool of autocommit connections (no ping on checkout, no
rollback on return), and writes the body with orjson.
With `--driver sqlalchemy` the same endpoint goes through the service's own
engine (`gql.store.db.create_engine`: pre-ping, rollback on return, a transaction
per write): the difference between the two is what the engine costs.

It answers the JSON shape the service answers for that request: the fields
the request selects, under their response keys, in its order. That shape is
worked out once per query text (graphql-core parses it, and `schema.graphql`
says which fields are ids) and kept, as a hand-written endpoint would have it
written in; a request only looks it up. Nothing is checked: a detail is parsed
and its fields picked, never validated. Directives (`@skip`, `@include`) are
not read: no shipped operation has one.

    python -m bench.floor --port 8101 [--driver sqlalchemy]   # RUNLOG_DATABASE_URL as for the service
"""

from __future__ import annotations

import argparse
import datetime
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValueNode,
    build_schema,
    parse,
)
from graphql.language import (
    BooleanValueNode,
    EnumValueNode,
    FloatValueNode,
    IntValueNode,
    ListValueNode,
    NullValueNode,
    ObjectValueNode,
    StringValueNode,
    VariableNode,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gql.edge.server import listening_socket
from gql.kinds import TERMINAL_STATUSES, Kind
from gql.settings import Settings
from gql.store import words_of

SCHEMA = Path(__file__).resolve().parent.parent / "schema.graphql"
_TYPENAME = {kind.value: "".join(p.title() for p in kind.value.split(".")) + "Detail" for kind in Kind}
_ENUM_NAME = {kind.value: kind.name for kind in Kind}
_JSON = orjson.OPT_NAIVE_UTC  # a stored DATETIME is UTC: served with +00:00, as the service does

_PAGE = (
    "SELECT id, run_id, step_id, kind, phase, detail, at FROM event_run_log WHERE run_id = %s{kinds}{after}"
    " ORDER BY at DESC, id DESC LIMIT %s"
)
_AFTER = " AND at <= %s AND (at < %s OR at = %s AND id < %s)"
_RUNS = "SELECT id, status, ended_at, updated_at FROM event_runs WHERE id IN ({})"
_INSERT = (
    "INSERT INTO event_run_log (run_id, step_id, kind, phase, detail, at) VALUES (%s, %s, %s, %s, %s, %s)"
    " RETURNING id, at"
)
_WORDS = "INSERT INTO event_run_log_words (run_id, line_at, id, words) VALUES (%s, %s, %s, %s)"


# ── the database, two ways ───────────────────────────────────────────────────


class Database(Protocol):
    async def page(self, run_id: int, kinds: list[str] | None, limit: int, after: Any) -> Sequence[Any]: ...
    async def runs(self, ids: list[int]) -> Sequence[Any]: ...
    async def insert(self, row: tuple[Any, ...]) -> None: ...
    async def close(self) -> None: ...


def _page_sql(kinds: list[str] | None, after: Any) -> tuple[str, list[Any]]:
    where_kinds = "" if kinds is None else f" AND kind IN ({', '.join(['%s'] * len(kinds))})"
    return _PAGE.format(kinds=where_kinds, after="" if after is None else _AFTER), [
        *(kinds or ()),
        *(() if after is None else (after[0], after[0], after[0], after[1])),
    ]


class Physical:
    """aiomysql straight: one autocommit round trip a statement."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, url: str, size: int) -> Physical:
        import aiomysql

        parts = urllib.parse.urlsplit(url)
        pool = await aiomysql.create_pool(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=urllib.parse.unquote(parts.username or "root"),
            password=urllib.parse.unquote(parts.password or ""),
            db=parts.path.lstrip("/"),
            minsize=1,
            maxsize=size,
            autocommit=True,
            charset="utf8mb4",
        )
        return cls(pool)

    async def _fetch(self, sql: str, args: Sequence[Any]) -> Sequence[Any]:
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(sql, args)
            rows: Sequence[Any] = await cur.fetchall()
            return rows

    async def page(self, run_id: int, kinds: list[str] | None, limit: int, after: Any) -> Sequence[Any]:
        sql, args = _page_sql(kinds, after)
        return await self._fetch(sql, [run_id, *args, limit + 1])

    async def runs(self, ids: list[int]) -> Sequence[Any]:
        return await self._fetch(_RUNS.format(", ".join(["%s"] * len(ids))), ids)

    async def insert(self, row: tuple[Any, ...]) -> None:
        async with self.pool.acquire() as conn:
            await conn.begin()
            async with conn.cursor() as cur:
                await cur.execute(_INSERT, row)
                [(line_id, at)] = await cur.fetchall()
                await cur.execute(_WORDS, (row[0], at, line_id, words_of(row[4])))
            await conn.commit()

    async def close(self) -> None:
        self.pool.close()
        await self.pool.wait_closed()


class Engine:
    """The service's engine and statements: what SQLAlchemy and its pool settings add."""

    def __init__(self, settings: Settings) -> None:
        from gql.store.db import create_engine

        self.engine = create_engine(settings)

    async def page(self, run_id: int, kinds: list[str] | None, limit: int, after: Any) -> Sequence[Any]:
        from gql import store

        cursor = None if after is None else store.Cursor(at=after[0], id=after[1])
        query = store.page_query(run_id=run_id, kinds=kinds, limit=limit, after=cursor)
        async with self.engine.connect() as conn:
            rows: Sequence[Any] = (await conn.execute(query)).all()
            return rows

    async def runs(self, ids: list[int]) -> Sequence[Any]:
        from gql import store

        found = await store.find_runs(self.engine, ids)
        return [(r.id, r.status, r.ended_at, r.updated_at) for r in found.values()]

    async def insert(self, row: tuple[Any, ...]) -> None:
        from sqlalchemy import insert

        from gql.store.db import event_run_log, event_run_log_words

        names = ("run_id", "step_id", "kind", "phase", "detail", "at")
        line = insert(event_run_log).values(dict(zip(names, row, strict=True)))
        async with self.engine.begin() as conn:
            line_id, at = (await conn.execute(line.returning(event_run_log.c.id, event_run_log.c.at))).one()
            words = {"run_id": row[0], "line_at": at, "id": line_id, "words": words_of(row[4])}
            await conn.execute(insert(event_run_log_words).values(words))

    async def close(self) -> None:
        await self.engine.dispose()


# ── the shape of an answer, worked out once per query text ──────────────────

# How a field's value is answered, from a row or a parsed stored detail, as one request's answer goes.
Getter = Callable[[Any, "Answer"], Any]


@dataclass
class Answer:
    """What one request's answer collects on its way: where a blocking run goes, once looked up."""

    blocking: list[tuple[dict[str, Any], str, int, Callable[[Any], Any]]]
    kinds: list[str] | None = None  # the page's kinds filter, which its cursors name


class Shapes:
    """Field getters by type, for the selections of one query text."""

    def __init__(self, schema: GraphQLSchema, fragments: dict[str, FragmentDefinitionNode]) -> None:
        self.schema = schema
        self.fragments = fragments

    def fields(
        self, type_name: str, selection_sets: list[SelectionSetNode]
    ) -> list[tuple[str, list[FieldNode]]]:
        """The selected fields of a `type_name` object, merged by response key, in order."""
        merged: dict[str, list[FieldNode]] = {}

        def walk(selection_set: SelectionSetNode) -> None:
            for selection in selection_set.selections:
                if isinstance(selection, FieldNode):
                    key = selection.alias.value if selection.alias else selection.name.value
                    merged.setdefault(key, []).append(selection)
                elif isinstance(selection, InlineFragmentNode):
                    if self._applies(selection.type_condition, type_name):
                        walk(selection.selection_set)
                elif isinstance(selection, FragmentSpreadNode):
                    fragment = self.fragments[selection.name.value]
                    if self._applies(fragment.type_condition, type_name):
                        walk(fragment.selection_set)

        for selection_set in selection_sets:
            walk(selection_set)
        return list(merged.items())

    def _applies(self, condition: Any, type_name: str) -> bool:
        if condition is None or condition.name.value == type_name:
            return True
        abstract = self.schema.get_type(condition.name.value)
        concrete = self.schema.get_type(type_name)
        return abstract is not None and self.schema.is_sub_type(abstract, concrete)  # type: ignore[arg-type]

    def stored(self, type_name: str, selection_sets: list[SelectionSetNode]) -> Getter:
        """How a parsed stored value (a dict, or a list of them) of `type_name` is answered."""
        tp = self.schema.get_type(type_name)
        assert isinstance(tp, GraphQLObjectType), type_name
        getters: list[tuple[str, Getter]] = []
        runs: list[tuple[str, Callable[[Any], Any]]] = []
        for key, nodes in self.fields(type_name, selection_sets):
            name = nodes[0].name.value
            if name == "__typename":
                getters.append((key, _constant(type_name)))
            elif name == "blockingRun":
                getters.append((key, lambda _v, _a: None))
                runs.append((key, self._run_shape([n.selection_set for n in nodes if n.selection_set])))
            else:
                getters.append((key, self._value(name, tp.fields[name].type, nodes)))

        def shape(value: Any, answer: Answer) -> Any:
            if not isinstance(value, dict):
                return None
            out: dict[str, Any] = {}
            for key, get in getters:
                out[key] = get(value, answer)
            for key, run in runs:
                run_id = value.get("blockingRunId")
                if run_id is not None:
                    # Filled in after one query for every blocking run of the page.
                    answer.blocking.append((out, key, int(run_id), run))
            return out

        return shape

    def _value(self, name: str, field_type: Any, nodes: list[FieldNode]) -> Getter:
        listed = False
        inner = field_type
        while isinstance(inner, GraphQLNonNull | GraphQLList):
            listed = listed or isinstance(inner, GraphQLList)
            inner = inner.of_type
        if isinstance(inner, GraphQLObjectType):
            sub = self.stored(inner.name, [n.selection_set for n in nodes if n.selection_set])
            if listed:
                return lambda v, a: None if (x := v.get(name)) is None else [sub(i, a) for i in x]
            return lambda v, a: sub(v.get(name), a)
        if inner.name == "DateTime":  # served in UTC with its offset, as the service serves it
            if listed:
                return lambda v, a: None if (x := v.get(name)) is None else [_utc(i) for i in x]
            return lambda v, a: None if (x := v.get(name)) is None else _utc(x)
        if inner.name == "ID":  # stored as a number or a string, served as a string
            if listed:
                return lambda v, a: None if (x := v.get(name)) is None else [str(i) for i in x]
            return lambda v, a: None if (x := v.get(name)) is None else str(x)
        return lambda v, a: v.get(name)

    def _run_shape(self, selection_sets: list[SelectionSetNode]) -> Callable[[Any], Any]:
        getters: list[tuple[str, Callable[[Any], Any]]] = []
        for key, nodes in self.fields("Run", selection_sets):
            getters.append((key, _RUN_FIELDS[nodes[0].name.value]))

        def shape(row: Any) -> dict[str, Any]:
            return {key: get(row) for key, get in getters}

        return shape


_RUN_FIELDS: dict[str, Callable[[Any], Any]] = {
    "__typename": lambda r: "Run",
    "id": lambda r: str(r[0]),
    "status": lambda r: r[1],
    "terminal": lambda r: r[1] in TERMINAL_STATUSES,
    "endedAt": lambda r: r[2],
    "updatedAt": lambda r: r[3],
}


def _column(get: Callable[[Any], Any]) -> Getter:
    return lambda row, _a: get(row)


def _cursor(row: Any, kinds: list[str] | None) -> str:
    # The service's own cursor text (its run and kinds), without the window a recent line's carries.
    from gql import store

    return store.encode_cursor(store.Cursor(at=row[6], id=row[0]), store.cursor_scope(row[1], kinds))


def _decode_cursor(value: str, run_id: int, kinds: list[str] | None) -> tuple[datetime.datetime, int]:
    from gql import store

    cursor = store.decode_cursor(value, "after", store.cursor_scope(run_id, kinds))
    assert isinstance(cursor.at, datetime.datetime)
    return cursor.at, cursor.id


_LINE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "__typename": lambda r: "RunLogLine",
    "id": lambda r: str(r[0]),
    "runId": lambda r: str(r[1]),
    "stepId": lambda r: None if r[2] is None else str(r[2]),
    "kind": lambda r: _ENUM_NAME.get(r[3]),
    "kindName": lambda r: r[3],
    "phase": lambda r: r[4],
    "at": lambda r: r[6],
    # The benchmark's rows are all as the service writes them: none has a problem.
    "problem": lambda r: None,
    # Its lines are older than a few seconds: each cursor is the line's plain position.
}


def _utc(value: Any) -> Any:
    try:
        at = datetime.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return value
    return at.replace(tzinfo=datetime.UTC) if at.tzinfo is None else at.astimezone(datetime.UTC)


def _constant(value: Any) -> Getter:
    return lambda _v, _a: value


def _argument(nodes: list[FieldNode], name: str) -> ValueNode | None:
    return next((a.value for a in nodes[0].arguments or () if a.name.value == name), None)


def _evaluate(node: ValueNode | None, variables: dict[str, Any]) -> Any:
    """A value as written in the query, its variables filled in (a missing one is null)."""
    if node is None or isinstance(node, NullValueNode):
        return None
    if isinstance(node, VariableNode):
        return variables.get(node.name.value)
    if isinstance(node, IntValueNode):
        return int(node.value)
    if isinstance(node, FloatValueNode):
        return float(node.value)
    if isinstance(node, StringValueNode | EnumValueNode):
        return node.value
    if isinstance(node, BooleanValueNode):
        return node.value
    if isinstance(node, ListValueNode):
        return [_evaluate(v, variables) for v in node.values]
    if isinstance(node, ObjectValueNode):
        return {f.name.value: _evaluate(f.value, variables) for f in node.fields}
    raise ValueError(f"the floor does not read a {type(node).__name__}")


class Plan:
    """How the floor answers one query text."""

    def __init__(self, text: str, schema: GraphQLSchema, database: Database) -> None:
        document = parse(text)
        fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
        (operation,) = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        shapes = Shapes(schema, fragments)
        root = "Mutation" if operation.operation.value == "mutation" else "Query"
        self.roots = shapes.fields(root, [operation.selection_set])
        for _key, nodes in self.roots:
            if nodes[0].name.value not in ("runLog", "writeRunLog"):
                raise ValueError(f"the floor answers runLog and writeRunLog, not {nodes[0].name.value}")
        self.database = database
        self.shapes = shapes
        self.pages: dict[str, Any] = {}
        for key, nodes in self.roots:
            if nodes[0].name.value == "runLog":
                self.pages[key] = self._page_shape(shapes, nodes)

    def _page_shape(self, shapes: Shapes, nodes: list[FieldNode]) -> Any:
        page_sets = [n.selection_set for n in nodes if n.selection_set]
        line_getters: list[tuple[str, Callable[[Any, Answer], Any]]] = []
        info: list[tuple[str, str]] = []
        page_fields = []
        for key, fields in shapes.fields("RunLogPage", page_sets):
            name = fields[0].name.value
            page_fields.append((key, name))
            sets = [n.selection_set for n in fields if n.selection_set]
            if name == "nodes":
                for line_key, line_fields in shapes.fields("RunLogLine", sets):
                    line_name = line_fields[0].name.value
                    if line_name == "detail":
                        detail_sets = [n.selection_set for n in line_fields if n.selection_set]
                        line_getters.append((line_key, self._detail(shapes, detail_sets)))
                    elif line_name == "cursor":  # it names the page's kinds too
                        line_getters.append((line_key, lambda row, answer: _cursor(row, answer.kinds)))
                    else:
                        line_getters.append((line_key, _column(_LINE_FIELDS[line_name])))
            elif name == "pageInfo":
                info = [(k, f[0].name.value) for k, f in shapes.fields("PageInfo", sets)]
        return line_getters, info, page_fields

    def _detail(self, shapes: Shapes, sets: list[SelectionSetNode]) -> Callable[[Any, Answer], Any]:
        by_type = {name: shapes.stored(name, sets) for name in [*_TYPENAME.values(), "UnreadableDetail"]}
        unreadable = by_type["UnreadableDetail"]

        def get(row: Any, answer: Answer) -> Any:
            text = row[5]
            if text is None:
                return None
            typename = _TYPENAME.get(row[3])
            if typename is not None:
                try:
                    parsed = orjson.loads(text)
                except orjson.JSONDecodeError:
                    parsed = None
                if isinstance(parsed, dict):
                    return by_type[typename](parsed, answer)
            problem = "unreadable" if typename else f"kind {row[3]!r} is not known to this server"
            return unreadable({"text": text, "problem": problem}, answer)

        return get

    async def answer(self, variables: dict[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, nodes in self.roots:
            if nodes[0].name.value == "runLog":
                data[key] = await self._read(self.pages[key], nodes, variables)
            else:
                data[key] = await self._write(nodes, variables)
        return {"data": data}

    async def _read(self, shape: Any, nodes: list[FieldNode], variables: dict[str, Any]) -> Any:
        line_getters, info, page_fields = shape
        run_id = int(_evaluate(_argument(nodes, "runId"), variables))
        kinds = _evaluate(_argument(nodes, "kinds"), variables)
        wire = None if kinds is None else sorted({Kind[k].value for k in kinds})
        limit = _evaluate(_argument(nodes, "limit"), variables)
        limit = 500 if not limit else min(max(limit, 1), 2000)
        after = _evaluate(_argument(nodes, "after"), variables)
        rows: Sequence[Any] = []
        if wire is None or wire:
            rows = await self.database.page(
                run_id, wire, limit, None if after is None else _decode_cursor(after, run_id, wire)
            )
        page = rows[:limit]
        answer = Answer(blocking=[], kinds=wire)
        lines = []
        for row in page:
            line = {}
            for key, get in line_getters:
                line[key] = get(row, answer)
            lines.append(line)
        if answer.blocking:
            found = {r[0]: r for r in await self.database.runs(sorted({b[2] for b in answer.blocking}))}
            for out, key, blocking_id, run in answer.blocking:
                row = found.get(blocking_id)
                out[key] = None if row is None else run(row)
        result: dict[str, Any] = {}
        for key, name in page_fields:
            if name == "nodes":
                result[key] = lines
            elif name == "pageInfo":
                ends = {
                    "hasNextPage": len(rows) > limit,
                    "endCursor": _cursor(page[-1], wire) if page else None,
                    # An `after` page: newer lines are above it. (The bench reads no
                    # `before` pages and no empty first page, whose ends differ.)
                    "hasPreviousPage": after is not None,
                    "startCursor": _cursor(page[0], wire) if page else None,
                    "scanLimitReached": False,  # the bench's floor pages have no `search`
                    "__typename": "PageInfo",
                }
                result[key] = {k: ends[n] for k, n in info}
            elif name == "__typename":
                result[key] = "RunLogPage"
        return result

    async def _write(self, nodes: list[FieldNode], variables: dict[str, Any]) -> bool:
        detail = _evaluate(_argument(nodes, "detail"), variables)
        step = _evaluate(_argument(nodes, "stepId"), variables)
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        await self.database.insert(
            (
                int(_evaluate(_argument(nodes, "runId"), variables)),
                None if step is None else int(step),
                _evaluate(_argument(nodes, "kind"), variables),
                _evaluate(_argument(nodes, "phase"), variables),
                None if detail is None else orjson.dumps(detail).decode(),
                now.replace(microsecond=now.microsecond // 1000 * 1000),
            )
        )
        return True


def create_app(settings: Settings | None = None, driver: str = "physical") -> Starlette:
    settings = Settings.from_env() if settings is None else settings
    schema = build_schema(SCHEMA.read_text())
    plans: dict[str, Plan] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if driver == "physical":
            app.state.database = await Physical.open(settings.database_url, settings.pool_size)
        else:
            app.state.database = Engine(settings)
        try:
            yield
        finally:
            await app.state.database.close()

    async def graphql(request: Request) -> Response:
        body = orjson.loads(await request.body())
        text = body["query"]
        plan = plans.get(text)
        if plan is None:
            try:
                plan = plans[text] = Plan(text, schema, request.app.state.database)
            except ValueError as exc:
                refusal = {"errors": [{"message": str(exc)}]}
                return Response(orjson.dumps(refusal), status_code=400, media_type="application/json")
        answer = await plan.answer(body.get("variables") or {})
        return Response(orjson.dumps(answer, option=_JSON), media_type="application/json")

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(
        routes=[
            Route("/graphql", graphql, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--port", type=int, default=8101)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--driver", choices=("physical", "sqlalchemy"), default="physical")
    args = parser.parse_args()
    # As `python -m gql serve` runs the service: the same server, the same log level.
    level = Settings.from_env().log_level.lower()
    if args.workers > 1:
        # As the service runs several workers: on a socket of its own, TCP_NODELAY on what it accepts.
        factory = (
            "bench.floor:create_sqlalchemy_app" if args.driver == "sqlalchemy" else "bench.floor:create_app"
        )
        with listening_socket("127.0.0.1", args.port) as sock:
            uvicorn.run(factory, factory=True, fd=sock.fileno(), workers=args.workers, log_level=level)
    else:
        uvicorn.run(create_app(driver=args.driver), port=args.port, log_level=level)


def create_sqlalchemy_app() -> Starlette:
    return create_app(driver="sqlalchemy")


if __name__ == "__main__":
    main()
