"""Storage: the run log's operations as plain async functions over an engine.

Each call takes its own connection from the pool (graphql-core resolves
sibling fields as concurrent tasks, and an SQLAlchemy connection must not be
shared between tasks), unless its caller holds one (`connections`). Nothing
here knows about GraphQL. One concern per module; what callers use is named
here, so that `store.read_page` reads the same wherever it is called from.
"""

from .connections import HeldConnection, one_connection
from .cursors import (
    MAX_CURSOR_CHARS,
    RECENT_LINES,
    Cursor,
    CursorError,
    PageCursors,
    Scope,
    Window,
    cursor_scope,
    decode_cursor,
    encode_cursor,
    newer_cursors,
    page_cursors,
    settled_before,
)
from .errors import (
    KeyReused,
    NotStored,
    OutcomeUnknown,
    answered_by_database,
    is_conflict,
    is_unavailable,
    one_line_reason,
)
from .newest import read_newest
from .pruning import (
    Pruned,
    PruneSlice,
    count_eligible,
    count_eligible_runs,
    find_pruned,
    prune_slice,
    prune_terminal,
)
from .reads import count_recent, cursor_now, ping, read_page
from .runs import RUNS_IN_FLIGHT_DEFAULT, RUNS_IN_FLIGHT_MAX, find_runs, runs_in_flight, terminal_sql
from .statements import page_query, page_statement
from .values import (
    LINE_ID_MAX,
    PRUNE_LIMIT_DEFAULT,
    PRUNE_LIMIT_MAX,
    READ_LIMIT_DEFAULT,
    READ_LIMIT_MAX,
    Line,
    NewLine,
    Page,
    Run,
    as_naive_utc,
    clamp_prune_limit,
    clamp_read_limit,
    utc_now_millis,
)
from .writes import (
    ANSWER_GRACE_SECONDS,
    MIN_STATEMENT_SECONDS,
    detail_capacity,
    forget_keys,
    insert_keyed,
    insert_lines,
)

__all__ = [
    "ANSWER_GRACE_SECONDS",
    "LINE_ID_MAX",
    "MAX_CURSOR_CHARS",
    "MIN_STATEMENT_SECONDS",
    "PRUNE_LIMIT_DEFAULT",
    "PRUNE_LIMIT_MAX",
    "READ_LIMIT_DEFAULT",
    "READ_LIMIT_MAX",
    "RECENT_LINES",
    "RUNS_IN_FLIGHT_DEFAULT",
    "RUNS_IN_FLIGHT_MAX",
    "Cursor",
    "CursorError",
    "HeldConnection",
    "KeyReused",
    "Line",
    "NewLine",
    "NotStored",
    "OutcomeUnknown",
    "Page",
    "PageCursors",
    "PruneSlice",
    "Pruned",
    "Run",
    "Scope",
    "Window",
    "answered_by_database",
    "as_naive_utc",
    "clamp_prune_limit",
    "clamp_read_limit",
    "count_eligible",
    "count_eligible_runs",
    "count_recent",
    "cursor_now",
    "cursor_scope",
    "decode_cursor",
    "detail_capacity",
    "encode_cursor",
    "find_pruned",
    "find_runs",
    "forget_keys",
    "insert_keyed",
    "insert_lines",
    "is_conflict",
    "is_unavailable",
    "newer_cursors",
    "one_connection",
    "one_line_reason",
    "page_cursors",
    "page_query",
    "page_statement",
    "ping",
    "prune_slice",
    "prune_terminal",
    "read_newest",
    "read_page",
    "runs_in_flight",
    "settled_before",
    "terminal_sql",
    "utc_now_millis",
]
