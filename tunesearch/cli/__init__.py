"""The `tunesearch` command: tune a model once, run it fast from then on.

    tunesearch tune model.onnx --device cpu      # search every kernel, store the winners
    tunesearch run  model.onnx --device cpu      # later runs load them by themselves

Every expected failure (a missing file, a model that is not ONNX, an unknown device, an
unreachable database...) is a `tunesearch.errors.UserError`: one line on stderr and exit code 2,
never a traceback. Any other exception is a bug: exit code 1 and one line that says so.

This module builds the parser and runs `tune`, `run` and `devices`; the other commands live beside
it: `report.py` (and `report_plot.py`), `status.py`, `dashboard.py`, `db.py` (the `db` group),
with `arguments.py` (checked arguments); `tune` is `search.tune_model` and a table.
`python -m tunesearch` runs `main`.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

from tunesearch import settings
from tunesearch.cli.arguments import (
    ArgumentParser, add_db_argument, check_kept_database, count, integer, resolve_model, seconds,
    SEED_LIMIT,
)
from tunesearch.cli.exit_codes import run_command
from tunesearch.errors import UsageError, one_line
from tunesearch.paths import check_path

EXAMPLES = Path(__file__).parent.parent / "examples"


def _shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--input-shape takes NAME=DIMS like input=1x3x224x224, got {text!r}") from None
    if any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"--input-shape {text}: a dimension is a size, never "
                                         "negative")
    return name, shape


def _check_graph_path() -> None:
    """GRAPH=1 writes its drawing at the end: a file that cannot be written is refused before
    the command works (and before `tune` writes its database)."""
    from tunesearch.cli.arguments import check_new_file
    if settings.graph():
        check_new_file(settings.graph_path(), "GRAPH_PATH")


def _load_model(args):
    from tunesearch.onnx import load
    from tunesearch.runtime.device import get_device
    args.device = args.device or settings.default_device()
    get_device(args.device).info()  # an unavailable device fails here, with its install hint
    shapes = {}
    if args.model.startswith("example:"):  # an export's dynamic axes: the exported shapes
        from tunesearch import examples
        shapes = examples.input_shapes(args.model.split(":", 1)[1])
    given = [name for name, _ in args.input_shape or []]
    twice = sorted({name for name in given if given.count(name) > 1})
    if twice:  # the last one would win silently: the user meant one of them
        raise UsageError(f"--input-shape gives input {', '.join(map(repr, twice))} more than "
                         "once; give each input's shape once")
    shapes.update(dict(args.input_shape or []))
    return load(resolve_model(args.model), shapes, device=args.device)


def _open_store(url: str | None):
    from tunesearch.db import Store
    return Store(url)


def cmd_tune(args) -> int:
    from tunesearch.search import Budget, tune_model
    from tunesearch.search.samplers import SAMPLERS
    from tunesearch.search.saving import check_writable
    # every argument is checked before any work, before a file is opened or created
    budget = Budget(trials=args.trials, total_seconds=args.time_budget, patience=args.patience)
    if budget.problem():
        raise UsageError(budget.problem())
    if args.sampler not in SAMPLERS:
        raise UsageError(f"unknown sampler {args.sampler!r} (--sampler); known samplers: "
                         f"{', '.join(SAMPLERS)}")
    check_kept_database(args.db or settings.db_url(), "tune")
    _check_graph_path()
    from tunesearch.search.capacity import check_workers
    from tunesearch.search.cluster import check_cluster
    check_workers(args.workers)  # what this machine serves, before the model is loaded
    check_cluster(args.cluster, args.workers)
    model = _load_model(args)
    store = _open_store(args.db)
    check_workers(args.workers, store)  # and the database's connections
    # a database that cannot be written refuses now, not after minutes of search
    check_writable(store, args.device)
    inputs = model.random_inputs(seed=0)
    from tunesearch.db import study_storage
    tuned = tune_model(model, args.device, budget, store=store, inputs=inputs,
                       sampler=args.sampler, seed=args.seed, retune=args.retune,
                       workers=args.workers, cluster=args.cluster,
                       progress=not (args.quiet or args.json),
                       repeat=args.repeat, name=Path(args.model).stem,
                       storage=_studies(study_storage, store.url) if args.workers <= 1 else None)
    model(inputs)  # a warm call with the tuned kernels, the one DEBUG and GRAPH=1 show
    report, compared, kept = tuned.report, tuned.comparison, tuned.kept_default
    default_time = tuned.default_times
    total = sum(default_time.values()) or 1.0
    rows = []
    for r in report.results:
        status = "kept default" if r.kernel_key in kept else r.status
        rows.append({"kernel": r.name, "key": r.kernel_key, "status": status,
                     "share": default_time.get(r.kernel_key, 0.0) * r.occurrences / total,
                     "default_s": r.default_time_s, "tuned_s": r.time_s, "speedup": r.speedup,
                     "gflops": r.gflops, "gbps": r.gbps, "trials": r.trials,
                     "stopped_by": r.stopped_by, "failures": dict(r.failures),
                     "started_from": r.started_from})
    summary = {"model": str(args.model), "device": args.device, "device_key": report.device_key,
               "database": store.where, "latency_before_s": compared.before_s,
               "latency_after_s": compared.after_s, "speedup": compared.speedup,
               "latency_before_by_process_s": compared.before_by_process,
               "latency_after_by_process_s": compared.after_by_process,
               "noisy": compared.noisy, "block_spread": compared.spread,
               "kept_default": len(kept),
               "kernels_tuned": compared.n_tuned, "kernels": compared.n_kernels,
               "interrupted": report.interrupted, "seconds": report.seconds, "results": rows}
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print_tune_table(summary)
    unsaved = [r for r in report.results if r.save_error]
    if unsaved:  # a search whose winners are lost must not look like a success
        from tunesearch.db import DatabaseError
        raise DatabaseError(f"{len(unsaved)} of {len(report.results)} kernel result(s) were not "
                            f"saved to {store.where}: {unsaved[0].save_error}")
    return 130 if report.interrupted else 0


def _studies(study_storage, url: str):
    """Optuna storage beside the results, so `tunesearch dashboard` shows every study; None
    (studies in memory) where it cannot be opened."""
    try:
        return study_storage(url)
    except Exception:  # the studies are a convenience; the results are what must be saved
        return None


def _fmt_time(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _print_tune_table(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"tuned on {summary['device']} ({summary['device_key']})")
    for col in ("kernel", "status", "share", "default", "tuned", "speed-up", "GFLOPS", "GB/s"):
        table.add_column(col, justify="left" if col in ("kernel", "status") else "right")
    for r in sorted(summary["results"], key=lambda r: -r["share"]):
        table.add_row(r["kernel"], r["status"], f"{r['share'] * 100:.1f}%",
                      _fmt_time(r["default_s"]), _fmt_time(r["tuned_s"]),
                      f"{r['speedup']:.2f}x" if r["speedup"] else "-",
                      f"{r['gflops']:.2f}" if r["gflops"] is not None else "-",
                      f"{r['gbps']:.2f}" if r["gbps"] is not None else "-")
    console = Console()
    console.print(table)
    before, after = (summary["latency_before_by_process_s"],
                     summary["latency_after_by_process_s"])
    console.print(f"model latency, the median of {len(before)} processes, each timing both "
                  f"back to back in blocks: {_fmt_time(summary['latency_before_s'])} with "
                  f"defaults ({_fmt_time(min(before))} to {_fmt_time(max(before))}) -> "
                  f"{_fmt_time(summary['latency_after_s'])} tuned ({_fmt_time(min(after))} to "
                  f"{_fmt_time(max(after))}), {summary['speedup']:.2f}x; "
                  f"{summary['kernels_tuned']} of {summary['kernels']} kernels tuned; results "
                  f"in {summary['database']}")
    sources = sorted({r["started_from"] for r in summary["results"] if r["started_from"]})
    if sources:
        started = sum(1 for r in summary["results"] if r["started_from"])
        console.print(f"{started} kernel(s) started from another device's winner: "
                      f"{'; '.join(sources)}")
    if summary["kept_default"]:
        console.print(f"{summary['kept_default']} winner(s) ran slower inside the model than "
                      f"the default did there: the default is kept for them (\"kept default\")")
    if summary["noisy"]:
        console.print(f"the machine was too noisy to trust these figures: blocks of the same "
                      f"side differed by {summary['block_spread']:.0%}; run `tunesearch run` "
                      f"on a quieter machine to see the latency")


def cmd_run(args) -> int:
    from tunesearch.cli.arguments import check_new_file
    from tunesearch.npz import read_inputs, write_outputs
    from tunesearch.runtime.lookup import TunedConfigs
    from tunesearch.search.on_miss import tune_on_miss
    if args.outputs is not None:
        check_new_file(args.outputs, "--outputs")
    _check_graph_path()
    if args.inputs is not None:
        check_path(args.inputs, "--inputs")
    model = _load_model(args)
    inputs = read_inputs(args.inputs, model) if args.inputs else model.random_inputs(seed=0)
    # one rule for --db and TUNESEARCH_DB: a database that cannot be used is an error
    model.use_lookup(TunedConfigs.for_run(args.db, on_miss=tune_on_miss))
    profile = model.profile(inputs, repeat=args.repeat)
    outputs = model(inputs)  # after the profile's warm calls: DEBUG and GRAPH=1 show this one
    if args.outputs is not None:
        write_outputs(args.outputs, outputs)
    summary = {"model": str(args.model), "device": args.device,
               "latency_s": profile.latency, "kernels": len(profile.kernels),
               "kernels_tuned": profile.n_tuned, "launch_overhead_s": profile.launch_overhead,
               "outputs": {k: list(v.shape) for k, v in outputs.items()}}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{Path(args.model).name} on {args.device}: median latency "
              f"{_fmt_time(profile.latency)} over {args.repeat} runs; {profile.n_tuned} of "
              f"{len(profile.kernels)} kernels tuned; launch overhead "
              f"{_fmt_time(profile.launch_overhead)} per kernel")
        for name, value in outputs.items():
            mean = f"mean {float(np.mean(value)):.6g}" if value.size else "empty"
            print(f"  {name}: shape {value.shape}, {mean}")
    return 0


def cmd_devices(args) -> int:
    from tunesearch.runtime.device import DEVICES, get_device
    found = {}
    for name, entry in DEVICES.items():
        try:
            info = get_device(name).info()
            found[name] = {"available": True, "description": entry.description, "key": info.key,
                           **info.as_dict()}
        except Exception as exc:  # every reason a device is missing is reported, not raised
            found[name] = {"available": False, "description": entry.description,
                           "reason": str(exc).splitlines()[0]}
    if args.json:
        print(json.dumps(found, indent=2, default=str))
        return 0
    for name, data in found.items():
        print(f"{name:<10} {data['description']}")
        if data["available"]:
            details = ", ".join(f"{k}={v}" for k, v in data.items()
                                if k not in ("available", "description", "backend"))
            print(f"{'':<10} available  {details}")
        else:
            print(f"{'':<10} unavailable: {data['reason']}")
    return 0


def _device_help() -> str:
    """The --device help: every registered device with what it is."""
    from tunesearch.runtime.device import DEVICES
    return "; ".join(f"{name}: {entry.description}" for name, entry in DEVICES.items()) + \
        " (default: $TUNESEARCH_DEVICE, else cpu)"


def cmd_report(args) -> int:
    from tunesearch.db import Store
    from tunesearch.cli.report import check_plot, report
    if args.plot is not None:
        check_plot(args.plot)  # matplotlib and the file's folder, before reading the database
    with Store(args.db, readonly=True) as store:
        return report(store, args.plot, args.json)


def cmd_status(args) -> int:
    from tunesearch.cli.status import print_status, status
    info = status(args.db)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        print_status(info)
    return 0


def cmd_dashboard(args) -> int:
    from tunesearch.cli.dashboard import serve_dashboard
    return serve_dashboard(args.db, args.host, args.port) or 0


def build_parser() -> argparse.ArgumentParser:
    from tunesearch import __version__
    parser = ArgumentParser(prog="tunesearch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tunesearch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    device_help = _device_help()

    def model_command(name: str, help_text: str):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("model", help="an .onnx file, or example:NAME for a bundled model")
        p.add_argument("--device", default=None, help=device_help)
        add_db_argument(p)
        p.add_argument("--input-shape", action="append", type=_shape_arg, metavar="NAME=SHAPE",
                       help="bind an input's dynamic dims, e.g. input=1x3x224x224")
        p.add_argument("--json", action="store_true", help="print a JSON summary")
        return p

    tune = model_command("tune", "tune every kernel of a model and store the winners")
    tune.add_argument("--trials", type=count("--trials"), default=40,
                      help="trials per kernel (default 40)")
    tune.add_argument("--time-budget", type=seconds("--time-budget"), default=None,
                      metavar="SECONDS", help="wall time for the whole model")
    tune.add_argument("--patience", type=count("--patience"), default=None,
                      help="stop a kernel after this many trials without improvement")
    tune.add_argument("--sampler", default="tpe", help="tpe, random, grid, gp, nsga2, cmaes")
    tune.add_argument("--seed", type=integer("--seed", 0, SEED_LIMIT - 1), default=0)
    tune.add_argument("--retune", action="store_true", help="tune kernels already in the db")
    tune.add_argument("--repeat", type=count("--repeat"), default=10,
                      help="runs to time the model")
    tune.add_argument("--quiet", action="store_true", help="no progress display")
    tune.add_argument("--workers", type=count("--workers"), default=1,
                      help="worker processes here; the same command on other machines joins in")
    tune.add_argument("--cluster", default=None, metavar="ADDRESS",
                      help="search on the Ray cluster at ADDRESS (HOST:PORT, or auto); "
                           "see docs/cluster.md")
    tune.set_defaults(func=cmd_tune)

    run = model_command("run", "run a model with its tuned kernels")
    run.add_argument("--inputs", help="an .npz file of inputs (default: random, seed 0)")
    run.add_argument("--outputs", help="write the outputs to this .npz file")
    run.add_argument("--repeat", type=count("--repeat"), default=10,
                     help="runs to time (default 10)")
    run.set_defaults(func=cmd_run)

    devices = sub.add_parser("devices", help="the devices available here, with fingerprints")
    devices.add_argument("--json", action="store_true")
    devices.set_defaults(func=cmd_devices)

    report = sub.add_parser("report", help="speed-ups per device and kernel in a database")
    add_db_argument(report)
    report.add_argument("--plot", default=None, metavar="FILE.png",
                        help="a PNG of search convergence and speed-up per kernel")
    report.add_argument("--json", action="store_true")
    report.set_defaults(func=cmd_report)

    status = sub.add_parser("status", help="kernels done, in progress and waiting per device")
    add_db_argument(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    dash = sub.add_parser("dashboard", help="optuna-dashboard on the studies in a database")
    add_db_argument(dash)
    dash.add_argument("--host", default="127.0.0.1")
    dash.add_argument("--port", type=integer("--port", 1, 65535), default=8080)
    dash.set_defaults(func=cmd_dashboard)

    from tunesearch.cli.db import register
    register(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning is one line on stderr, as the database layer's are: Python's own form adds
    the file and line of the code that warned, which says nothing to the user."""
    print(one_line(message), file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0, 2 for an expected failure, 1 for a bug,
    130 for Ctrl-C: see `tunesearch.cli.exit_codes.run_command`)."""
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning

    def command():
        settings.check()  # numeric ranges, TUNESEARCH_DEVICE's name, the settings' paths
        return args.func(args)
    return run_command(command)
