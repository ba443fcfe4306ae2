"""For the `alembic` command line (`alembic revision`, `history`); apply with `python -m gql init-db`."""

raise SystemExit(
    "apply migrations with `python -m gql init-db` (or print their SQL with `python -m gql init-db --sql`)"
)
