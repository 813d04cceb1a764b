"""`tunesearch dashboard`: optuna-dashboard on the studies of a database, to watch a search live.

    serve_dashboard("postgresql://db.lan/tunesearch", host="127.0.0.1", port=8080)

The studies live beside the results (`tunesearch.db.studies`): one study per (kernel, device),
named `<kernel key>@<device key>`. The server binds to loopback by default; optuna-dashboard has
no authentication, so expose it only through something that has.
"""
from __future__ import annotations

import socket
import sqlite3
import sys
from contextlib import closing
from urllib.parse import quote

from sqlalchemy.engine import make_url

from tunesearch.db import DatabaseError, Store, studies_url, study_storage
from tunesearch.db._engine import sqlite_file
from tunesearch.db._errors import detail_of
from tunesearch.errors import UsageError


def check_address(host: str, port: int) -> None:
    """Refuse, in one line, an address the server could not listen on: a name that does not
    resolve, an address of another machine, a port taken or not allowed. The server (bottle's
    wsgiref) listens on IPv6 for a host with a colon, IPv4 otherwise; the socket is bound and
    closed again, as the server will bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        address = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4]
    except (socket.gaierror, UnicodeError) as err:
        raise UsageError(f"dashboard --host {host!r} does not resolve to an IPv"
                         f"{6 if family == socket.AF_INET6 else 4} address ({err})") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind(address)
        except OSError as err:
            raise UsageError(f"dashboard cannot listen on {host}:{port} ({err.strerror or err}"
                             "; --host takes an address of this machine, --port a free port)"
                             ) from None


def check_studies(db_url: str | None) -> None:
    """Refuse a database the dashboard has nothing to show for, before anything is created:
    the results database must open (read-only: missing, empty, corrupt and damaged ones are
    refused), and a SQLite database's studies file must exist, made by a `tune`."""
    with Store(db_url, readonly=True):
        pass
    path = sqlite_file(make_url(studies_url(db_url)))
    if path is None:
        return
    if not path.is_file() or path.stat().st_size == 0:
        raise DatabaseError(f"no studies to show: {path} does not exist or is empty "
                            "(`tunesearch tune` with this database writes it)")
    # opened without creating or writing anything: Optuna would add its tables to any file
    uri = "file:" + quote(str(path.absolute())) + "?mode=rw"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as connection:
            connection.execute("PRAGMA query_only = ON")
            tables = {row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as err:
        raise DatabaseError(f"{path} is not a valid studies database ({err})") from None
    if "studies" not in tables:
        raise DatabaseError(f"{path} is not a studies database: it has no Optuna tables")


def serve_dashboard(db_url: str | None = None, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve optuna-dashboard for the studies of `db_url` (None: the default database) until
    interrupted (Ctrl-C).

    Without optuna-dashboard installed it raises a UsageError with the install hint.
    """
    try:
        import optuna_dashboard
    except ImportError:
        raise UsageError("optuna-dashboard is not installed: "
                         "pip install 'tunesearch[dashboard]'") from None

    check_address(host, port)
    check_studies(db_url)
    try:
        storage = study_storage(db_url)
    except DatabaseError:
        raise
    except Exception as err:  # noqa: BLE001  (Optuna's own error for a file it cannot read)
        raise DatabaseError(f"cannot open the studies of {db_url or 'the default database'}: "
                            f"{detail_of(err)}") from None
    where = make_url(studies_url(db_url)).render_as_string(hide_password=True)
    print(f"tunesearch: optuna-dashboard on http://{host}:{port}/ for the studies in {where} "
          "(Ctrl-C stops it)", file=sys.stderr)
    optuna_dashboard.run_server(storage, host=host, port=port)
