"""`tunesearch report`: what a database holds, per device: each kernel's speed-up over its
default and its share of the time of the models that run it, and for each tuned model its
latency as tuning went on. `--plot` draws the same in a PNG (`report_plot`).

The database knows kernels, not models: a tuning run remembers which kernels its model runs
and how often (`work`), and every measured trial keeps the time it was measured. A model's
latency is then estimated as the sum of its kernels' times, each times its occurrences: with
every default, with the best config found up to each moment of the tuning, and with the stored
winners (re-timed finalists). Launch overhead and copies are not in it; `tunesearch run`
measures the whole call.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tunesearch.db.leases import model_kernels


@dataclass(frozen=True)
class ModelCurve:
    """A model's estimated latency on one device as its kernels were tuned. points are
    (seconds since the first trial of its kernels, latency with the best found by then), up to
    when its last winner was stored."""
    model: str
    device_key: str
    default_s: float
    tuned_s: float
    points: tuple[tuple[float, float], ...]
    kernels: int
    missing: int  # kernels with neither a result nor a measured trial: left out of the sums

    @property
    def speedup(self) -> float:
        return self.default_s / self.tuned_s if self.tuned_s > 0 else float("nan")


def model_curves(store, rows) -> list[ModelCurve]:
    """The curve of every registered model with at least one stored result on its device."""
    results = {(r.kernel_key, r.device_key): r.result for r in rows}
    models: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for work in model_kernels(store):
        models[work.model, work.device_key][work.kernel_key] = work.occurrences
    curves = []
    for (model, device_key), kernels in models.items():
        if not any((key, device_key) in results for key in kernels):
            continue
        curves.append(_curve(store, model, device_key, kernels, results))
    return curves


def _curve(store, model: str, device_key: str, kernels: dict[str, int],
           results: dict) -> ModelCurve:
    default: dict[str, float] = {}
    events = []  # (when, kernel key, time) of every correct measured trial
    for key in kernels:
        trials = [t for t in store.trials(key, device_key) if t.time_s and not t.error]
        result = results.get((key, device_key))
        if result is not None and result.default_time_s > 0:
            default[key] = result.default_time_s
        elif trials:  # trial 0 is the default config
            default[key] = min(trials, key=lambda t: t.number).time_s
        else:
            continue
        events += [(t.created, key, t.time_s) for t in trials if t.created is not None]
    occurrences = {key: kernels[key] for key in default}
    best = dict(default)
    latency = sum(occurrences[k] * best[k] for k in best)
    points = [(0.0, latency)]
    events.sort(key=lambda e: e[0])
    for when, key, seconds in events:
        if seconds < best[key]:
            latency += occurrences[key] * (seconds - best[key])
            best[key] = seconds
        points.append(((when - events[0][0]).total_seconds(), latency))
    # tuning ends when the last winner is stored (after its finalists were timed again)
    stored = [results[k, device_key].created for k in occurrences
              if (k, device_key) in results and results[k, device_key].created is not None]
    if events and stored and max(stored) > events[-1][0]:
        points.append(((max(stored) - events[0][0]).total_seconds(), latency))
    tuned = sum(n * (results[k, device_key].time_s if (k, device_key) in results else default[k])
                for k, n in occurrences.items())
    return ModelCurve(model, device_key, sum(n * default[k] for k, n in occurrences.items()),
                      tuned, tuple(points), len(kernels), len(kernels) - len(default))


def kernel_shares(store, rows) -> dict[tuple[str, str], float]:
    """Each result's share of its device's time: its default time times its occurrences in the
    device's registered models (once where no model runs it), over the sum of the device's."""
    occurrences: dict[tuple[str, str], int] = defaultdict(int)
    for work in model_kernels(store):
        occurrences[work.kernel_key, work.device_key] += work.occurrences
    weight = {(r.kernel_key, r.device_key): r.result.default_time_s
              * (occurrences.get((r.kernel_key, r.device_key)) or 1) for r in rows}
    totals: dict[str, float] = defaultdict(float)
    for (_, device_key), w in weight.items():
        totals[device_key] += w
    return {key: w / totals[key[1]] if totals[key[1]] else 0.0 for key, w in weight.items()}

from tunesearch.cli.arguments import check_new_file
from tunesearch.errors import UsageError


def check_plot(path: str) -> None:
    """Refuse a plot that cannot be drawn or written, before any work: matplotlib must be
    installed, the file's folder must exist and its suffix name a format matplotlib writes
    (without one matplotlib would add ".png" and write another file than the one named)."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise UsageError("--plot needs matplotlib, which is not installed: "
                         "pip install 'tunesearch[report]'") from None
    check_new_file(path, "--plot")
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise UsageError(f"--plot {path}: the name must end in a format matplotlib writes "
                         f"({', '.join('.' + f for f in ('png', 'pdf', 'svg'))}, ...)")


