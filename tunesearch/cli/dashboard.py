"""`tunesearch dashboard`: optuna-dashboard on the studies of a database, to watch a search live.

    serve_dashboard("postgresql://db.lan/tunesearch", host="127.0.0.1", port=8080)

The studies live beside the results (`tunesearch.db.studies`): one study per (kernel, device),
named `<kernel key>@<device key>`. The server binds to loopback by default; optuna-dashboard has
no authentication, so expose it only through something that has.
"""
from __future__ import annotations

import sys

from sqlalchemy.engine import make_url

from tunesearch.db import studies_url, study_storage
from tunesearch.errors import UsageError


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

    storage = study_storage(db_url)
    where = make_url(studies_url(db_url)).render_as_string(hide_password=True)
    print(f"tunesearch: optuna-dashboard on http://{host}:{port}/ for the studies in {where} "
          "(Ctrl-C stops it)", file=sys.stderr)
    optuna_dashboard.run_server(storage, host=host, port=port)
