"""What `GET /metrics` shows: the service's series, in Prometheus' text format.

With `serve --workers N`, a scrape adds up every process's files (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

_log = logging.getLogger("gql.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SAMPLE_EVERY = 5.0  # seconds between two samples of what is not counted as it happens

# ── requests ─────────────────────────────────────────────────────────────────
# At module level, not per app: the registry is one per process by design.

REQUESTS = Counter(
    "runlog_requests",
    "HTTP requests answered, by operation (the GraphQL root fields asked, or the route) and outcome "
    "(ok, error: a GraphQL answer with errors, refused: 4xx, failed: 5xx).",
    ["operation", "outcome"],
)
DURATION = Histogram(
    "runlog_request_duration_seconds",
    "Time from a request's arrival at the app to its last byte handed to the server, by operation.",
    ["operation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)

# ── writes, reads, pruning ───────────────────────────────────────────────────

WRITES = Counter(
    "runlog_writes",
    "writeRunLog answers, by outcome (stored or refused) and reason (stored, or why it was refused).",
    ["outcome", "reason"],
)
LINES_READ = Counter("runlog_lines_read", "Lines served by runLog pages.")
LINES_PRUNED = Counter(
    "runlog_lines_pruned",
    "Lines deleted by pruning, by who pruned (sweeper or pruneTerminal).",
    ["source"],
)
SWEEPS = Counter(
    "runlog_sweeper_ticks",
    "Retention sweeper ticks, by outcome (swept, skipped: another process held the lock, failed).",
    ["outcome"],
)

# ── fall-backs and swallowed errors ──────────────────────────────────────────

FALLBACKS = Counter(
    "runlog_fallbacks",
    "Work that left the compiled page plan for graphql-core's ordinary completion, by path (page_plan: "
    "a runLog page completed without its compiled plan) and reason.",
    ["path", "reason"],
)
SWALLOWED = Counter(
    "runlog_errors_swallowed",
    "Exceptions caught, logged and not raised (the work goes on without what failed), by where.",
    ["where"],
)

# ── sampled: summed over the live processes ──────────────────────────────────

POOL_IN_USE = Gauge(
    "runlog_pool_connections_in_use",
    "Database connections checked out of the pools now (the readers' and the writes').",
    multiprocess_mode="livesum",
)
WRITE_QUEUE = Gauge(
    "runlog_write_queue_lines",
    "Lines waiting in the write queue for an INSERT now.",
    multiprocess_mode="livesum",
)
CACHE_ENTRIES = Gauge(
    "runlog_cache_entries",
    "Entries held by each cache (documents: parsed query texts; plans: page plans by selection).",
    ["cache"],
    multiprocess_mode="livesum",
)
CACHE_BYTES = Gauge(
    "runlog_cache_bytes",
    "Bytes each cache counts as held (what bounds it).",
    ["cache"],
    multiprocess_mode="livesum",
)
SUBSCRIPTIONS_OPEN = Gauge(
    "runlog_subscriptions_open",
    "runLogTail subscriptions open now (sampled).",
    multiprocess_mode="livesum",
)
LONG_POLLS_WAITING = Gauge(
    "runlog_long_polls_waiting",
    "runLog calls waiting now for a newer line (wait > 0).",
    multiprocess_mode="livesum",
)

# ── what the rest of the service calls ───────────────────────────────────────

_requests: dict[tuple[str, str], Any] = {}
_durations: dict[str, Any] = {}


def observe_request(operation: str, outcome: str, seconds: float) -> None:
    """Count one answered request and its duration."""
    counter = _requests.get((operation, outcome))
    if counter is None:
        counter = _requests[operation, outcome] = REQUESTS.labels(operation, outcome)
    histogram = _durations.get(operation)
    if histogram is None:
        histogram = _durations[operation] = DURATION.labels(operation)
    counter.inc()
    histogram.observe(seconds)


_STORED = WRITES.labels("stored", "stored")
_refusals: dict[str, Any] = {}


def count_write(reason: str | None) -> None:
    """Count one writeRunLog answer: stored when `reason` is None, else refused (refusals.reason_of)."""
    if reason is None:
        _STORED.inc()
        return
    counter = _refusals.get(reason)
    if counter is None:
        counter = _refusals[reason] = WRITES.labels("refused", reason.lower())
    counter.inc()


def lines_read(count: int) -> None:
    LINES_READ.inc(count)


_PRUNED = {source: LINES_PRUNED.labels(source) for source in ("sweeper", "pruneTerminal")}


def lines_pruned(count: int, source: str) -> None:
    _PRUNED[source].inc(count)


def sweeper_tick(outcome: str) -> None:
    SWEEPS.labels(outcome).inc()


@contextlib.contextmanager
def long_poll_waiting() -> Iterator[None]:
    """Hold this open while a runLog call waits for a newer line."""
    LONG_POLLS_WAITING.inc()
    try:
        yield
    finally:
        LONG_POLLS_WAITING.dec()


_fallback_log = logging.getLogger("gql.fallback")
# Which (path, reason, document) fall-backs were logged, the oldest forgotten past _LOGGED_MAX.
_logged: OrderedDict[tuple[str, str, int], None] = OrderedDict()
_LOGGED_MAX = 4096


def fell_back(path: str, reason: str, document: str | None, why: str, level: int = logging.INFO) -> None:
    """Count one fall-back off `path` for `reason` (a fixed label); log `why` once per query text."""
    FALLBACKS.labels(path, reason).inc()
    key = (path, reason, hash(document))
    if key in _logged:
        _logged.move_to_end(key)
        return
    _logged[key] = None
    if len(_logged) > _LOGGED_MAX:
        _logged.popitem(last=False)
    # By its hash: its text may hold a write's detail inline, and what is written is never logged.
    # surrogatepass: JSON may carry half a surrogate pair, which the parser refuses later.
    digest = "" if document is None else hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()
    shown = "" if document is None else f"; document sha256:{digest}"
    _fallback_log.log(level, "%s fell back (%s): %s%s", path, reason, why, shown)


def swallowed(where: str) -> None:
    """Count one exception caught at `where`, logged there, and not raised."""
    SWALLOWED.labels(where).inc()


# ── sampling ─────────────────────────────────────────────────────────────────


def sample(state: dict[str, Any], caches: Any, plans: Any, queued: int) -> None:
    """Set the sampled gauges from what the app hands in: its lifespan state, caches, plans, queue length."""
    engines = {state["engine"], state.get("write_engine", state["engine"])}  # the readers' and the writes'
    POOL_IN_USE.set(sum(_call(engine.sync_engine.pool, "checkedout") for engine in engines))
    if caches is not None:
        CACHE_ENTRIES.labels("documents").set(len(caches.texts))
        CACHE_BYTES.labels("documents").set(caches.held_bytes)
    if plans is not None:
        CACHE_ENTRIES.labels("plans").set(len(plans.entries))
        CACHE_BYTES.labels("plans").set(plans.held_bytes)
    WRITE_QUEUE.set(queued)
    tails = state.get("tails")  # gql/api/subscriptions.py: the running runLogTail subscriptions
    if tails is not None:
        SUBSCRIPTIONS_OPEN.set(len(tails.running))


def _call(pool: Any, name: str) -> int:
    method = getattr(pool, name, None)
    return int(method()) if callable(method) else 0


async def sample_every(take: Callable[[], None], interval: float = SAMPLE_EVERY) -> None:
    """Call `take` (the app's sampling) until cancelled (the lifespan runs this)."""
    while True:
        try:
            take()
        except Exception:  # a gauge left stale is no reason to stop sampling
            swallowed("metrics.sample")
            _log.exception("sampling the gauges failed; they keep their last values")
        await asyncio.sleep(interval)


# ── the exposition ───────────────────────────────────────────────────────────


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def registry() -> CollectorRegistry:
    """What a scrape shows: every live and dead process's files in multiprocess mode, else this one."""
    if multiprocess_dir() is None:
        return REGISTRY
    collected = CollectorRegistry()
    _multiprocess.MultiProcessCollector(collected)  # type: ignore[no-untyped-call]
    return collected


def exposition(accept: str | None, *more: Collector) -> tuple[bytes, str]:
    """The scrape's body and content type: text format 0.0.4 unless `Accept` asks for OpenMetrics.

    `more`: collectors of this scrape alone (gql/edge/hold_metrics.py's), shown after the registry's.
    """
    encoder, content_type = choose_encoder(accept or "")
    shown = registry()
    if more:
        # Without auto_describe, registering asks no collector for its names: nothing is collected twice.
        scrape = CollectorRegistry(auto_describe=False)
        for collector in (shown, *more):
            scrape.register(collector)
        shown = scrape
    return encoder(shown), content_type


def forget_dead_workers() -> None:
    """Drop the live gauges of the workers no longer running (their counts stay: what they counted happened).

    Each worker calls it as it starts: one uvicorn started in place of a dead one clears that one's.
    """
    folder = multiprocess_dir()
    if folder is None:
        return
    for name in os.listdir(folder):
        if name.startswith("gauge_live") and name.endswith(".db"):
            pid = int(name[:-3].rsplit("_", 1)[1])
            try:
                os.kill(pid, 0)  # only asks whether it runs
            except ProcessLookupError:
                _multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
            except PermissionError:
                pass  # another user's process: running