def report(store, plot: str | None = None, as_json: bool = False) -> int:
    """Print the report (a table, or JSON) and write the PNG to `plot`; returns the exit code
    (a plot that cannot be drawn or written is refused before any work)."""
    if plot is not None:
        check_plot(plot)
    rows = store.list_results()
    curves = model_curves(store, rows)
    shares = kernel_shares(store, rows)
    by_device: dict[str, list] = defaultdict(list)
    for row in rows:
        by_device[row.device_key].append(row)
    summary = {}
    for device_key, items in by_device.items():
        items.sort(key=lambda r: -shares[r.kernel_key, r.device_key])
        speedups = [r.result.speedup for r in items if r.result.speedup]
        summary[f"{items[0].device_name} ({device_key})"] = {
            "kernels": len(items),
            "geomean_speedup": math.exp(statistics.fmean(math.log(s) for s in speedups))
            if speedups else None,
            "results": [{"kernel": r.kernel_name, "key": r.kernel_key,
                         "share": shares[r.kernel_key, r.device_key],
                         "time_s": r.result.time_s, "default_s": r.result.default_time_s,
                         "speedup": r.result.speedup, "gflops": r.result.gflops,
                         "gbps": r.result.gbps, "trials": r.result.trials,
                         "sampler": r.result.sampler, "verified": r.result.verified}
                        for r in items],
            "models": [{"model": c.model, "kernels": c.kernels, "missing": c.missing,
                        "default_s": c.default_s, "tuned_s": c.tuned_s, "speedup": c.speedup,
                        "tuning_s": c.points[-1][0], "points": [list(p) for p in c.points]}
                       for c in curves if c.device_key == device_key]}
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary, store.where)
    if plot:
        from tunesearch.cli.report_plot import plot_report
        plot_report(store, rows, shares, curves, plot)
        print(f"wrote {plot}", file=sys.stderr if as_json else sys.stdout)
    return 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _print(summary: dict, where: str) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console()
    if not summary:
        console.print(f"no tuned kernels in {where}")
        return
    for device, data in summary.items():
        gm = data["geomean_speedup"]
        table = Table(title=f"{device}: {data['kernels']} kernels, geomean speed-up "
                      f"{gm:.2f}x" if gm else device)
        for col in ("kernel", "share", "default", "tuned", "speed-up", "GFLOPS", "GB/s",
                    "trials"):
            table.add_column(col, justify="left" if col == "kernel" else "right")
        for r in data["results"]:
            table.add_row(r["kernel"], f"{r['share'] * 100:.1f}%", _ms(r["default_s"]),
                          _ms(r["time_s"]), f"{r['speedup']:.2f}x", f"{r['gflops']:.2f}",
                          f"{r['gbps']:.2f}", str(r["trials"]))
        console.print(table)
        for m in data["models"]:
            left_out = f", {m['missing']} kernels never measured left out" if m["missing"] else ""
            console.print(f"model {m['model']}: {_ms(m['default_s'])} with defaults -> "
                          f"{_ms(m['tuned_s'])} tuned ({m['speedup']:.2f}x) over "
                          f"{m['tuning_s']:.0f} s of tuning, {m['kernels']} kernels"
                          f"{left_out} (sum of kernel times)")
