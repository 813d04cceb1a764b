"""`tunesearch report`: what a database holds, per device: each kernel's speed-up over its
default, and a PNG with the search convergence and the speed-up per kernel."""
from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict

from tunesearch.arguments import check_new_file
from tunesearch.errors import UsageError


def check_plot(path: str) -> None:
    """Refuse a plot that cannot be drawn or written, before any work: matplotlib must be
    installed and the file's folder must exist."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib, which is not installed: "
                         "pip install 'tunesearch[report]'") from None
    check_new_file(path, "--plot")


def report(store, plot: str | None = None, as_json: bool = False) -> int:
    """Print each device's speed-ups (a table, or JSON) and draw `plot` if given; returns 0."""
    if plot:
        check_plot(plot)
    rows = store.list_results()
    by_device: dict[str, list] = defaultdict(list)
    for row in rows:
        by_device[f"{row.device_name} ({row.device_key})"].append(row)
    summary = {}
    for device, items in by_device.items():
        speedups = [r.result.speedup for r in items if r.result.speedup]
        summary[device] = {
            "kernels": len(items),
            "geomean_speedup": math.exp(statistics.fmean(math.log(s) for s in speedups))
            if speedups else None,
            "results": [{"kernel": r.kernel_name, "key": r.kernel_key,
                         "time_s": r.result.time_s, "default_s": r.result.default_time_s,
                         "speedup": r.result.speedup, "gflops": r.result.gflops,
                         "gbps": r.result.gbps, "trials": r.result.trials,
                         "sampler": r.result.sampler, "verified": r.result.verified}
                        for r in items]}
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary, store.where)
    if plot:
        _plot(store, rows, plot)
        print(f"wrote {plot}")
    return 0


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
        for col in ("kernel", "default", "tuned", "speed-up", "GFLOPS", "GB/s", "trials"):
            table.add_column(col, justify="left" if col == "kernel" else "right")
        for r in sorted(data["results"], key=lambda r: -(r["speedup"] or 0)):
            table.add_row(r["kernel"], f"{r['default_s'] * 1e6:.1f} us",
                          f"{r['time_s'] * 1e6:.1f} us", f"{r['speedup']:.2f}x",
                          f"{r['gflops']:.2f}", f"{r['gbps']:.2f}", str(r["trials"]))
        console.print(table)


def _plot(store, rows, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (conv, bars) = plt.subplots(1, 2, figsize=(13, 5))
    for row in rows[:12]:
        times = [t.time_s for t in store.trials(row.kernel_key, row.device_key)]
        best, curve = math.inf, []
        for t in times:
            if t is not None:
                best = min(best, t)
            curve.append(row.result.default_time_s / best if best < math.inf else float("nan"))
        if curve:
            conv.plot(range(1, len(curve) + 1), curve, label=row.kernel_name[:24])
    conv.set_xlabel("trial")
    conv.set_ylabel("best speed-up over default")
    conv.set_title("search convergence")
    if rows:
        conv.legend(fontsize=7)
    names = [f"{r.kernel_name[:20]}\n{r.backend}" for r in rows]
    bars.barh(range(len(rows)), [r.result.speedup or 0 for r in rows])
    bars.set_yticks(range(len(rows)), names, fontsize=6)
    bars.axvline(1.0, color="gray", linestyle="--")
    bars.set_xlabel("speed-up over the default config")
    bars.set_title("per kernel")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise UsageError(f"cannot write the plot {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
