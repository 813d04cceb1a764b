"""Tuning kernels: safe, verified measurement and an Optuna search per kernel and device.

    from tunesearch.search import Budget, tune_kernels
    report = tune_kernels(kernels, "cpu", Budget(trials=50), sampler="tpe", store=store)
    print(report.to_json())

measure.py measures candidates: compiled in parallel by a Builder (builder.py), run in an
isolated process by a Runner (runner.py), verified against the numpy reference, timed robustly;
messages.py holds what crosses between the processes. study.py searches one kernel; samplers.py
holds the samplers by name; tune.py tunes a list of kernels, shares the budget out and writes the
store; model_tuning.py tunes a model's kernels and keeps a winner only where it is faster inside
the model too (in_model.py times the model both ways).
supervise.py tunes with several worker processes into one database (planning.py plans their
leases, worker.py is one worker's loop; the leases and the Optuna studies' storage are
`tunesearch.db`'s).

The names below are imported on first use: the compiler and runner processes import this
package too, and they need none of Optuna, SQLAlchemy or rich.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "Builder": "builder", "ProcessPoolBuilder": "builder",
    "Runner": "runner", "ProcessRunner": "runner",
    "BuildResult": "messages", "DeviceSpec": "messages", "RunRequest": "messages",
    "RunResult": "messages", "RunSetup": "messages", "Timing": "messages",
    "DeviceMeasurer": "measure", "Measurer": "measure", "SimulatedMeasurer": "measure",
    "Progress": "progress", "RichProgress": "progress", "summary_table": "progress",
    "ERROR_KINDS": "results", "Budget": "results", "KernelResult": "results",
    "MeasureResult": "results", "SearchResult": "results", "Trial": "results",
    "TuneError": "results", "TuneReport": "results",
    "DEFAULT_SAMPLER": "samplers", "SAMPLERS": "samplers", "make_sampler": "samplers",
    "sampler_names": "samplers",
    "search_kernel": "study", "study_name": "study",
    "keep_defaults": "tune", "tune_kernels": "tune", "unique_kernels": "tune",
    "ModelTuning": "model_tuning", "tune_model": "model_tuning",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tunesearch.search' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tunesearch.search.{_EXPORTS[name]}"), name)
