"""One frozen settings object, read from the environment: `Settings.from_env()`.

Each setting is one field, declared with `setting(default, parser, does)`. A bad value
raises SettingsError naming the key. `python -m gql.settings` prints docs/operating.md's table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from sqlalchemy.engine import URL, make_url

from .setting_parsers import (
    BOOLEAN,
    DATABASE_URL,
    FORWARDED,
    HOSTS,
    LOG_FORMAT,
    LOG_LEVEL,
    METRICS,
    ORIGINS,
    PATH,
    PUBLIC_URL,
    SECONDS_BY_REASON,
    TOKEN,
    Parser,
    duration,
    optional_duration,
    seconds,
    whole,
)

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///runlog.db"
PREFIX = "RUNLOG_"


class SettingsError(ValueError):
    """A configuration value that the service cannot start with."""


@dataclass(frozen=True)
class Spec:
    """What the service knows of one setting besides its default."""

    parse: Parser
    does: str  # what it does, for the table
    env: str = ""  # the variable; RUNLOG_ and the field's name in capitals when empty
    shown: str = ""  # the default as the table shows it, when its value alone would not say it
    pair: bool = False  # a token: KEY and KEY_NEXT, the current one and the one rotating in


def setting(
    default: Any,
    parse: Parser,
    does: str,
    *,
    env: str = "",
    shown: str = "",
    secret: bool = False,
    pair: bool = False,
) -> Any:
    """Declare a field of `Settings`: its default, how its variable is read, and what it does."""
    # A secret is left out of the repr, so printing the settings shows none.
    return field(
        default=default,
        repr=not secret,
        metadata={"setting": Spec(parse, does, env, shown, pair)},
    )


def spec(item: Field[Any]) -> Spec:
    found: Spec = item.metadata["setting"]
    return found


def env_key(item: Field[Any]) -> str:
    return spec(item).env or PREFIX + item.name.upper()


def _check_replica(database_url: str, read_database_url: str) -> None:
    """Refuse a read replica that cannot be one: SQLite on either side."""
    if make_url(read_database_url).get_backend_name() == "sqlite":
        raise SettingsError(
            "RUNLOG_READ_DATABASE_URL names an SQLite database: a read replica must be a MariaDB "
            "replica of RUNLOG_DATABASE_URL (mysql+aiomysql://...); SQLite has no replication, "
            "so unset RUNLOG_READ_DATABASE_URL"
        )
    if make_url(database_url).get_backend_name() == "sqlite":
        raise SettingsError(
            "RUNLOG_READ_DATABASE_URL is set but RUNLOG_DATABASE_URL is the embedded SQLite "
            "database, which has no replicas: set RUNLOG_DATABASE_URL to the MariaDB primary, "
            "or unset RUNLOG_READ_DATABASE_URL"
        )


@dataclass(frozen=True)
class Settings:
    database_url: str = setting(
        DEFAULT_DATABASE_URL,
        DATABASE_URL,
        "the database that holds `event_run_log` and `event_runs`: the embedded SQLite file, or "
        "MySQL/MariaDB (`mysql+aiomysql://user:password@host:3306/database`)",
        secret=True,
    )
    # Two tokens per role, to rotate without downtime.
    admin_tokens: tuple[str, ...] = setting(
        (),
        TOKEN,
        "bearer token for `pruneTerminal`; `_NEXT`: a second one, accepted too, for rotating "
        "without downtime",
        env="RUNLOG_ADMIN_TOKEN",
        shown="unset: no one is an admin",
        secret=True,
        pair=True,
    )
    reader_tokens: tuple[str, ...] = setting(
        (),
        TOKEN,
        "bearer token(s) for `runLog` and `runLogTail`",
        env="RUNLOG_READER_TOKEN",
        shown="unset: reads are open",
        secret=True,
        pair=True,
    )
    writer_tokens: tuple[str, ...] = setting(
        (),
        TOKEN,
        "bearer token(s) for `writeRunLog`",
        env="RUNLOG_WRITER_TOKEN",
        shown="unset: writes are open",
        secret=True,
        pair=True,
    )
    write_timeout: float = setting(
        3.0,
        seconds(0.05, 4.5),
        "each line's deadline, from the moment its request arrives (aliased writes in one mutation "
        "share it), for the queue, the pool wait and the INSERT together; the database is told to "
        "end the statement by it, and the answer comes at most 1 s later; on SQLite also the "
        "longest a write waits for another writer's lock (`busy_timeout`)",
    )
    read_timeout: float = setting(
        8.0,
        seconds(0.05, 300),
        "seconds a page read may take (and the lookup of the runs its `blockingRun` fields name)",
    )
    prune_timeout: float = setting(
        30.0,
        seconds(0.05, 3600),
        "seconds one `pruneTerminal` call may take; by then it answers what it deleted "
        "(an error only if it deleted nothing)",
    )
    connect_timeout: float = setting(
        2.0,
        seconds(0.05, 60),
        "seconds to connect to MySQL/MariaDB, and to wait for a pooled connection there",
    )
    pool_size: int = setting(
        10,
        whole(1, 1000),
        "pooled connections (plus as many overflow) per process, on MySQL/MariaDB (the embedded "
        "SQLite keeps SQLAlchemy's own pool)",
    )
    write_pool_size: int = setting(
        4,
        whole(1, 1000),
        "connections (plus as many overflow) per process kept for `writeRunLog` and `/readyz`'s check "
        "alone, on MySQL/MariaDB: no reader ever holds one (see [Capacity](#capacity))",
    )
    max_searches: int = setting(
        4,
        whole(1, 1000),
        "`runLog` pages with `search` one process reads at once; past it one is refused with "
        "`TOO_MANY_SEARCHES` and a `retryAfter`; on MySQL/MariaDB at most half of `RUNLOG_POOL_SIZE` "
        "(at least 1)",
    )
    max_exports: int = setting(
        4,
        whole(1, 1000),
        "exports (`GET /runs/{runId}/log.ndjson`) one process streams at once; past it one is refused "
        "with 503 and `Retry-After`; on MySQL/MariaDB at most half of `RUNLOG_POOL_SIZE` (at least 1)",
    )
    send_timeout: float = setting(
        20.0,
        seconds(1, 3600),
        "seconds an export waits for its client to take the bytes sent; past it the client is dropped",
    )
    pool_recycle: float = setting(
        1800.0,
        seconds(1, 7 * 86400),
        "seconds after which a pooled MySQL/MariaDB connection is replaced",
    )
    max_detail_bytes: int = setting(
        64 * 1024,
        whole(1, 16 * 1024 * 1024),
        "largest detail a write accepts, as JSON text; less where the `detail` column holds less "
        "(looked up on the first write)",
    )
    graphiql: bool = setting(
        True, BOOLEAN, "serve GraphiQL to browsers at `/graphql`, with its files at `/graphiql/`"
    )
    introspection: bool = setting(True, BOOLEAN, "answer introspection queries")
    trusted_documents: bool = setting(
        False,
        BOOLEAN,
        "`on`: callers other than admins may run only trusted documents (see "
        "[Trusted documents](#trusted-documents))",
        shown="`off`",
    )
    trusted_documents_file: str | None = setting(
        None,
        PATH,
        'a JSON manifest of more trusted documents, `{"sha256:<hex>": "<text>"}`',
        shown="unset",
    )
    log_level: str = setting("INFO", LOG_LEVEL, "what is logged, from this level up")
    # Query limits (docs/operating.md, "Security").
    max_depth: int = setting(
        10,
        whole(1, 100),
        "deepest selection (a page with `blockingRun` is 4 deep; introspection is not counted)",
    )
    max_aliases: int = setting(30, whole(1, 1000), "most aliased fields in one document")
    max_tokens: int = setting(
        2000,
        whole(1, 100_000),
        "most GraphQL tokens in one document (the shipped operations have a few hundred each)",
    )
    # A 64 KiB detail written inline still fits.
    max_query_bytes: int = setting(
        128 * 1024,
        whole(1, 512 * 1024),
        "longest query text, in UTF-8 bytes, comments included; refused before it is parsed",
        shown="`131072` (128 KiB)",
    )
    max_lines_per_request: int = setting(
        10_000,
        whole(1, 1_000_000),
        "most lines the `runLog` fields of one request could read together (five full pages)",
    )
    max_page_bytes: int = setting(
        8 * 1024 * 1024,
        whole(1024, 1024 * 1024 * 1024),
        "most stored detail bytes the pages of one request return together; a page that reaches "
        "it ends early with `hasNextPage: true` (its first line always comes)",
        shown="`8388608` (8 MiB)",
    )
    max_body_bytes: int = setting(
        4 * 1024 * 1024,
        whole(1, 1024 * 1024 * 1024),
        "largest request body; a larger one is refused with 413 before it is parsed",
        shown="`4194304` (4 MiB)",
    )
    # Slow clients; a slow request head is the reverse proxy's (deploy/nginx/runlog.conf).
    header_timeout: float = setting(
        10.0,
        seconds(0.1, 300),
        "seconds a websocket may take to send `connection_init` once open; past it it is closed "
        "with 4408 (a request's head is timed by the reverse proxy: docs/operating.md)",
    )
    body_timeout: float = setting(
        30.0,
        seconds(0.1, 3600),
        "seconds a request's body may take to arrive, from its head; past it, 408 "
        "(`REQUEST_TIMEOUT`) and the connection is closed",
    )
    keepalive_timeout: float = setting(
        5.0, seconds(0.1, 300), "seconds an idle keep-alive connection is kept open"
    )
    max_connections: int = setting(
        1000,
        whole(1, 100_000),
        "requests and websockets one process serves at once; past it, new ones get 503 at once",
    )
    # The live tail (docs/operating.md, "The live tail").
    max_subscriptions: int = setting(
        1000,
        whole(1, 100_000),
        "`runLogTail` subscriptions one process holds at once; past it a new one is refused with "
        "`TOO_MANY_SUBSCRIPTIONS` naming this setting",
    )
    max_subscriptions_per_connection: int = setting(
        20,
        whole(1, 1000),
        "`runLogTail` subscriptions one websocket holds at once; past it a new one is refused with "
        "`TOO_MANY_SUBSCRIPTIONS` naming this setting",
    )
    # A client far behind reads pages (runLog before:) or subscribes again.
    max_catch_up_lines: int = setting(
        10_000,
        whole(500, 1_000_000),
        "lines one `runLogTail` delivers from its `since` before it has caught up; past it the tail "
        "ends with `CATCH_UP_TOO_LONG` after the last whole page that fits (500 lines, fewer where "
        "its cursors would name more than 128 recent lines), and a tail started again from the "
        "last cursor received goes on",
    )
    ws_ping_interval: float = setting(
        20.0,
        seconds(1, 3600),
        "seconds between keep-alive pings on a websocket (a ping frame; on the older `graphql-ws` "
        "protocol a `ka` message too); a client that does not answer a ping within as long is "
        "disconnected",
    )
    retention: float | None = setting(
        None,
        optional_duration("1m", "36500d"),
        "keep lines of terminal runs this long, then the sweeper prunes them (see Retention)",
        shown="unset: off",
    )
    sweep_interval: float = setting(
        60.0, duration("1s", "7d"), "the wait between two sweeper ticks", shown="`60s`"
    )
    wait_interval: float = setting(
        0.5,
        seconds(0.05, 5),
        "seconds between two looks for new lines of the runs that long polls "
        "(`runLog(before:, wait:)`) and tails wait on: one query per look per process, for all of "
        "them; a line written through any process wakes its waiters within about this long",
    )
    max_waits: int = setting(
        1000,
        whole(1, 1_000_000),
        "long-polling `runLog` calls one process holds at once; past it a call is refused with "
        "`TOO_MANY_WAITS` (it may retry, or poll without `wait`); a call whose client hangs up stops "
        "waiting then, and frees its place",
    )
    # A read replica (gql/store/replica.py).
    read_database_url: str | None = setting(
        None,
        DATABASE_URL,
        "a MariaDB read replica of `RUNLOG_DATABASE_URL` that `runLog`'s pages read from (see "
        "[A read replica](#a-read-replica-run-and-tested)); refused with SQLite on either side",
        shown="unset: one database",
        secret=True,
    )
    read_max_lag: float = setting(
        5.0,
        seconds(0.1, 3600),
        "seconds a replica may be behind its primary (`Seconds_Behind_Master`) and still serve "
        "pages; also the longest `runLog(fresh: true)` waits for it",
    )
    read_check_interval: float = setting(
        1.0,
        seconds(0.1, 60),
        "seconds between two looks at the replica's replication status (one query per look per process)",
    )
    # docs/operating.md, "Watching it".
    log_format: str = setting(
        "text", LOG_FORMAT, "`text`, or `json`: one JSON object per line (see [Logs](#logs))"
    )
    metrics: str = setting(
        "on",
        METRICS,
        "`on`: `GET /metrics` on the API's port; `off`; or a port number: `/metrics` served on that "
        "port alone, on the same `--host` (see [Metrics](#metrics))",
    )
    # Alerts on holds (docs/operating.md, "Alerts on holds").
    hold_alert_after: float = setting(
        900.0,
        seconds(1, 30 * 86400),
        "seconds a hold lasts before `deploy/prometheus/alerts.yml` alerts on it (served as "
        "`runlog_hold_alert_after_seconds`)",
    )
    hold_alert_after_by_reason: tuple[tuple[str, float], ...] = setting(
        (),
        SECONDS_BY_REASON,
        "the same, for some reasons: `STEP_PARKED=300,STEP_RETRYING=1800`",
        shown="unset: `RUNLOG_HOLD_ALERT_AFTER` for every reason",
    )
    hold_alert_runs: int = setting(
        200,
        whole(1, 10_000),
        "runs in flight, newest activity first, whose holds a `/metrics` scrape reads and shows, "
        "and as many finished runs with a failed cleanup; `runlog_hold_runs_left_out` counts the others",
    )
    public_url: str | None = setting(
        None,
        PUBLIC_URL,
        "the base URL users reach the service at (`https://runlog.example.com`); an alert links to "
        "`<it>/runs/<runId>`",
        shown="unset: the page's path alone",
    )
    cors_origins: tuple[str, ...] = setting(
        (),
        ORIGINS,
        "origins whose browser pages may call the API, comma-separated, exact "
        "(`https://admin.example.com`); a wildcard stops start-up (see [CORS](#cors))",
        shown="unset: none",
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        HOSTS,
        "the host names the service answers to (the `Host` header), e.g. `api.example.com`, "
        "`*.example.com`; any other is refused with a JSON 400, but `/livez`, `/readyz`, `/healthz` "
        "and `/metrics`; against DNS rebinding (see [CORS](#cors))",
        shown="unset: any",
    )
    forwarded_allow_ips: str = setting(
        "127.0.0.1",
        FORWARDED,
        "the proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed (uvicorn's "
        "`--forwarded-allow-ips`)",
    )
    workers: int = setting(
        1,
        whole(1, 256),
        "`serve`'s worker processes when `--workers` is not given (MySQL/MariaDB only past 1)",
    )
    otel: bool = setting(
        False,
        BOOLEAN,
        "OpenTelemetry spans for requests and SQL; needs the `otel` extra (see "
        "[OpenTelemetry](#opentelemetry))",
    )

    @property
    def metrics_port(self) -> int | None:
        """The port /metrics has to itself, or None (served with the API, or off)."""
        return int(self.metrics) if self.metrics.isdigit() else None

    @property
    def url(self) -> URL:
        return make_url(self.database_url)

    @property
    def read_url(self) -> URL | None:
        return None if self.read_database_url is None else make_url(self.read_database_url)

    @property
    def is_embedded(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @property
    def safe_database_url(self) -> str:
        """The URL with any password hidden, for logs."""
        return self.url.render_as_string(hide_password=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values = {item.name: _read(env, item) for item in fields(cls)}
        if values["read_database_url"] is not None:
            _check_replica(values["database_url"], values["read_database_url"])
        return cls(**values)


def _read(env: Mapping[str, str], item: Field[Any]) -> Any:
    """One setting from the environment: its default when unset or empty, else what its parser reads."""
    found, key = spec(item), env_key(item)
    if found.pair:
        return _tokens(env, key)
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return item.default
    try:
        return found.parse(raw.strip())
    except ValueError as exc:
        raise SettingsError(f"{key}={raw!r} is not accepted: {exc}") from None


def _tokens(env: Mapping[str, str], key: str) -> tuple[str, ...]:
    """Read `KEY` and `KEY_NEXT`: the current token and the one rotating in."""
    found = []
    for name in (key, f"{key}_NEXT"):
        if raw := env.get(name, "").strip():
            # Never in the message: the value is a secret, even a bad one.
            try:
                found.append(TOKEN(raw))
            except ValueError as exc:
                raise SettingsError(f"{name} {exc}") from None
    return tuple(found)


def markdown_table() -> str:
    """The configuration table of docs/operating.md, from the declarations above."""
    rows = ["| variable | default | accepts | what it does |", "| --- | --- | --- | --- |"]
    for item in fields(Settings):
        found = spec(item)
        key = env_key(item)
        variable = f"`{key}`, `{key}_NEXT`" if found.pair else f"`{key}`"
        rows.append(
            f"| {variable} | {found.shown or _shown(item.default)} | {found.parse.accepts} | {found.does} |"
        )
    return "\n".join(rows) + "\n"


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


if __name__ == "__main__":
    print(markdown_table(), end="")
