"""The one error the database layer raises, and the translation of driver errors into it.

Every failure a user can cause (a corrupt file, an unreachable server, a read-only database, a
bad import file) becomes a `DatabaseError` whose message is one line naming the file or URL, so
that the command line can print it as it is and exit.
"""
from __future__ import annotations

from sqlalchemy import exc as sa_exc

from tunesearch.errors import UserError


class DatabaseError(UserError):
    """A database problem the user can act on; `str(err)` is one line naming the file or URL."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


# SQLite says "locked" or "busy" when another process holds the write lock past the busy timeout;
# PostgreSQL reports serialization failures and deadlocks by SQLSTATE. Both are worth a retry.
_RETRY_WORDS = ("database is locked", "database table is locked", "database is busy")
_RETRY_SQLSTATES = {"40001", "40P01"}

# (words in the driver message, message template); the first match wins.
_READ_ONLY_WORDS = (
    "readonly database",
    "read-only transaction",
    "read-only file system",
    "permission denied",
)
_TRANSLATIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("file is not a database", "malformed", "not a database"),
     "{where} is not a valid SQLite database ({detail})"),
    (("unable to open database file",), "cannot open database {where} ({detail})"),
    (("connection failed", "connection refused", "could not connect", "connection to server",
      "could not translate host name", "timeout expired", "password authentication failed"),
     "cannot connect to database {where}: {detail}"),
)


def detail_of(err: BaseException) -> str:
    """The first line of the driver's own message (without SQLAlchemy's statement dump)."""
    orig = getattr(err, "orig", None) or err
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    text = lines[0] if lines else type(orig).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def is_retryable(err: BaseException) -> bool:
    """True for transient lock contention that a new attempt of the transaction can get past."""
    if not isinstance(err, sa_exc.DBAPIError):
        return False
    orig = err.orig
    if getattr(orig, "sqlstate", None) in _RETRY_SQLSTATES:
        return True
    message = str(orig).lower()
    return any(word in message for word in _RETRY_WORDS)


# A server that answers "no" (a wrong password, an unknown user or database) says the same
# a minute later: waiting for it is not worth a retry.
_REFUSED_SQLSTATES = {"28000", "28P01", "3D000"}
_REFUSED_WORDS = ("password authentication failed", "no password supplied",
                  "authentication failed", "role \"", "does not exist")


def _chain(err: BaseException | None):
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def is_refused(err: BaseException) -> bool:
    """True when the server answered and refused us: wrong credentials, no such database."""
    for link in _chain(err):
        orig = getattr(link, "orig", None) or link
        if getattr(orig, "sqlstate", None) in _REFUSED_SQLSTATES:
            return True
        message = str(orig).lower()
        if "fatal" in message and any(word in message for word in _REFUSED_WORDS):
            return True
    return False


def is_transient(err: BaseException) -> bool:
    """True when `err`, or an error that caused it, is the database failing to answer: a
    connection refused or lost (a server restarting), or a lock held past the busy timeout.
    Worth a wait; broader than `is_retryable`, which is lock contention inside one transaction.
    A server that refuses the credentials is not transient (`is_refused`).
    """
    if is_refused(err):
        return False
    for link in _chain(err):
        if isinstance(link, (sa_exc.OperationalError, sa_exc.InterfaceError,
                             sa_exc.DisconnectionError)):
            return True
        if type(link).__name__ == "OperationalError":  # a driver's own (psycopg, sqlite3)
            return True
    return False


def is_read_only(err: BaseException) -> bool:
    """True when the driver refused a write because the database cannot be written."""
    message = str(getattr(err, "orig", None) or err).lower()
    return any(word in message for word in _READ_ONLY_WORDS)


def read_only_error(where: str) -> DatabaseError:
    """The error for a write to a database that cannot be written."""
    return DatabaseError(f"cannot save: database {where} is read-only")


def translate(err: BaseException, where: str, *, writing: bool = False) -> DatabaseError:
    """Turn a SQLAlchemy / driver error into a one-line `DatabaseError` about `where`."""
    if isinstance(err, DatabaseError):
        return err
    if writing and is_read_only(err):
        return read_only_error(where)
    detail = detail_of(err)
    lowered = str(getattr(err, "orig", None) or err).lower()
    for words, template in _TRANSLATIONS:
        if any(word in lowered for word in words):
            return DatabaseError(template.format(where=where, detail=detail))
    return DatabaseError(f"database {where}: {detail}")
