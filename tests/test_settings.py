"""Settings: defaults, and a bad value that names its key and what would be accepted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from gql.setting_parsers import parse_duration
from gql.settings import DEFAULT_DATABASE_URL, Settings, SettingsError, env_key, markdown_table, spec


def test_defaults_serve_the_embedded_database_with_no_admin() -> None:
    settings = Settings.from_env({})
    assert settings.database_url == DEFAULT_DATABASE_URL
    assert settings.is_embedded
    assert settings.admin_tokens == ()
    assert settings.max_detail_bytes == 64 * 1024
    assert settings.retention is None


def test_values_are_read_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "RUNLOG_DATABASE_URL": "mysql+aiomysql://u:secret@db:3306/events",
            "RUNLOG_ADMIN_TOKEN": "a" * 20,
            "RUNLOG_ADMIN_TOKEN_NEXT": "b" * 20,
            "RUNLOG_WRITE_TIMEOUT": "1.5",
            "RUNLOG_GRAPHIQL": "off",
            "RUNLOG_RETENTION": "30d",
        }
    )
    assert not settings.is_embedded
    assert settings.admin_tokens == ("a" * 20, "b" * 20)
    assert settings.write_timeout == 1.5
    assert settings.graphiql is False
    assert settings.retention == 30 * 86400
    assert "secret" not in settings.safe_database_url


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("RUNLOG_DATABASE_URL", "not a url", "expected a SQLAlchemy URL"),
        ("RUNLOG_DATABASE_URL", "postgresql://localhost/x", "driver 'postgresql' is not supported"),
        ("RUNLOG_DATABASE_URL", "mysql+aiomysql://root@localhost", "names no database"),
        ("RUNLOG_WRITE_TIMEOUT", "-1", "expected a positive number of seconds"),
        ("RUNLOG_WRITE_TIMEOUT", "soon", "expected a number of seconds"),
        ("RUNLOG_WRITE_TIMEOUT", "30", "at most 4.5 seconds"),
        ("RUNLOG_CONNECT_TIMEOUT", "0", "expected a positive number of seconds"),
        ("RUNLOG_MAX_DETAIL_BYTES", "lots", "expected a whole number"),
        ("RUNLOG_GRAPHIQL", "maybe", "expected true or false"),
        ("RUNLOG_LOG_LEVEL", "loud", "expected one of DEBUG, INFO, WARNING, ERROR"),
        ("RUNLOG_RETENTION", "30", "has no unit"),
        ("RUNLOG_ADMIN_TOKEN", "short", "too short to be a secret"),
        # A bound that is no bound, or one too tight to let anything through.
        ("RUNLOG_READ_TIMEOUT", "inf", "expected at least 0.05 and at most 300 seconds"),
        ("RUNLOG_READ_TIMEOUT", "1e309", "expected at least 0.05 and at most 300 seconds"),
        ("RUNLOG_READ_TIMEOUT", "nan", "expected at least 0.05 and at most 300 seconds"),
        ("RUNLOG_READ_TIMEOUT", "1e-9", "expected at least 0.05 and at most 300 seconds"),
        ("RUNLOG_WRITE_TIMEOUT", "nan", "expected at least 0.05 and at most 4.5 seconds"),
        ("RUNLOG_PRUNE_TIMEOUT", "inf", "at most 3600 seconds"),
        ("RUNLOG_CONNECT_TIMEOUT", "1e309", "at most 60 seconds"),
        ("RUNLOG_POOL_RECYCLE", "inf", "at most 604800 seconds"),
        ("RUNLOG_POOL_SIZE", "1000000", "expected a whole number from 1 to 1000"),
        ("RUNLOG_MAX_BODY_BYTES", "9" * 30, "expected a whole number from 1 to 1073741824"),
        ("RUNLOG_MAX_TOKENS", "0", "expected a whole number of at least 1"),
        ("RUNLOG_SWEEP_INTERVAL", "1e-9s", "from 1s to 7d"),
        ("RUNLOG_SWEEP_INTERVAL", "infs", "not a finite duration"),
        ("RUNLOG_SWEEP_INTERVAL", "nans", "not a positive duration"),
        ("RUNLOG_RETENTION", "1e300d", "from 1m to 36500d"),
        ("RUNLOG_RETENTION", "1e-9s", "from 1m to 36500d"),
    ],
)
def test_a_bad_value_names_the_key_and_what_is_accepted(key: str, value: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({key: value})
    assert key in str(caught.value)
    assert says in str(caught.value)


def test_a_bad_value_stops_start_up_with_the_message() -> None:
    env = {**os.environ, "RUNLOG_DATABASE_URL": "postgresql://localhost/x"}
    done = subprocess.run(
        [sys.executable, "-m", "gql", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "RUNLOG_DATABASE_URL" in done.stderr
    assert "is not supported" in done.stderr


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("12h", 43200), ("2d", 172800)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_the_configuration_table_in_the_docs_is_the_one_the_settings_declare() -> None:
    """docs/operating.md's table is `python -m gql.settings`'s output: a setting is declared once."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "operating.md").read_text(encoding="utf-8")
    table = markdown_table()
    assert table in page, "regenerate the table: .venv/bin/python -m gql.settings"
    source = (root / "gql" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r'"(RUNLOG_[A-Z0-9_]+)"', source)) | {env_key(item) for item in fields(Settings)}
    assert len(read) > 20
    assert sorted(key for key in read if f"`{key}`" not in table) == []


def test_every_default_is_a_value_its_own_parser_accepts() -> None:
    """A default written as the table shows it reads back as the default: the two cannot drift."""
    for item in fields(Settings):
        found = spec(item)
        if found.pair or item.default in (None, ()):
            continue
        shown = found.shown.split("`")[1] if "`" in found.shown else str(item.default)
        if isinstance(item.default, bool):
            shown = shown.lower()
        assert found.parse(shown) == item.default, item.name
