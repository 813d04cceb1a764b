"""Schema revisions: where a database stands against this code, and bringing it to head.

The migration scripts ship inside the package (`tunesearch/db/alembic/`) and alembic is driven
programmatically, so an installed tunesearch upgrades a database without any `alembic.ini`.
"""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

from tunesearch.db._errors import DatabaseError
from tunesearch.db._models import Base

ALEMBIC_DIR = Path(__file__).resolve().with_name("alembic")


def alembic_config(connection: Connection | None = None) -> Config:
    """An alembic `Config` for the shipped scripts; migrations run on `connection` if given."""
    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_DIR).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision this code knows, e.g. `v2_trials_history`."""
    return _scripts().get_current_head()


@functools.cache
def known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _scripts().walk_revisions())


class SchemaState(enum.Enum):
    NEW = "new"          # no tables yet: created at head
    CURRENT = "current"  # at head
    OLD = "old"          # an older revision: upgraded when opened
    NEWER = "newer"      # a revision this code does not know: written by a newer tunesearch
    FOREIGN = "foreign"  # tables, but not ours
    DAMAGED = "damaged"  # at head, but a table or column of head is missing


@dataclass(frozen=True)
class Schema:
    revision: str | None
    state: SchemaState
    missing: str = ""  # what a damaged schema lacks, e.g. "table 'trials'"


def missing_at_head(connection: Connection) -> str:
    """The first table or column of this code's schema that the database lacks ("" when none):
    a database at head whose table was dropped would otherwise fail halfway through a command,
    after it had written."""
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name not in tables:
            return f"table {table.name!r}"
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in columns:
                return f"column {table.name}.{column.name}"
    return ""


def inspect_schema(connection: Connection) -> Schema:
    """Read the database's alembic revision and classify it against this code."""
    revision = MigrationContext.configure(connection).get_current_revision()
    if revision is None:
        has_tables = bool(inspect(connection).get_table_names())
        return Schema(None, SchemaState.FOREIGN if has_tables else SchemaState.NEW)
    if revision == head_revision():
        missing = missing_at_head(connection)
        if missing:
            return Schema(revision, SchemaState.DAMAGED, missing)
        return Schema(revision, SchemaState.CURRENT)
    if revision in known_revisions():
        return Schema(revision, SchemaState.OLD)
    return Schema(revision, SchemaState.NEWER)


def refusal(schema: Schema, where: str) -> DatabaseError | None:
    """The error for a database this code must not write, or None."""
    if schema.state is SchemaState.FOREIGN:
        return DatabaseError(f"{where} is not a tunesearch database: it has tables but no "
                             "alembic_version")
    if schema.state is SchemaState.DAMAGED:
        return DatabaseError(f"database {where} is damaged: its schema is at {schema.revision} "
                             f"but {schema.missing} is missing; restore it from a backup or "
                             "use another database")
    if schema.state is SchemaState.NEWER:
        return DatabaseError(f"cannot save: database {where} is at revision {schema.revision!r}, "
                             f"newer than this tunesearch knows ({head_revision()}); "
                             "upgrade tunesearch")
    return None


def upgrade_in_transaction(connection: Connection, where: str) -> str | None:
    """Bring the schema to head inside the caller's locked write transaction.

    Returns the revision found before (None for a new database). Raises `DatabaseError` for a
    foreign database or one newer than this code.
    """
    schema = inspect_schema(connection)
    error = refusal(schema, where)
    if error is not None:
        raise error
    if schema.state is not SchemaState.CURRENT:
        command.upgrade(alembic_config(connection), "head")
    return schema.revision
