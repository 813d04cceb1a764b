"""The alembic environment of tunesearch's result database.

tunesearch runs migrations itself (`tunesearch.db._migrations`), handing over a connection that
is already inside a locked write transaction, so the whole upgrade commits or rolls back as one.
Run by hand (`alembic -x url=sqlite:///x.db upgrade head` with `script_location` pointing here),
it opens its own connection.
"""
from alembic import context
from sqlalchemy import create_engine

from tunesearch.db._models import Base

config = context.config


def run_migrations(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=True)  # SQLite can only ALTER through table copies
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url")
    engine = create_engine(url)
    try:
        with engine.connect() as own_connection:
            run_migrations(own_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("tunesearch migrations run online only")
run_migrations_online()
