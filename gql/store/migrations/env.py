"""Alembic's environment for these revisions, run by `alembic.command` from gql/store/migrations/runner.py.

The runner hands it `connection` (applied) or `url` and `out` (offline) in `Config.attributes`,
as Alembic's cookbook shares a connection. Use `python -m gql init-db`, not the `alembic` command.
"""

from alembic import context

attributes = context.config.attributes
if "connection" in attributes:
    context.configure(
        connection=attributes["connection"],
        transaction_per_migration=True,
        on_version_apply=attributes.get("on_version_apply"),
    )
elif "url" in attributes:
    context.configure(
        url=attributes["url"],
        output_buffer=attributes["out"],
        literal_binds=True,
        transaction_per_migration=True,
    )
else:
    raise SystemExit(
        "apply migrations with `python -m gql init-db` "
        "(or print their SQL with `python -m gql init-db --sql`)"
    )

with context.begin_transaction():
    context.run_migrations()
