"""The PNG of `tunesearch report --plot`: each tuned model's latency against tuning time, the
speed-up of each kernel (ordered by its share of the model's time) and the search convergence of
the heaviest kernels. Speed-ups are drawn on log axes: one kernel that gained 100x must not
flatten the others to nothing."""
from __future__ import annotations

import math

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from tunesearch.errors import UsageError

MAX_BARS = 25         # the kernels with the largest shares; the rest are counted in the title
MAX_CONVERGENCE = 8   # curves in the convergence panel


def _times_scale(span_s: float) -> tuple[float, str]:
    if span_s >= 2 * 3600:
        return 3600.0, "hours"
    return (60.0, "minutes") if span_s >= 120 else (1.0, "seconds")


def _speedup_axis(axis, which: str) -> None:
    """A log axis labelled 0.5x, 1x, 2x, 5x, 10x..., from 0.5x to 2x at least."""
    getattr(axis, f"set_{which}scale")("log")
    lo, hi = getattr(axis, f"get_{which}lim")()
    getattr(axis, f"set_{which}lim")(min(lo, 0.45), max(hi, 2.2))
    ax = axis.xaxis if which == "x" else axis.yaxis
    ax.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_minor_formatter(NullFormatter())


def _models(axis, curves, device_names: dict[str, str]) -> None:
    span = max((c.points[-1][0] for c in curves), default=0.0)
    scale, unit = _times_scale(span)
    latency = max(c.default_s for c in curves)
    ms = 1e3 if latency >= 1e-3 else 1e6
    # a log axis once the gain (or the spread between models) is large: the tuned end stays
    # readable instead of lying flat on zero
    low = min(min(v for _, v in c.points + ((0.0, c.tuned_s),)) for c in curves)
    log = latency / max(low, 1e-12) > 3
    for curve in curves:
        xs = [t / scale for t, _ in curve.points]
        ys = [v * ms for _, v in curve.points]
        label = f"{curve.model} on {device_names.get(curve.device_key, curve.device_key)}"
        line, = axis.step(xs, ys, where="post", label=f"{label}: best found so far")
        axis.axhline(curve.default_s * ms, color=line.get_color(), linestyle=":", linewidth=1)
        axis.plot([xs[-1]], [curve.tuned_s * ms], "o", color=line.get_color(),
                  label=f"stored winners: {curve.speedup:.2f}x over the defaults")
        axis.annotate(f"defaults {curve.default_s * ms:.3g}", (xs[0], curve.default_s * ms),
                      textcoords="offset points", xytext=(4, 3), va="bottom", fontsize=7,
                      color=line.get_color())
        axis.annotate(f"tuned {curve.tuned_s * ms:.3g}", (xs[-1], curve.tuned_s * ms),
                      textcoords="offset points", xytext=(-6, -12), ha="right", fontsize=7,
                      color=line.get_color())
    axis.set_xlabel(f"tuning time ({unit} since the first trial)")
    unit = "ms" if ms == 1e3 else "us"
    if log:
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_ylabel(f"model latency ({unit}, log), sum of kernel times")
    else:
        axis.set_ylim(0, latency * ms * 1.1)
        axis.set_ylabel(f"model latency ({unit}), sum of kernel times")
    axis.set_title("model latency as tuning went on")
    axis.legend(fontsize=7, loc="upper right")
    axis.grid(alpha=0.3)


def _bars(axis, rows, shares: dict) -> None:
    ranked = sorted(rows, key=lambda r: -shares[r.kernel_key, r.device_key])
    shown = [r for r in ranked if r.result.speedup > 0][:MAX_BARS]
    backends = {r.backend for r in rows}
    names = [f"{r.kernel_name[:26]}{f' ({r.backend})' if len(backends) > 1 else ''}  "
             f"{shares[r.kernel_key, r.device_key] * 100:.1f}%" for r in shown]
    speedups = [r.result.speedup for r in shown]
    positions = range(len(shown))
    colors = ["#2f9e44" if s >= 1 else "#e03131" for s in speedups]
    # bars start at 1x: a gain grows to the right, a loss to the left
    axis.barh(positions, [s - 1.0 for s in speedups], left=1.0, height=0.7, color=colors)
    for y, s in zip(positions, speedups):
        axis.annotate(f"{s:.2f}x", (s, y), textcoords="offset points",
                      xytext=(3 if s >= 1 else -3, -3), ha="left" if s >= 1 else "right",
                      fontsize=7)
    axis.set_yticks(list(positions), names, fontsize=7)
    axis.invert_yaxis()  # the largest share on top
    axis.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    if speedups:
        axis.set_xlim(min(min(speedups), 1.0) / 1.6, max(max(speedups), 1.0) * 1.6)
    _speedup_axis(axis, "x")
    more = f", top {len(shown)} of {len(ranked)}" if len(ranked) > len(shown) else ""
    axis.set_xlabel("speed-up over the default config (log)")
    axis.set_title(f"per kernel, by share of model time{more}")
    axis.grid(axis="x", alpha=0.3, which="both")


def _convergence(axis, store, rows, shares: dict) -> None:
    ranked = sorted(rows, key=lambda r: -shares[r.kernel_key, r.device_key])
    drawn = 0
    for row in ranked:
        if drawn == MAX_CONVERGENCE:
            break
        default = row.result.default_time_s
        trials = sorted(store.trials(row.kernel_key, row.device_key), key=lambda t: t.number)
        if default <= 0 or len(trials) < 3:  # a kernel with one or two configs was not searched
            continue
        best, curve = math.inf, []
        for t in trials:
            if t.time_s and not t.error:
                best = min(best, t.time_s)
            curve.append(default / best if best < math.inf else float("nan"))
        axis.plot(range(1, len(curve) + 1), curve, label=f"{row.kernel_name[:24]} "
                  f"{shares[row.kernel_key, row.device_key] * 100:.0f}%")
        drawn += 1
    axis.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    _speedup_axis(axis, "y")
    axis.set_xlabel("trial")
    axis.set_ylabel("best speed-up over the default so far (log)")
    axis.set_title(f"search convergence of the {drawn} heaviest kernel{'s' * (drawn != 1)} "
                   "searched")
    if drawn:
        axis.legend(fontsize=7)
    axis.grid(alpha=0.3, which="both")


def plot_report(store, rows, shares: dict, curves, path: str):
    """Write the report's PNG to `path`: models (when the database holds a tuned one), then the
    per-kernel speed-ups and the convergence of the heaviest kernels. Returns the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n_bars = min(MAX_BARS, len(rows))
    lower = max(5.0, 1.0 + 0.28 * n_bars)
    device_names = {r.device_key: r.device_name for r in rows}
    if curves:
        fig = plt.figure(figsize=(14, 4.5 + lower))
        grid = fig.add_gridspec(2, 2, height_ratios=(4.5, lower))
        _models(fig.add_subplot(grid[0, :]), curves, device_names)
        bars, convergence = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    else:
        fig, (bars, convergence) = plt.subplots(1, 2, figsize=(14, lower))
    _bars(bars, rows, shares)
    _convergence(convergence, store, rows, shares)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise UsageError(f"cannot write the plot {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return fig
