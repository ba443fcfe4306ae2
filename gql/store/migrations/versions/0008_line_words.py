"""event_run_log_words: the folded words of each line's detail, for runLog's search

Ours (the contract fixes event_run_log's columns): one row per line, keyed by
(run_id, line_at, id) as a page is ordered (`line_at`: the line's `at`), holding
the words of its detail as a reader finds them, case-folded (gql/store/words.py).
Rows are written with each line, in its transaction, by the service; lines
written before this revision, or by hand, get theirs from `python -m gql
fold-words`, the upgrade step after it. Binary collation: the text is folded
already, and no collation may make two characters one.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from gql.store.migrations import steps

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if steps.has_table("event_run_log_words"):
        return
    op.create_table(
        "event_run_log_words",
        sa.Column("run_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column(
            "line_at", sa.String(32).with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb"), primary_key=True
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column(
            "words",
            sa.Text().with_variant(mysql.MEDIUMTEXT(collation="utf8mb4_bin"), "mysql", "mariadb"),
            nullable=False,
        ),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    # A new, empty table: no online build needed.
    op.create_index("ix_event_run_log_words_run_id", "event_run_log_words", ["run_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("migrations go forward only")
