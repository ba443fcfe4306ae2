"""How each setting's variable is read: a `Parser` per kind of value (`seconds(0.05, 4.5)`).

A parser returns the value or raises ValueError saying what would be accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "mysql+aiomysql", "mariadb+aiomysql")


@dataclass(frozen=True)
class Parser:
    """Reads one variable's text; `accepts` says in words what it takes (the table's column)."""

    read: Callable[[str], Any]
    accepts: str

    def __call__(self, raw: str) -> Any:
        return self.read(raw)


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


# A number outside its range (`inf` and `nan` too) is refused, never clamped.


def seconds(min_: float, max_: float) -> Parser:
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

    return Parser(parse, f"{min_:g} to {max_:g} seconds")


def whole(min_: int, max_: int) -> Parser:
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

    return Parser(parse, f"{min_} to {max_}")


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
    try:
        return "on" if _boolean(raw) else "off"
    except ValueError:
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


def _hosts(raw: str) -> tuple[str, ...]:
    """Host names, comma-separated, without a port: `api.example.com`, `*.example.com`, `10.0.0.5`, `::1`."""
    found = []
    for part in raw.split(","):
        host = part.strip().lower()
        if not host:
            continue
        name = host.removeprefix("*.")
        if "*" in name or not name or any(c in name for c in "/@ []") or name.count(":") == 1:
            raise ValueError(
                f"{part.strip()!r} is not a host name: expected names without scheme or port, "
                "such as api.example.com, or *.example.com for its subdomains"
            )
        found.append(host)
    return tuple(found)


def _origins(raw: str) -> tuple[str, ...]:
    """Exact origins, comma-separated: scheme://host[:port], no path, no wildcard."""
    found = []
    for part in raw.split(","):
        origin = part.strip()
        if not origin:
            continue
        if "*" in origin:
            # A wildcard would let any page on the web read the log with a token it holds.
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


def duration(min_: str, max_: str) -> Parser:
    low, high = parse_duration(min_), parse_duration(max_)

    def parse(raw: str) -> float:
        value = parse_duration(raw)
        if not low <= value <= high:
            raise ValueError(f"{raw!r} is outside what is accepted: from {min_} to {max_}")
        return value

    return Parser(parse, f"a duration from {min_} to {max_} (a number and s, m, h or d)")


def optional_duration(min_: str, max_: str) -> Parser:
    bounded = duration(min_, max_)

    def parse(raw: str) -> float | None:
        if raw.lower() in ("off", "none", "0"):
            return None
        value: float = bounded(raw)
        return value

    return Parser(parse, f"`off`, or {bounded.accepts}")


def _public_url(raw: str) -> str:
    scheme, sep, rest = raw.partition("://")
    if scheme not in ("http", "https") or not sep or not rest.strip("/") or any(c in raw for c in " ?#"):
        raise ValueError(
            f"{raw!r} is not a base URL: expected http:// or https://, a host and an optional path, "
            "such as https://runlog.example.com"
        )
    return raw.rstrip("/")


def _seconds_by_reason(raw: str) -> tuple[tuple[str, float], ...]:
    """`STEP_PARKED=300,STEP_RETRYING=1800`: seconds by hold reason (checked by gql/edge/hold_metrics.py)."""
    found = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip().upper()
        if not sep or not name.replace("_", "").isalpha():
            raise ValueError(
                f"{part.strip()!r} is not REASON=SECONDS: expected hold reasons and seconds, "
                "such as STEP_PARKED=300,STEP_RETRYING=1800"
            )
        try:
            found[name] = seconds(1, 30 * 86400)(value.strip())
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return tuple(sorted(found.items()))


def _token(raw: str) -> str:
    if len(raw) < 16:
        raise ValueError("is too short to be a secret: use at least 16 characters")
    if not all("!" <= c <= "~" for c in raw):
        # It travels in an HTTP header: any other character could never match.
        raise ValueError("must be printable ASCII with no spaces")
    return raw


DATABASE_URL = Parser(
    _database_url,
    "a SQLAlchemy URL: `sqlite+aiosqlite`, `mysql+aiomysql` or `mariadb+aiomysql`",
)
PATH = Parser(str, "a file's path")
TOKEN = Parser(_token, "16 or more printable ASCII characters, no spaces")
BOOLEAN = Parser(_boolean, "`true` or `false` (also 1/0, yes/no, on/off)")
LOG_LEVEL = Parser(_log_level, "`DEBUG`, `INFO`, `WARNING` or `ERROR`")
LOG_FORMAT = Parser(_log_format, "`text` or `json`")
METRICS = Parser(_metrics, "`on`, `off`, or a port from 1 to 65535")
FORWARDED = Parser(_forwarded, "addresses or networks, comma-separated, or `*`")
ORIGINS = Parser(_origins, "`scheme://host[:port]`, comma-separated, no wildcard")
PUBLIC_URL = Parser(_public_url, "an `http://` or `https://` base URL")
SECONDS_BY_REASON = Parser(
    _seconds_by_reason, "`REASON=SECONDS`, comma-separated (1 to 2592000 seconds), a hold reason each"
)
HOSTS = Parser(_hosts, "host names without port, comma-separated; `*.` before one takes its subdomains")
