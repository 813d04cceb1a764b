"""The lookup of tuned configs that the front ends use when they are given none.

    >>> y.numpy()                                   # runs with default_lookup()
    >>> from tunesearch.runtime.lookup import TunedConfigs
    >>> y.numpy(lookup=TunedConfigs("sqlite:///other.db"))

`default_lookup()` is made on its first call, never when a module is imported. Tensor programs
and ONNX models that are not given a lookup share it, and with it one cache of choices per
process.
"""
from __future__ import annotations

from typing import Optional

from tunesearch.runtime.lookup import TunedConfigs
from tunesearch.search.on_miss import tune_on_miss

_default: Optional[TunedConfigs] = None


def default_lookup() -> TunedConfigs:
    """The process's lookup: the database of TUNESEARCH_DB, else the default SQLite file, opened
    on the first lookup (a database error there means default configs, with one warning), with
    `search.on_miss.tune_on_miss` as its miss policy."""
    global _default
    if _default is None:
        _default = TunedConfigs(on_miss=tune_on_miss)
    return _default
