"""The GraphQL schema: `runLog`, `writeRunLog`, `pruneTerminal`, `runLogTail`, and the retention status."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import strawberry
from graphql import GraphQLError, OperationType
from strawberry.extensions import SchemaExtension
from strawberry.scalars import JSON

from .. import metrics, store
from ..compat.strawberry import graphql_schema
from ..domain import tail
from ..domain.auth import Action
from ..domain.details import DETAIL_TYPES
from ..ids import id_problem, parse_id
from . import subscriptions
from .context import ClientError, Context
from .execution import PageExecutor, VariablesExecutor
from .filters import FilterError, read_filters
from .in_flight import HoldFilter, read_runs_in_flight
from .limits import detail_servings
from .page import RunLogKind, RunLogLine, RunLogPage, as_line, asked_of
from .retention_status import RetentionStatus, retention_status
from .run_log import answering, failure, read_run_log, write_line
from .runs import HoldReason, RunsPage
from .writes import NotStoredExtension

log = logging.getLogger("gql.runlog")


def _one_connection(resolver: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`resolver` with its reads of the primary taking one pooled connection, unless a `wait` long-polls."""

    @functools.wraps(resolver)
    async def resolve(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("wait"):
            return await resolver(*args, **kwargs)
        async with store.one_connection(kwargs["info"].context.engine):
            return await resolver(*args, **kwargs)

    return resolve


# The arguments runLog and runLogTail share.
Kinds = Annotated[
    list[RunLogKind] | None,
    strawberry.argument(description="Only lines of these kinds; null for all, [] for none."),
]
Phases = Annotated[
    list[int] | None,
    strawberry.argument(description="Only lines of these phases (0 or more; at most 100); null for all."),
]
Steps = Annotated[
    list[strawberry.ID] | None,
    strawberry.argument(description="Only lines of these steps (at most 100); null for all."),
]


@strawberry.type
class Query:
    @strawberry.field(
        description="The lines of one run, newest first (by `at`, then `id`). `kinds` null "
        "means every kind, `[]` none. `limit` null or 0 means 500, otherwise it is clamped "
        "to 1..2000. Pass a page's `pageInfo.endCursor` as `after` for the next, older page: "
        "no line is repeated or skipped while new lines are written. Pass `pageInfo.startCursor` "
        "(or any line's `cursor`) as `before` for the `limit` lines just newer, still newest "
        "first, each once even when a line's commit was slow and it landed behind lines already "
        "read; `after` and `before` together are refused. With `before`, `wait` (0 to 30 "
        "seconds) is the long poll: when no newer line is there yet, the call answers as soon as "
        "one is written, by any process of the service, or with an empty page when the wait is "
        "up. A page ends before `limit` lines, with `hasNextPage` (or, reading `before`, "
        "`hasPreviousPage`) true, where its details would pass the request's byte budget (8 MiB "
        "of stored details by default, shared by every runLog of one request); its first line "
        "comes whatever its size. A page whose cursors are selected also ends early where a "
        "cursor would name more than 128 lines of the last few seconds; reading `before`, the "
        "rest of such a burst comes once its oldest lines have settled (`wait` waits for that)."
    )
    @_one_connection
    async def run_log(
        self,
        info: strawberry.Info[Context, None],
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run to read.")],
        kinds: Kinds = None,
        limit: Annotated[
            int | None,
            strawberry.argument(description="Lines per page: null or 0 means 500; 1..2000."),
        ] = None,
        after: Annotated[
            str | None,
            strawberry.argument(
                description="A previous page's `pageInfo.endCursor` (or a line's `cursor`): "
                "read the older lines."
            ),
        ] = None,
        before: Annotated[
            str | None,
            strawberry.argument(
                description="A previous page's `pageInfo.startCursor` (or a line's `cursor`): read "
                "the lines just newer, newest first."
            ),
        ] = None,
        wait: Annotated[
            int | None,
            strawberry.argument(
                description="With `before`: seconds (0 to 30) to wait for a newer line when there "
                "is none yet. Null or 0: answer at once."
            ),
        ] = None,
        fresh: Annotated[
            bool | None,
            strawberry.argument(
                description="Read-your-writes, where the service reads from a replica: true "
                "makes the page hold every line stored before the call (the replica is waited "
                "for, briefly, or the primary is read). Costs two round trips more; null or "
                "false: a page may trail the newest lines by up to the replica lag the server "
                "allows."
            ),
        ] = None,
        phase: Phases = None,
        step_id: Steps = None,
        since: Annotated[
            datetime.datetime | None,
            strawberry.argument(
                description="Only lines whose `at` is at or after this (UTC when it has no offset)."
            ),
        ] = None,
        until: Annotated[
            datetime.datetime | None,
            strawberry.argument(
                description="Only lines whose `at` is before this (UTC when it has no offset)."
            ),
        ] = None,
        search: Annotated[
            str | None,
            strawberry.argument(
                description="Only lines whose detail, in the words a reader sees (its values: "
                "never its keys or JSON's escapes), holds this text, ignoring case by Unicode's "
                "case folding (`É` is `é`; `İ` is `i̇`, as written); 1 to 256 characters. A page "
                "holds `limit` matches unless the run has no more."
            ),
        ] = None,
        around: Annotated[
            strawberry.ID | None,
            strawberry.argument(
                description="A line's `id`: the page holding that line, with lines newer and older "
                "than it (`limit` in all). `endCursor` as `after` reads on to the older lines, "
                "`startCursor` as `before` to the newer ones. Refused with `after` or `before`, and "
                "for a line of another run or outside the page's filters."
            ),
        ] = None,
    ) -> RunLogPage:
        context = info.context
        # graphql-core's info, for its field nodes and fragments: Strawberry documents `_raw_info`
        # as the way to it (docs/breaking-changes/0.233.0.md).
        raw = info._raw_info
        return await read_run_log(
            context,
            asked_of(raw.field_nodes, raw.fragments),
            functools.partial(detail_servings, raw.field_nodes[0], raw.fragments),
            run_id=run_id,
            kinds=None if kinds is None else [k.value for k in kinds],
            limit=limit,
            after=after,
            before=before,
            wait=wait,
            fresh=fresh,
            phase=phase,
            step_id=step_id,
            since=since,
            until=until,
            search=search,
            around=around,
        )

    @strawberry.field(
        description="The runs that are not terminal (by `event_runs.status`, matched exactly), newest "
        "activity first (the later of the run's `updatedAt` and its newest line's `at`), each with "
        'what holds it: "which runs are stuck right now?" in one request. `limit` null or 0 means '
        "50, otherwise it is clamped to 1..100; pass `pageInfo.endCursor` as `after` for the next page. "
        "The holds of every run on the page, and of the runs blocking them, are read together."
    )
    async def runs_in_flight(
        self,
        info: strawberry.Info[Context, None],
        limit: Annotated[
            int | None, strawberry.argument(description="Runs per page: null or 0 means 50; 1..100.")
        ] = None,
        after: Annotated[
            str | None,
            strawberry.argument(description="A previous page's `pageInfo.endCursor`: read the next runs."),
        ] = None,
        reason: Annotated[
            list[HoldReason] | None,
            strawberry.argument(description="Only runs with at least one hold of one of these reasons."),
        ] = None,
        blocking_run_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="Only runs with a `BLOCKED_BY_RUN` hold on this run."),
        ] = None,
        concurrency_key: Annotated[
            str | None,
            strawberry.argument(
                description="Only runs with a `BLOCKED_BY_RUN` hold on this concurrency key."
            ),
        ] = None,
    ) -> RunsPage:
        raw = info._raw_info  # see run_log above
        asked = asked_of(raw.field_nodes, raw.fragments)
        blocker = None
        if blocking_run_id is not None:
            blocker = parse_id(blocking_run_id)
            if blocker is None:
                raise ClientError(
                    f"blockingRunId {str(blocking_run_id)[:40]!r} is not a run id: pass a whole number",
                    "BAD_USER_INPUT",
                )
        only = HoldFilter(
            reasons=None if reason is None else frozenset(r.name for r in reason),
            blocking_run_id=blocker,
            concurrency_key=concurrency_key,
        )
        return await read_runs_in_flight(
            info.context, asked.holds, limit, after, asked.phases, only, timeline=asked.timeline
        )

    retention: RetentionStatus = strawberry.field(
        resolver=retention_status,
        description="Admin only. Retention as this server process runs it: the settings, the "
        "sweeper's last tick and totals since start, and how many lines are eligible now.",
    )


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Write one line; answers whether it was stored: true once it is stored, "
        "exactly once; false when it is not. The field itself never fails: an unknown kind, a "
        "detail that does not fit its kind, a run id that is not a positive integer, a caller "
        "that may not write, or a database that is down or slow all answer false, and the line "
        "is logged by the server so nothing is lost without a trace. A false says why in the "
        "response's `extensions.runlog.notStored`: one entry per field answered false, with its "
        "`path`, a stable `reason` (`UNKNOWN_KIND`, `DETAIL_DOES_NOT_FIT`, ...), a `message` and "
        "the `requestId`. Only the request as a "
        "whole can be refused, with a request error and no `data`: an argument or variable "
        "that does not coerce (`phase: 2147483648`, `kind: null`; its line is logged all the "
        "same), or a request over one of the service's limits. One case is not known: a "
        "database that stops answering after the line was sent may have stored it; send an "
        "`idempotencyKey` to retry such a line safely. `kind` is the wire name (`run.status`)."
    )
    async def write_run_log(
        self,
        info: strawberry.Info[Context, None],
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run, a positive integer.")],
        kind: Annotated[str, strawberry.argument(description="The kind's wire name (`run.status`).")],
        step_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="The step, a positive integer, if any."),
        ] = None,
        phase: Annotated[int | None, strawberry.argument(description="The phase, if any.")] = None,
        detail: Annotated[
            JSON | None,
            strawberry.argument(
                description="The detail: an object whose keys are the fields of the kind's "
                'detail type (`{"from": "scheduled", "to": "live"}`); at most '
                "64 KiB as JSON by default."
            ),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            strawberry.argument(
                description="Makes a retry safe: the same key for the same run stores the line "
                "at most once, and a retry of a line already stored under it answers true. "
                "Send the same key when retrying after false or no answer; keys are kept a "
                "day. 1 to 256 characters; a key reused for a different line answers false."
            ),
        ] = None,
    ) -> bool:
        return await write_line(
            info.context,
            info.path.as_list(),
            run_id=run_id,
            kind=kind,
            step_id=step_id,
            phase=phase,
            detail=detail,
            idempotency_key=idempotency_key,
        )

    @strawberry.mutation(
        description="Admin only. Delete at most `limit` lines (null or 0 means 5000, clamped "
        "to 1..50000) of runs in a terminal status (completed, cancelled, failed, missed) "
        "whose `COALESCE(ended_at, updated_at)` is before `before` (read as UTC when it has "
        "no offset); answers how many were deleted. A run that is not terminal keeps every "
        "line. Call again until it answers 0 to drain a backlog: on a busy database it may "
        "answer fewer than `limit` while more remain (what it deleted by its deadline)."
    )
    async def prune_terminal(
        self,
        info: strawberry.Info[Context, None],
        before: Annotated[
            datetime.datetime,
            strawberry.argument(description="Prune runs that ended before this (UTC if no offset)."),
        ],
        limit: Annotated[
            int | None,
            strawberry.argument(description="Lines to delete at most: null or 0 means 5000."),
        ] = None,
    ) -> int:
        context = info.context
        context.require(Action.ADMINISTER, "pruneTerminal")
        try:
            store.as_naive_utc(before)
        except OverflowError:
            # 0001-01-01T00:00:00+05:00 is a valid DateTime, but before the year 1 in UTC.
            raise ClientError(
                f"before={before.isoformat()} is outside the years 1 to 9999 once read as UTC",
                "BAD_USER_INPUT",
            ) from None
        # The store answers what it deleted by the deadline; it fails only when it deleted nothing.
        deadline = asyncio.get_running_loop().time() + context.settings.prune_timeout
        try:
            with answering(context, "pruneTerminal"):
                deleted = await store.prune_terminal(
                    context.engine, before=before, limit=store.clamp_prune_limit(limit), deadline=deadline
                )
        except store.OutcomeUnknown as exc:
            metrics.lines_pruned(exc.deleted, "pruneTerminal")
            log.error("pruneTerminal failed: request %s: %s", context.request_id, exc)
            raise ClientError(
                f"The outcome is unknown: {exc} (request id {context.request_id}).",
                "DATABASE_UNAVAILABLE",
                requestId=context.request_id,
            ) from None
        metrics.lines_pruned(deleted, "pruneTerminal")
        log.info("pruneTerminal: %d lines deleted, before %s", deleted, before.isoformat())
        return deleted


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="The lines of one run as they are written, oldest first, by whichever "
        "process of the service wrote them. With `since` (a line's `cursor`), first every "
        "line newer than it, then live ones: a client that reconnects with the last cursor "
        "it saw misses nothing and sees nothing twice. Without `since`, from now on. A line "
        "whose commit was slow arrives late rather than never. Served at /graphql over "
        "websockets (`graphql-transport-ws`, or the older `graphql-ws`); a reader's token goes "
        'in the connection_init payload as {"Authorization": "Bearer <token>"}.'
    )
    async def run_log_tail(
        self,
        info: strawberry.Info[Context, None],
        run_id: Annotated[strawberry.ID, strawberry.argument(description="The run to follow.")],
        kinds: Kinds = None,
        since: Annotated[
            str | None,
            strawberry.argument(
                description="A line's `cursor`: start with the lines newer than it. Null: from now on."
            ),
        ] = None,
        phase: Phases = None,
        step_id: Steps = None,
        search: Annotated[
            str | None,
            strawberry.argument(
                description="Only lines whose detail, in the words a reader sees (its values: "
                "never its keys or JSON's escapes), holds this text, ignoring case by Unicode's "
                "case folding; 1 to 256 characters."
            ),
        ] = None,
    ) -> AsyncIterator[RunLogLine]:
        # A coroutine returning the stream: its refusals are the operation's error, before it starts.
        context = info.context
        context.require(Action.READ, "runLogTail")
        number = parse_id(run_id)
        if number is None:
            raise ClientError(id_problem("runId", run_id), "BAD_USER_INPUT")
        wire_kinds = None if kinds is None else [k.value for k in kinds]
        try:
            filters = read_filters(phase=phase, step_id=step_id, search=search)
            if since is not None:
                # Refused now, as the operation's error.
                store.decode_cursor(since, "since", store.cursor_scope(number, wire_kinds, filters))
        except (FilterError, store.CursorError) as exc:
            raise ClientError(str(exc), "BAD_USER_INPUT") from None
        if context.tails is None:
            raise ClientError("runLogTail is served over a websocket at /graphql", "BAD_REQUEST")
        try:
            slot = context.tails.take(context.connection)
        except subscriptions.Refused as exc:
            raise ClientError(str(exc), exc.code) from None
        source = tail.tail_lines(
            context,
            number,
            wire_kinds,
            since,
            most_catch_up=context.settings.max_catch_up_lines,
            filters=filters,
        )

        def fail(exc: Exception) -> Exception:
            if isinstance(exc, store.CursorError):
                return ClientError(str(exc), "BAD_USER_INPUT")
            if isinstance(exc, tail.CatchUpTooLong):
                most = context.settings.max_catch_up_lines
                return ClientError(
                    f"runLogTail ended its catch-up after {exc.args[0]} lines: `since` is more than "
                    f"{most} lines behind (RUNLOG_MAX_CATCH_UP_LINES). Subscribe again with the last "
                    "cursor received as `since` to go on, or read the lines with runLog(before:) pages "
                    "first",
                    "CATCH_UP_TOO_LONG",
                    delivered=exc.args[0],
                    maxLines=most,
                )
            if isinstance(exc, GraphQLError):
                return exc  # a ClientError as it is
            return failure(context, f"runLogTail of run {number}", exc)  # a fault: masked and logged

        return subscriptions.Stream(slot, source, as_line, fail)


