"""For the `alembic` command line (a developer's `alembic revision`, `alembic history`).

The service never runs this file: init-db applies the revisions through
gql.migrations.upgrade, which adopts a database an earlier release made and
takes the lock. Use `python -m gql init-db` (or `--sql`) to apply them.
"""

raise SystemExit(
    "apply migrations with `python -m gql init-db` (or print their SQL with `python -m gql init-db --sql`)"
)
