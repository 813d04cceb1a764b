"""What a person sees while tuning runs: one line per kernel, a bar for the current one.

Everything goes to stderr, so a JSON summary on stdout stays clean. `Progress` is silent (the
quiet mode); `RichProgress` draws with rich.
"""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as _Bar, TextColumn
from rich.progress import TimeElapsedColumn
from rich.table import Table

from tunesearch.search.results import KernelResult, TuneReport


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def describe(result: KernelResult) -> str:
    """One line about a finished kernel."""
    if result.time_s is None:
        return f"{result.name}: {result.status} {result.message}".rstrip()
    failures = ", ".join(f"{n} {kind}" for kind, n in result.failures.items())
    speedup = f"{result.speedup:.2f}x over default" if result.speedup else "no default time"
    origin = f", started from the winner on {result.started_from}" if result.started_from else ""
    return (f"{result.name}: {format_time(result.time_s)}, {result.gflops:.1f} GFLOPS, "
            f"{result.gbps:.1f} GB/s, {speedup} ({result.status}, {result.trials} trials"
            f"{', ' + failures if failures else ''}{origin})")


class Progress:
    """The interface, silent. Subclasses draw."""

    def note(self, text: str) -> None:
        pass

    def defaults(self, index: int, total: int, name: str) -> None:
        """The default config of kernel index (0-based) is being measured."""

    def kernel_start(self, index: int, total: int, name: str, trials: int | None,
                     default_s: float | None) -> None:
        pass

    def trial(self, measured: int, best_s: float | None) -> None:
        pass

    def kernel_done(self, result: KernelResult) -> None:
        pass

    def close(self) -> None:
        pass


class RichProgress(Progress):
    """A live bar for the kernel being tuned: i of n, trials, best so far, speed-up."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.bar = _Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[best]}"), TimeElapsedColumn(),
                        console=self.console, transient=True)
        self.task = None
        self.default_s: float | None = None
        self.bar.start()

    def note(self, text: str) -> None:
        self.console.print(f"[yellow]note:[/] {text}", highlight=False)

    def defaults(self, index: int, total: int, name: str) -> None:
        self._reset(f"default {index + 1}/{total} {name}", total, index)

    def kernel_start(self, index, total, name, trials, default_s) -> None:
        self.default_s = default_s
        self._reset(f"kernel {index + 1}/{total} {name}", trials, 0)

    def _reset(self, description: str, total: int | None, completed: int) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
        self.task = self.bar.add_task(description, total=total, completed=completed, best="")

    def trial(self, measured: int, best_s: float | None) -> None:
        best = ""
        if best_s is not None:
            best = f"best {format_time(best_s)}"
            if self.default_s:
                best += f" ({self.default_s / best_s:.2f}x)"
        self.bar.update(self.task, completed=measured, best=best)

    def kernel_done(self, result: KernelResult) -> None:
        style = "green" if result.time_s is not None else "red"
        self.console.print(f"[{style}]{describe(result)}[/]", highlight=False)

    def close(self) -> None:
        self.bar.stop()


def summary_table(report: TuneReport) -> Table:
    """The results of a run as a rich table, one row per kernel."""
    table = Table(title=f"tuned on {report.device_name} ({report.device_key})")
    for column in ("kernel", "status", "time", "GFLOPS", "GB/s", "speed-up", "trials",
                   "failures"):
        table.add_column(column, justify="left" if column in ("kernel", "status") else "right")
    for r in report.results:
        table.add_row(r.name, r.status, format_time(r.time_s),
                      f"{r.gflops:.1f}" if r.gflops is not None else "-",
                      f"{r.gbps:.1f}" if r.gbps is not None else "-",
                      f"{r.speedup:.2f}x" if r.speedup else "-", str(r.trials),
                      ", ".join(f"{n} {k}" for k, n in r.failures.items()))
    return table
