"""Latency of each bundled and onnx-shipped model on the CPU, next to onnxruntime in the same run.

    python scripts/bench_models.py                         # untuned: the default configs
    python scripts/bench_models.py --tuned [--db URL]      # with the tuned configs a database has
    python scripts/bench_models.py --models tiny_cnn squeezenet --threads 1 --repeat 20

Both run with the same thread count (TUNESEARCH_THREADS for tunesearch, intra_op_num_threads for
onnxruntime), each timed in its own block of runs (interleaving two libraries call by call lets
one's spinning worker threads steal the other's core). Prints a markdown table: median latency
of a whole call (inputs copied in, outputs copied out), the ratio to onnxruntime (below 1 is
faster), the time of the first call (tracing, scheduling and compiling), the kernel count, how
many ran tuned, the launch overhead per kernel (a launch from Python less the kernel's own time)
and the per-call overhead (a whole call, numpy in and numpy out, less the kernels' own times).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


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
    from tunesearch.examples import zoo
    if name in examples.names():
        return onnx.load(str(examples.path(name)))
    return zoo.light_model(name)


def bench(name: str, threads: int, repeat: int) -> dict:
    import tunesearch.onnx as tox
    proto = _model(name)
    start = time.perf_counter()
    model = tox.load(proto)
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


def main() -> int:
    from tunesearch import examples
    from tunesearch.examples import zoo
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=examples.names() + zoo.LIGHT_MODELS)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for both (default: TUNESEARCH_THREADS, else every core)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--tuned", action="store_true",
                        help="use the tuned configs the database has (default: defaults only)")
    parser.add_argument("--db", default=None, help="database URL (implies --tuned)")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["TUNESEARCH_THREADS"] = str(args.threads)
    if args.db:
        os.environ["TUNESEARCH_DB"] = args.db
    if not (args.tuned or args.db):
        os.environ["TUNESEARCH_NODB"] = "1"
    from tunesearch import settings
    threads = settings.cpu_threads()
    configs = "tuned configs where the database has them" if args.tuned or args.db \
        else "default configs"
    print(f"CPU, {threads} thread{'s' * (threads != 1)}, {configs}, median of {args.repeat}\n")
    print("| model | GFLOP | tunesearch ms | onnxruntime ms | ratio | first call s | kernels "
          "| tuned | launch overhead us/kernel | per-call overhead us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        row = bench(name, threads, args.repeat)
        print(f"| {row['model']} | {row['gflop']:.3f} | {row['ours'] * 1e3:.2f} | "
              f"{row['ort'] * 1e3:.2f} | {row['ours'] / row['ort']:.2f} | {row['first']:.1f} | "
              f"{row['kernels']} | {row['tuned']} | {row['overhead'] * 1e6:.1f} | "
              f"{row['fixed'] * 1e6:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