# ── schema ───────────────────────────────────────────────────────────────────


class RunLogSchema(strawberry.Schema):
    @functools.cached_property
    def root_labels(self) -> dict[OperationType, dict[str, str]]:
        """For each operation type, the label (`answers.operation_label`) of each root field it may select."""
        found = {}
        for kind in OperationType:
            root = graphql_schema(self).get_root_type(kind)
            if root is not None:
                names = {name: name for name in root.fields}
                found[kind] = {
                    **names,
                    "__typename": "__typename",
                    "__schema": "introspection",
                    "__type": "introspection",
                }
        return found

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Strawberry logs every error with its stack; unexpected ones are logged by MaskUnexpected.
        for error in errors:
            log.debug("GraphQL error: %s", error.message)


def build_schema(
    extensions: list[type[SchemaExtension] | Any] | None = None, *, fast_path: bool = True
) -> strawberry.Schema:
    """The schema; `fast_path=False` completes pages with graphql-core alone (tests compare the two)."""
    pages = PageExecutor.with_plans() if fast_path else None
    schema = RunLogSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        # Listed, so the SDL has every detail type in a stable order.
        types=list(DETAIL_TYPES.values()),
        extensions=[NotStoredExtension, *(extensions or [])],
        execution_context_class=pages or VariablesExecutor,
    )
    if pages is not None:
        pages.strawberry_schema = schema
    return schema


def export_sdl() -> str:
    return build_schema().as_str() + "\n"
