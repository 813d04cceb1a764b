"""Latency of real models on the CPU, next to onnxruntime in the same run.

    python scripts/bench_models.py                         # untuned: the default configs
    python scripts/bench_models.py --tuned --time-budget 600   # each model tuned first
    python scripts/bench_models.py --models transformer_block odd_mlp --threads 1 --repeat 20
    python scripts/bench_models.py --models odd_mlp --busy 2   # on a loaded machine
    python scripts/bench_models.py --models inception_v2 --processes 6   # spread over processes

--tuned runs the real command line, `tunesearch tune FILE --time-budget T --db URL --quiet`, on
each model (written to a temporary .onnx file) before timing it with the configs that tune
stored; the database is a fresh SQLite file unless --db names one, so the table says what tuning
from an empty database buys in T seconds per model, and its "tune s" column is the wall time of
that command. Without --tuned every kernel runs its default config (TUNESEARCH_NODB=1).

The models: the bundled examples (tiny_cnn and the PyTorch exports of scripts/export_models.py,
bound to their exported shapes), a transformer encoder block (batch 1, seq 64, d 128) and an MLP
of awkward sizes (37x1000 -> 333 -> 77) from tunesearch/examples/blocks.py, and the architectures
shipped in the onnx package (tunesearch/examples/zoo.py).

Both libraries run with the same thread count (TUNESEARCH_THREADS for tunesearch, its tune
included; intra_op_num_threads for onnxruntime), each timed in its own block of runs
(interleaving two libraries call by call lets one's spinning worker threads steal the other's
core). --busy N starts N processes spinning on the CPU before each model's runs, both libraries'
alike, and stops them after (the tuning runs on a quiet machine).

One process is one sample (its threads, its memory, the machine's state while it runs): each
model is timed in --processes fresh processes, one after another, both libraries in each; the
table gives the median process of each library, their ratio, and each library's spread (its
slowest process over its fastest).

Prints a markdown table: median latency of a whole call (inputs copied in, outputs copied out),
the ratio to onnxruntime (below 1 is faster), the time of the first call (tracing, scheduling and
compiling), the kernel count, how many ran tuned, the per-call overhead (a whole call, numpy in
and numpy out, less the kernels' own times) and that overhead per kernel launch.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _onnxruntime_latency(proto, feeds: dict, threads: int, repeat: int) -> float:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _model(name: str):
    import onnx
    from tunesearch import examples
    from tunesearch.examples import blocks, zoo
    if name.endswith(".onnx"):  # a file, e.g. export_models.py --large's
        return onnx.load(name)
    if name in examples.names():
        return onnx.load(str(examples.path(name)))
    if name in blocks.names():
        return blocks.model(name)
    return zoo.light_model(name)


def _input_shapes(name: str) -> dict:
    """An export's shapes from the manifest beside it (bundled or written elsewhere)."""
    from tunesearch import examples
    if name.endswith(".onnx"):
        return examples.input_shapes(Path(name).stem, Path(name).parent)
    return examples.input_shapes(name)


def _model_names() -> list[str]:
    from tunesearch import examples
    from tunesearch.examples import blocks, zoo
    return examples.names() + blocks.names() + zoo.LIGHT_MODELS


@contextlib.contextmanager
def busy(n: int):
    """n processes spinning on the CPU while the block runs; stopped (and reaped) after it."""
    spin = "print('spinning', flush=True)\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
                for _ in range(n)]
    try:
        for process in spinners:  # each one spinning before the block starts, not still starting
            process.stdout.readline()
        yield
    finally:
        for process in spinners:
            process.terminate()
        for process in spinners:
            process.wait()
            process.stdout.close()


