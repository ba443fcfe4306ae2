"""What a log line looks like: text for a person at a terminal, or one JSON object per line.

`RUNLOG_LOG_FORMAT=json` writes every record, the service's and uvicorn's
(its access and error logs), as one JSON object on one line: `time`,
`level`, `logger`, `message`, and, while a request is served, `request_id`,
`trace_id` (from the caller's `traceparent`), `operation` and `run_id` (as
far as they are known), taken from the request's log context
(`request_id.context()`). uvicorn's access line adds `client`, `method`,
`path`, `status` and `duration_ms` (from the request's arrival to its
response's start). A record logged with `extra={"fields": {...}}` adds those
fields (a refused write's `reason` and `line`, as JSON, not as a string
inside a string).

`text` (the default) is what the service always wrote, with the request id
added to a line about a request that does not already say it.

Every character that is not printable ASCII is escaped in a JSON line, so
nothing a caller sends (a newline, U+2028, NEL in a detail) can start a
forged line, and a lone surrogate can still be written.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from typing import Any

import orjson

from .request_id import context

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ACCESS_TEXT_FORMAT = (
    '%(asctime)s %(levelname)s %(name)s: %(client_addr)s - "%(request_line)s" %(status_code)s'
)
# Context keys that are the service's own bookkeeping, not for the log.
_HIDDEN = frozenset({"arrived", "errors"})


def _context_fields() -> dict[str, Any]:
    return {k: v for k, v in context().items() if k not in _HIDDEN}


class TextFormatter(logging.Formatter):
    """The plain format, with ` (request <id>)` on a line about a request that does not name its id."""

    def __init__(self, fmt: str = TEXT_FORMAT, **kwargs: Any) -> None:
        super().__init__(fmt, **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        rid = context().get("request_id")
        if rid is not None and rid not in text:
            text = f"{text} (request {rid})"
        return text


class AccessTextFormatter(TextFormatter):
    """uvicorn's access line (client, request line, status) in the plain format."""

    def __init__(self, fmt: str = ACCESS_TEXT_FORMAT, **kwargs: Any) -> None:
        super().__init__(fmt, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            record.__dict__.update(
                client_addr=client, request_line=f"{method} {path} HTTP/{version}", status_code=status
            )
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            # A record may say in a few words here what its text form says
            # with its fields inline (a refused write: the fields follow).
            "message": getattr(record, "json_message", None) or record.getMessage(),
        }
        entry.update(_context_fields())
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            entry.update(client=client, method=method, path=path, http_version=version, status=status)
            arrived = context().get("arrived")
            if arrived is not None:
                entry["duration_ms"] = round((time.perf_counter() - arrived) * 1000, 3)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        line = getattr(record, "line_json", None)
        if line is not None:
            # A refused write's line, logged bounded as JSON text: read back
            # here, so it is an object of the JSON line; a line cut to its
            # prefix (too long to log whole) stays text.
            try:
                entry["line"] = json.loads(line)
            except ValueError:
                entry["line_cut"] = line
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return dumps(entry)


def dumps(entry: dict[str, Any]) -> str:
    """`entry` as one line of JSON, every character past printable ASCII escaped."""
    try:
        text = orjson.dumps(entry, default=str).decode()
        if text.isascii() and text.isprintable():
            return text
    except TypeError:  # a lone surrogate, an integer past 64 bits
        pass
    return json.dumps(entry, ensure_ascii=True, default=str, separators=(",", ":")).replace("\x7f", "\\u007f")


def logging_config(log_format: str, level: str) -> dict[str, Any]:
    """The `logging.config.dictConfig` of a server process: the service's loggers and uvicorn's.

    uvicorn applies it in each worker process too (it is part of the Config
    each worker receives), so every process logs alike.
    """
    json_format = log_format == "json"
    plain = {"()": "gql.logs.JsonFormatter"} if json_format else {"()": "gql.logs.TextFormatter"}
    access = {"()": "gql.logs.JsonFormatter"} if json_format else {"()": "gql.logs.AccessTextFormatter"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": plain, "access": access},
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "access", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
            # aiosqlite's DEBUG records hold each statement's parameters, a
            # stored line's detail among them; the contents of writes are
            # never logged.
            "aiosqlite": {"level": max(logging.INFO, logging.getLevelName(level))},
            # Alembic's INFO records say how it set itself up; init-db prints
            # what it applied, and the app logs it (app.lifespan).
            "alembic": {"level": max(logging.WARNING, logging.getLevelName(level))},
        },
        "root": {"handlers": ["default"], "level": level},
    }
