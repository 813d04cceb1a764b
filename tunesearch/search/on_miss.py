"""The lookup's miss policy: TUNESEARCH_TUNE=N tunes, on first use, a kernel the database has no
record of. Importing this costs nothing: Optuna and SQLAlchemy load on the first miss."""
from __future__ import annotations

from tunesearch import settings


def tune_on_miss(kernel, device, trials: int) -> None:
    """Tune `kernel` with `trials` trials and store the winner in TUNESEARCH_DB (else the default
    file), where the lookup finds it."""
    from tunesearch.db import Store
    from tunesearch.search.results import Budget
    from tunesearch.search.tune import tune_kernels
    tune_kernels([kernel], device, Budget(trials=trials), store=Store(settings.db_url()),
                 progress=settings.debug() >= 1)
