"""What a log line looks like: text (the default), or one JSON object per line (RUNLOG_LOG_FORMAT=json).

`logging_config(format, level)` is the dictConfig. Everything past printable ASCII is escaped,
so that no input can forge a line.
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
            # A short message when the fields follow (a refused write).
            "message": getattr(record, "json_message", None) or record.getMessage(),
        }
        entry.update((k, v) for k, v in context().items() if k not in _HIDDEN)
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
            # A refused write's line, as an object; cut to its prefix, it stays text.
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
    """The `logging.config.dictConfig` of a server process and its workers: ours and uvicorn's loggers."""
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
            # Its DEBUG records hold statements' parameters: the contents of writes are never logged.
            "aiosqlite": {"level": max(logging.INFO, logging.getLevelName(level))},
            # Its one warning, a refused origin, names Strawberry's `allowed_origins`; gql.edge.app's names
            # RUNLOG_CORS_ORIGINS. Its child logs a subscription's failure.
            "strawberry.ws": {"level": "ERROR"},
            "strawberry.ws.task": {"level": level},
            # init-db and the app say what Alembic applied.
            "alembic": {"level": max(logging.WARNING, logging.getLevelName(level))},
        },
        "root": {"handlers": ["default"], "level": level},
    }
