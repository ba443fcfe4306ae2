"""One frozen settings object, read from the environment.

Every key is documented in docs/operating.md ("Configuration") with its default. A bad value stops
start-up with an error that names the key and says what would be accepted,
rather than surfacing later as a confusing failure on the first request.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///runlog.db"
SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "mysql+aiomysql", "mariadb+aiomysql")

T = TypeVar("T")


class SettingsError(ValueError):
    """A configuration value that the service cannot start with."""


@dataclass(frozen=True)
class Settings:
    # The URL may hold a password and the tokens are secrets: none of them is
    # in the repr, so logging or printing the settings shows none of them.
    database_url: str = field(default=DEFAULT_DATABASE_URL, repr=False)
    # Role tokens: up to two per role, so a token can be rotated without
    # downtime (configure new and old, move the callers, drop the old one).
    admin_tokens: tuple[str, ...] = field(default=(), repr=False)
    reader_tokens: tuple[str, ...] = field(default=(), repr=False)
    writer_tokens: tuple[str, ...] = field(default=(), repr=False)
    # Seconds. A write must answer within a few seconds even when the database
    # does not answer at all; the whole write (checkout, connect, statement) is
    # bounded by write_timeout.
    write_timeout: float = 3.0
    read_timeout: float = 8.0
    # A prune deletes up to 50,000 lines in one statement: it gets longer
    # than a page read, but is still bounded so an admin's call answers.
    prune_timeout: float = 30.0
    connect_timeout: float = 2.0
    pool_size: int = 10
    pool_recycle: float = 1800.0
    max_detail_bytes: int = 64 * 1024
    graphiql: bool = True
    introspection: bool = True
    # Trusted documents (gql/trusted.py): off, every caller may run any
    # document; on, only admins may run one that is not known.
    trusted_documents: bool = False
    trusted_documents_file: str | None = None
    log_level: str = "INFO"
    # Query limits (see docs/operating.md, "Security").
    max_depth: int = 10
    max_aliases: int = 30
    max_tokens: int = 2000
    # Twice the default detail limit: a write with its 64 KiB detail written
    # inline (not as a variable) still fits.
    max_query_bytes: int = 128 * 1024
    max_lines_per_request: int = 10_000
    # The stored detail bytes the pages of one request return together (see
    # docs/operating.md, "Security"): 128 details of the most a writer may store (64 KiB),
    # or thousands of ordinary ones. 2,000 details of 64 KiB took 0.77 s and
    # 124 MB to serve as one page; 8 MiB of them take about a sixteenth of that.
    max_page_bytes: int = 8 * 1024 * 1024
    max_body_bytes: int = 4 * 1024 * 1024
    # Slow clients (seconds; see gql/server.py): a request's head must arrive
    # within header_timeout, its body within body_timeout of the head, and an
    # idle keep-alive connection is closed after keepalive_timeout.
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 5.0
    # Connections and requests at once, past which new requests get 503.
    max_connections: int = 1000
    # The live tail (runLogTail over websockets; see docs/operating.md, "The
    # live tail"): subscriptions at once per process and per connection, and
    # the seconds between keep-alive pings on an idle websocket.
    max_subscriptions: int = 1000
    max_subscriptions_per_connection: int = 20
    # Lines one tail delivers from `since` before it has caught up: a
    # client far behind reads pages (runLog before:) or subscribes again.
    max_catch_up_lines: int = 10_000
    ws_ping_interval: float = 20.0
    # Retention: off unless set (seconds).
    retention: float | None = None
    sweep_interval: float = 60.0
    # The live tail and the long poll (gql/tail.py): how often a process
    # looks for new lines of the runs its waiters follow (one query for all),
    # and how many long-polling runLog calls it holds at once.
    wait_interval: float = 0.5
    max_waits: int = 1000
    # A read replica (gql/replica.py): runLog's pages read from it while it is
    # running and at most read_max_lag seconds behind; it is looked at every
    # read_check_interval seconds. None: one database.
    read_database_url: str | None = field(default=None, repr=False)
    read_max_lag: float = 5.0
    read_check_interval: float = 1.0
    # Running it in production (docs/operating.md, "Watching it").
    log_format: str = "text"
    # /metrics: "on" (on the API's port), "off", or a port of its own.
    metrics: str = "on"
    cors_origins: tuple[str, ...] = ()
    # The proxies whose X-Forwarded-For and X-Forwarded-Proto are believed
    # (uvicorn's --forwarded-allow-ips): addresses or networks, or "*".
    forwarded_allow_ips: str = "127.0.0.1"
    # serve's worker processes when --workers is not given.
    workers: int = 1
    # OpenTelemetry spans (the otel extra; gql/tracing.py).
    otel: bool = False

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
        reader = _Reader(env)
        database_url = reader.get("RUNLOG_DATABASE_URL", _database_url, DEFAULT_DATABASE_URL)
        read_database_url = reader.get("RUNLOG_READ_DATABASE_URL", _database_url, None)
        if read_database_url is not None:
            _check_replica(database_url, read_database_url)
        return cls(
            database_url=database_url,
            admin_tokens=reader.tokens("RUNLOG_ADMIN_TOKEN"),
            reader_tokens=reader.tokens("RUNLOG_READER_TOKEN"),
            writer_tokens=reader.tokens("RUNLOG_WRITER_TOKEN"),
            write_timeout=reader.get("RUNLOG_WRITE_TIMEOUT", _seconds(0.05, 4.5), 3.0),
            read_timeout=reader.get("RUNLOG_READ_TIMEOUT", _seconds(0.05, 300), 8.0),
            prune_timeout=reader.get("RUNLOG_PRUNE_TIMEOUT", _seconds(0.05, 3600), 30.0),
            connect_timeout=reader.get("RUNLOG_CONNECT_TIMEOUT", _seconds(0.05, 60), 2.0),
            pool_size=reader.get("RUNLOG_POOL_SIZE", _whole(1, 1000), 10),
            pool_recycle=reader.get("RUNLOG_POOL_RECYCLE", _seconds(1, 7 * 86400), 1800.0),
            max_detail_bytes=reader.get("RUNLOG_MAX_DETAIL_BYTES", _whole(1, 16 * 1024 * 1024), 64 * 1024),
            graphiql=reader.get("RUNLOG_GRAPHIQL", _boolean, True),
            introspection=reader.get("RUNLOG_INTROSPECTION", _boolean, True),
            trusted_documents=reader.get("RUNLOG_TRUSTED_DOCUMENTS", _boolean, False),
            trusted_documents_file=reader.get("RUNLOG_TRUSTED_DOCUMENTS_FILE", str, None),
            log_level=reader.get("RUNLOG_LOG_LEVEL", _log_level, "INFO"),
            max_depth=reader.get("RUNLOG_MAX_DEPTH", _whole(1, 100), 10),
            max_aliases=reader.get("RUNLOG_MAX_ALIASES", _whole(1, 1000), 30),
            max_tokens=reader.get("RUNLOG_MAX_TOKENS", _whole(1, 100_000), 2000),
            # At 512 KiB a text of one comment takes about 0.1 s to parse.
            max_query_bytes=reader.get("RUNLOG_MAX_QUERY_BYTES", _whole(1, 512 * 1024), 128 * 1024),
            max_lines_per_request=reader.get("RUNLOG_MAX_LINES_PER_REQUEST", _whole(1, 1_000_000), 10_000),
            max_page_bytes=reader.get(
                "RUNLOG_MAX_PAGE_BYTES", _whole(1024, 1024 * 1024 * 1024), 8 * 1024 * 1024
            ),
            max_body_bytes=reader.get(
                "RUNLOG_MAX_BODY_BYTES", _whole(1, 1024 * 1024 * 1024), 4 * 1024 * 1024
            ),
            header_timeout=reader.get("RUNLOG_HEADER_TIMEOUT", _seconds(0.1, 300), 10.0),
            body_timeout=reader.get("RUNLOG_BODY_TIMEOUT", _seconds(0.1, 3600), 30.0),
            keepalive_timeout=reader.get("RUNLOG_KEEPALIVE_TIMEOUT", _seconds(0.1, 300), 5.0),
            max_connections=reader.get("RUNLOG_MAX_CONNECTIONS", _whole(1, 100_000), 1000),
            max_subscriptions=reader.get("RUNLOG_MAX_SUBSCRIPTIONS", _whole(1, 100_000), 1000),
            max_subscriptions_per_connection=reader.get(
                "RUNLOG_MAX_SUBSCRIPTIONS_PER_CONNECTION", _whole(1, 1000), 20
            ),
            max_catch_up_lines=reader.get("RUNLOG_MAX_CATCH_UP_LINES", _whole(500, 1_000_000), 10_000),
            ws_ping_interval=reader.get("RUNLOG_WS_PING_INTERVAL", _seconds(1, 3600), 20.0),
            retention=reader.get("RUNLOG_RETENTION", _optional_duration("1m", "36500d"), None),
            sweep_interval=reader.get("RUNLOG_SWEEP_INTERVAL", _duration("1s", "7d"), 60.0),
            wait_interval=reader.get("RUNLOG_WAIT_INTERVAL", _seconds(0.05, 5), 0.5),
            max_waits=reader.get("RUNLOG_MAX_WAITS", _whole(1, 1_000_000), 1000),
            read_database_url=read_database_url,
            read_max_lag=reader.get("RUNLOG_READ_MAX_LAG", _seconds(0.1, 3600), 5.0),
            read_check_interval=reader.get("RUNLOG_READ_CHECK_INTERVAL", _seconds(0.1, 60), 1.0),
            log_format=reader.get("RUNLOG_LOG_FORMAT", _log_format, "text"),
            metrics=reader.get("RUNLOG_METRICS", _metrics, "on"),
            cors_origins=reader.get("RUNLOG_CORS_ORIGINS", _origins, ()),
            forwarded_allow_ips=reader.get("RUNLOG_FORWARDED_ALLOW_IPS", _forwarded, "127.0.0.1"),
            workers=reader.get("RUNLOG_WORKERS", _whole(1, 256), 1),
            otel=reader.get("RUNLOG_OTEL", _boolean, False),
        )


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def get(self, key: str, parse: Callable[[str], T], default: T) -> T:
        raw = self.env.get(key)
        if raw is None or raw.strip() == "":
            return default
        try:
            return parse(raw.strip())
        except ValueError as exc:
            raise SettingsError(f"{key}={raw!r} is not accepted: {exc}") from None

    def tokens(self, key: str) -> tuple[str, ...]:
        """Read `KEY` and `KEY_NEXT`: the current token and the one rotating in."""
        found = []
        for name in (key, f"{key}_NEXT"):
            raw = self.env.get(name, "")
            if raw.strip():
                if len(raw.strip()) < 16:
                    raise SettingsError(f"{name} is too short to be a secret: use at least 16 characters")
                if not all("!" <= c <= "~" for c in raw.strip()):
                    # It travels in an HTTP header, which carries ASCII: any
                    # other character could never be matched.
                    raise SettingsError(f"{name} must be printable ASCII with no spaces")
                found.append(raw.strip())
        return tuple(found)


def _database_url(raw: str) -> str:
    try:
        url = make_url(raw)
    except ArgumentError:
        raise ValueError(
            "expected a SQLAlchemy URL such as sqlite+aiosqlite:///runlog.db "
            "or mysql+aiomysql://user:password@host:3306/database"
        ) from None
    if url.drivername not in SUPPORTED_DRIVERS:
        raise ValueError(
            f"driver {url.drivername!r} is not supported; use one of {', '.join(SUPPORTED_DRIVERS)}"
        )
    if url.get_backend_name() != "sqlite" and not url.database:
        raise ValueError("the URL names no database (add /<database> after the host)")
    return raw


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


# Every number bounds something (a wait, a pool, a size): a value outside its
# range is refused, never clamped, and the refusal gives the range. `inf` and
# `nan` parse as floats and would make a bound no bound at all; a timeout of a
# nanosecond, or a pool of a million connections, is a typo, not a setting.


def _seconds(min_: float, max_: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("expected a number of seconds, such as 2 or 0.5") from None
        if value <= 0:
            raise ValueError("expected a positive number of seconds")
        if not min_ <= value <= max_:  # nan and inf too
            raise ValueError(f"expected at least {min_:g} and at most {max_:g} seconds")
        return value

    return parse


def _whole(min_: int, max_: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"expected a whole number from {min_} to {max_}, such as 10") from None
        if value < 1:
            raise ValueError(f"expected a whole number of at least 1 (and at most {max_})")
        if not min_ <= value <= max_:
            raise ValueError(f"expected a whole number from {min_} to {max_}")
        return value

    return parse


def _boolean(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false (also 1/0, yes/no, on/off)")


def _log_level(raw: str) -> str:
    level = raw.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError("expected one of DEBUG, INFO, WARNING, ERROR")
    return level


def _log_format(raw: str) -> str:
    if raw.lower() not in ("text", "json"):
        raise ValueError("expected text or json")
    return raw.lower()


def _metrics(raw: str) -> str:
    lowered = raw.lower()
    if lowered in ("on", "true", "1", "yes"):
        return "on"
    if lowered in ("off", "false", "0", "no"):
        return "off"
    if raw.isdigit() and 1 <= int(raw) <= 65535:
        return str(int(raw))
    raise ValueError(
        "expected on (served at /metrics on the API's port), off, or a port from 1 to 65535 "
        "to serve it there alone"
    )


def _forwarded(raw: str) -> str:
    import ipaddress

    parts = [part.strip() for part in raw.split(",") if part.strip()]
    for part in parts:
        if part == "*":
            continue
        try:
            ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise ValueError(
                f"{part!r} is not an address or network: expected addresses or networks, "
                "comma-separated (10.0.0.0/8,127.0.0.1), or * to trust every proxy"
            ) from None
    return ",".join(parts)


def _origins(raw: str) -> tuple[str, ...]:
    """Exact origins, comma-separated: scheme://host[:port], no path, no wildcard."""
    found = []
    for part in raw.split(","):
        origin = part.strip()
        if not origin:
            continue
        if "*" in origin:
            # Browsers refuse a wildcard on a request with credentials (an
            # Authorization header), and a wildcard would let any page on the
            # web read the log with a token it holds.
            raise ValueError(
                f"{origin!r}: a wildcard is not accepted; list each origin exactly, "
                "such as https://admin.example.com"
            )
        scheme, sep, rest = origin.partition("://")
        if scheme not in ("http", "https") or not sep or not rest or "/" in rest or origin != origin.strip():
            raise ValueError(
                f"{origin!r} is not an origin: expected scheme://host[:port] with no path, "
                "such as https://admin.example.com"
            )
        found.append(origin.rstrip("/"))
    return tuple(found)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(raw: str) -> float:
    """Parse `30d`, `12h`, `15m` or `90s` into seconds."""
    text = raw.strip().lower()
    unit = text[-1:] if text[-1:] in _UNITS else ""
    number = text[: -len(unit)] if unit else text
    try:
        value = float(number)
    except ValueError:
        raise ValueError(
            f"{raw!r} is not a duration: expected a number and a unit, such as 30d, 12h, 15m or 90s"
        ) from None
    if not unit:
        raise ValueError(f"{raw!r} has no unit: add s, m, h or d (for example {number}d)")
    if not value > 0:
        raise ValueError(f"{raw!r} is not a positive duration")
    if not math.isfinite(value * _UNITS[unit]):
        raise ValueError(f"{raw!r} is not a finite duration")
    return value * _UNITS[unit]


def _duration(min_: str, max_: str) -> Callable[[str], float]:
    low, high = parse_duration(min_), parse_duration(max_)

    def parse(raw: str) -> float:
        value = parse_duration(raw)
        if not low <= value <= high:
            raise ValueError(f"{raw!r} is outside what is accepted: from {min_} to {max_}")
        return value

    return parse


def _optional_duration(min_: str, max_: str) -> Callable[[str], float | None]:
    bounded = _duration(min_, max_)

    def parse(raw: str) -> float | None:
        if raw.lower() in ("off", "none", "0"):
            return None
        return bounded(raw)

    return parse
