"""Tuning a whole model: its kernels searched, then the model timed with the defaults and with
the winners, and every winner that runs slower inside the model than its default did there
given back its default (search/in_model.py). The command line's `tune` is this call and a table.

    >>> from tunesearch.onnx import load
    >>> from tunesearch.search import Budget, tune_model
    >>> model = load("model.onnx")
    >>> tuned = tune_model(model, "cpu", Budget(total_seconds=120), store=Store())
    >>> tuned.comparison.speedup, tuned.kept_default
"""
from __future__ import annotations

from dataclasses import dataclass

from tunesearch.runtime.device import get_device
from tunesearch.search import in_model
from tunesearch.search.results import Budget, TuneReport
from tunesearch.search.samplers import DEFAULT_SAMPLER
from tunesearch.search.cluster import run_cluster
from tunesearch.search.supervise import open_leases, run_workers
from tunesearch.search.tune import keep_defaults, tune_kernels


@dataclass(frozen=True)
class ModelTuning:
    report: TuneReport                    # every kernel's search (tune_kernels's report)
    comparison: in_model.Comparison      # the model with the defaults and with the winners
    kept_default: tuple[str, ...]         # keys of kernels whose winner lost inside the model
    default_times: dict                   # kernel key -> seconds per call with its default


def tune_model(model, device: str, budget: Budget = Budget(), *, store, inputs=None,
               sampler: str = DEFAULT_SAMPLER, seed: int = 0, retune: bool = False,
               workers: int = 1, cluster: str | None = None, progress: bool = True, repeat: int = 10, storage=None,
               name: str | None = None, processes: int = in_model.PROCESSES) -> ModelTuning:
    """Tune every kernel of `model` (an OnnxModel, or anything with `schedule`, `profile`,
    `constant_inputs`, `reset_plans`, `use_lookup` and `random_inputs`) on `device` into
    `store`, and keep each winner only where it is faster inside the model too. The model is
    timed in `processes` fresh processes where it can be rebuilt in one (`model.recipe`, which
    a model loaded from a file has), else in this one. With workers > 1 several processes tune
    into store's database together (search/supervise.py); with cluster (a Ray address) the
    searches run on a Ray cluster (search/cluster.py). The model runs the stored configs
    afterwards."""
    inputs = model.random_inputs(seed=0) if inputs is None else inputs
    before = in_model.profile_with(model, inputs, repeat, store.url, use_db=False)
    kernels = [item.kernel for item in model.schedule(inputs)]
    constants = model.constant_inputs(inputs)  # weights: timed packed ahead, as runs read them
    default_times = {k.key: t for k, t in before.kernels}
    if cluster:
        report = run_cluster(kernels, device, budget, store, cluster, sampler=sampler, seed=seed,
                             model=name, retune=retune, weights=default_times,
                             progress=progress, constants=constants)
    elif workers > 1 or open_leases(store, device, kernels):  # one worker joins open leases
        report = run_workers(kernels, device, budget, sampler=sampler, seed=seed,
                             db_url=store.url, n_workers=workers, model=name, retune=retune,
                             weights=default_times, progress=progress, constants=constants)
    else:
        report = tune_kernels(kernels, device, budget, sampler=sampler, seed=seed, store=store,
                              progress=progress, retune=retune, storage=storage, model=name,
                              constants=constants)
    recipe = getattr(model, "recipe", None)

    def compare() -> in_model.Comparison:
        if recipe is not None and processes > 0:
            return in_model.measure_in_processes(recipe, repeat, store.url, processes)
        return in_model.measure(model, inputs, repeat, store.url)
    compared = compare()
    kept = keep_defaults(store, get_device(device), {k.key: k for k in kernels},
                         in_model.losers(compared, report.results), constants)
    if kept:  # the model again, with the defaults kept where the winners lost
        compared = compare()
    in_model.use_configs(model, store.url, use_db=True)
    return ModelTuning(report, compared, tuple(kept), default_times)