def tune(name: str, proto, folder: Path, db: str, time_budget: float) -> float:
    """Run `tunesearch tune` on the model in a process of its own; returns its wall time."""
    import onnx
    file = folder / f"{Path(name).stem}.onnx"
    onnx.save(proto, str(file))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("TUNESEARCH_NODB", None)
    command = [sys.executable, "-c", "import sys; from tunesearch.cli import main; "
               "sys.exit(main(sys.argv[1:]))", "tune", str(file),
               "--time-budget", str(time_budget), "--db", db, "--quiet"]
    for input_name, shape in _input_shapes(name).items():
        command += ["--input-shape", f"{input_name}={'x'.join(map(str, shape))}"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tunesearch tune {name} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def bench(name: str, proto, threads: int, repeat: int, db: str | None) -> dict:
    import tunesearch.onnx as tox
    from tunesearch.runtime import realize
    from tunesearch.runtime.lookup import TunedConfigs
    from tunesearch.search.on_miss import tune_on_miss
    # the configs tune has just stored, looked up afresh (untuned: the process's, NODB=1)
    lookup = TunedConfigs.open(db, on_miss=tune_on_miss) if db is not None else None
    realize.clear_programs()
    start = time.perf_counter()
    model = tox.load(proto, _input_shapes(name), lookup=lookup)
    feeds = model.random_inputs(0)
    model(feeds)
    first = time.perf_counter() - start
    profile = model.profile(feeds, repeat=repeat)
    ours = profile.latency
    theirs = _onnxruntime_latency(proto, feeds, threads, repeat)
    flops = sum(item.kernel.flops for item in model.schedule())
    return {"model": name, "gflop": flops / 1e9, "ours": ours, "ort": theirs,
            "first": first, "kernels": len(profile.kernels), "tuned": profile.n_tuned,
            "overhead": profile.launch_overhead, "fixed": ours - profile.kernel_seconds}


def _in_processes(name: str, threads: int, repeat: int, db: str | None, processes: int,
                  busy_n: int) -> list[dict]:
    """bench() in `processes` fresh processes, one after another; one row each."""
    rows = []
    for _ in range(processes):
        command = [sys.executable, __file__, "--child", name, "--threads", str(threads),
                   "--repeat", str(repeat)] + (["--db", db] if db else [])
        env = dict(os.environ)
        if db is None:
            env["TUNESEARCH_NODB"] = "1"
        with busy(busy_n):
            done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"timing {name} failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def _spread(values: list[float]) -> float:
    return max(values) / min(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=_model_names(),
                        help="bundled examples, transformer_block, odd_mlp, onnx-shipped "
                             "architectures (default: all of them)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for tune, tunesearch and onnxruntime (default: "
                             "TUNESEARCH_THREADS, else every core)")
    parser.add_argument("--repeat", type=int, default=10,
                        help="timed calls per library and process (default 10)")
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes each model is timed in (default 5)")
    parser.add_argument("--tuned", action="store_true",
                        help="tune each model with `tunesearch tune` first, then time it with "
                             "the stored configs (default: defaults only, no database)")
    parser.add_argument("--time-budget", type=float, default=600, metavar="SECONDS",
                        help="tune's --time-budget per model, with --tuned (default 600)")
    parser.add_argument("--db", default=None, metavar="URL",
                        help="database URL tune writes and the runs read (implies --tuned; "
                             "default: a fresh SQLite file in a temporary folder)")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="CPU-bound processes spinning while both libraries run (default 0)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    tuned = args.tuned or args.db is not None
    if args.threads is not None:
        os.environ["TUNESEARCH_THREADS"] = str(args.threads)
    if args.child is not None:  # one process's sample
        from tunesearch import settings
        row = bench(args.child, _model(args.child), settings.cpu_threads(), args.repeat,
                    args.db)
        print(json.dumps(row))
        return 0
    if not tuned:
        os.environ["TUNESEARCH_NODB"] = "1"
    from tunesearch import settings
    from tunesearch.runtime.host_cpu import cpuinfo
    threads = settings.cpu_threads()
    with tempfile.TemporaryDirectory(prefix="bench_models_") as folder:
        db = args.db or f"sqlite:///{Path(folder) / 'tuned.db'}"
        configs = (f"tuned for {args.time_budget:g} s per model into "
                   f"{args.db or 'an empty database'}" if tuned else "default configs")
        print(f"{cpuinfo()['model']}, {threads} thread{'s' * (threads != 1)}, {configs}, "
              f"median process of {args.processes} (each the median of {args.repeat} calls), "
              f"{args.busy} busy process{'es' * (args.busy != 1)}\n")
        tune_column = ("tune s | ", "---:|") if tuned else ("", "")
        print(f"| model | GFLOP | {tune_column[0]}tunesearch ms | onnxruntime ms | ratio "
              "| spread tunesearch | spread onnxruntime | first call s | kernels | tuned "
              "| launch overhead us/kernel | per-call overhead us |")
        print(f"|---|---:|{tune_column[1]}---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in args.models:
            proto = _model(name)
            tune_s = tune(name, proto, Path(folder), db, args.time_budget) if tuned else None
            rows = _in_processes(name, threads, args.repeat, db if tuned else None,
                                 args.processes, args.busy)
            ours = statistics.median(r["ours"] for r in rows)
            theirs = statistics.median(r["ort"] for r in rows)
            row = rows[len(rows) // 2]
            tune_cell = f"{tune_s:.0f} | " if tuned else ""
            print(f"| {name} | {row['gflop']:.3f} | {tune_cell}{ours * 1e3:.2f} "
                  f"| {theirs * 1e3:.2f} | {ours / theirs:.2f} "
                  f"| {_spread([r['ours'] for r in rows]):.2f} "
                  f"| {_spread([r['ort'] for r in rows]):.2f} "
                  f"| {statistics.median(r['first'] for r in rows):.1f} | {row['kernels']} "
                  f"| {row['tuned']} | {statistics.median(r['overhead'] for r in rows) * 1e6:.1f} "
                  f"| {statistics.median(r['fixed'] for r in rows) * 1e6:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
