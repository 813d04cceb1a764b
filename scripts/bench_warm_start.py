"""Time to quality on a whole model when a device starts from another device's winners.

    python scripts/bench_warm_start.py --models transformer_block --budget 120
    python scripts/bench_warm_start.py --models odd_mlp --budget 100 --other-isa sse4
    TUNESEARCH_THREADS=1 python scripts/bench_warm_start.py --processes 9 --repeat 30

For each model, three databases (fresh SQLite files), each filled by the real command line,
`tunesearch tune FILE --time-budget T --trials 1000 --db URL --json`, with the time as the budget
that binds:

- cold: tuned at the native ISA level for B seconds from an empty database;
- cold, a fifth: tuned at native for B/5 from an empty database (what the fifth buys alone);
- warm, a fifth: tuned at --other-isa (TUNESEARCH_CPU_ISA, another device key on this machine)
  for B seconds, then at native for B/5 into the same database: the second tune starts each
  kernel from the first one's winner (search/starts.py).

The model is then timed at native with each database's configs and with every default (untuned),
each in --processes fresh processes, the sides taking turns process by process so that a slow
spell of the machine hits them alike; a side's figure is the median of its processes, each the
median of --repeat calls. The table gives each side's latency, its spread (slowest process over
fastest), its speed over cold's (cold latency / its latency: 0.98 means 98% of cold's speed),
the tune's search seconds, and how many kernels started from the other device's winner.
"""
from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "scripts"))

# the models, loaded as bench_models.py loads them
from bench_models import _input_shapes, _model  # noqa: E402

SIDES = ("untuned", "cold", "cold_fifth", "warm_fifth")


def _env(isa: str | None = None, nodb: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("TUNESEARCH_CPU_ISA", None)
    env.pop("TUNESEARCH_NODB", None)
    if isa is not None:
        env["TUNESEARCH_CPU_ISA"] = isa
    if nodb:
        env["TUNESEARCH_NODB"] = "1"
    return env


def device_key(isa: str) -> str:
    """The CPU's device key at an ISA level (a process of its own: one device per process)."""
    done = subprocess.run([sys.executable, "-c", "from tunesearch.runtime.device import "
                           "get_device; print(get_device('cpu').info().key)"],
                          env=_env(isa), capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def tune(name: str, file: Path, db: str, seconds: float, isa: str | None) -> dict:
    """`tunesearch tune` in a process of its own; its JSON summary, with the wall time."""
    command = [sys.executable, "-c", "import sys; from tunesearch.cli import main; "
               "sys.exit(main(sys.argv[1:]))", "tune", str(file), "--time-budget",
               f"{seconds:g}", "--trials", "1000", "--db", db, "--json"]
    for input_name, shape in _input_shapes(name).items():
        command += ["--input-shape", f"{input_name}={'x'.join(map(str, shape))}"]
    start = time.perf_counter()
    done = subprocess.run(command, env=_env(isa), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"tunesearch tune {name} ({isa or 'native'}) failed "
                         f"({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    summary = json.loads("\n".join(lines[lines.index("{"):]))  # the summary, after any notes
    summary["wall_s"] = wall
    return summary


def latency(name: str, db: str | None, repeat: int) -> float:
    """The model's median latency over `repeat` calls in a fresh process, at native."""
    command = [sys.executable, __file__, "--child", name, "--repeat", str(repeat)]
    command += ["--db", db] if db else []
    done = subprocess.run(command, env=_env(nodb=db is None), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"timing {name} failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _child(name: str, db: str | None, repeat: int) -> None:
    import tunesearch.onnx as tox
    from tunesearch.runtime.lookup import TunedConfigs
    lookup = TunedConfigs.open(db) if db is not None else None
    model = tox.load(_model(name), _input_shapes(name), lookup=lookup)
    feeds = model.random_inputs(0)
    model(feeds)
    print(model.profile(feeds, repeat=repeat).latency)


def run_model(name: str, budget: float, other_isa: str, processes: int, repeat: int,
              folder: Path) -> dict:
    import onnx
    file = folder / f"{name}.onnx"
    onnx.save(_model(name), str(file))
    dbs = {side: f"sqlite:///{folder / f'{name}-{side}.db'}" for side in SIDES[1:]}
    tunes = {"cold": tune(name, file, dbs["cold"], budget, None),
             "cold_fifth": tune(name, file, dbs["cold_fifth"], budget / 5, None)}
    tunes["other"] = tune(name, file, dbs["warm_fifth"], budget, other_isa)
    tunes["warm_fifth"] = tune(name, file, dbs["warm_fifth"], budget / 5, None)
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(processes):
        for side in SIDES:
            times[side].append(latency(name, dbs.get(side), repeat))
    return {"model": name, "tunes": tunes, "times": times}


def report(row: dict, budget: float, other_isa: str) -> None:
    times, tunes = row["times"], row["tunes"]
    median = {side: statistics.median(values) for side, values in times.items()}
    print(f"| {row['model']} | database | tune: search s (wall s) | started from {other_isa} "
          "| model ms | spread | speed over cold |")
    print("|---|---|---:|---:|---:|---:|---:|")
    names = {"untuned": "none (defaults)", "cold": f"cold, {budget:g} s",
             "cold_fifth": f"cold, {budget / 5:g} s",
             "warm_fifth": f"{other_isa} {budget:g} s, then native {budget / 5:g} s"}
    for side in SIDES:
        t = tunes.get(side)
        tune_cell = f"{t['seconds']:.0f} ({t['wall_s']:.0f})" if t else "-"
        if side == "warm_fifth":
            other = tunes["other"]
            tune_cell += f" after {other['seconds']:.0f} ({other['wall_s']:.0f}) at {other_isa}"
        started = sum(1 for r in t["results"] if r.get("started_from")) if t else 0
        kernels = f"{started} of {len(t['results'])}" if t else "-"
        if t and t["kept_default"]:
            tune_cell += f", {t['kept_default']} kept default"
        spread = max(times[side]) / min(times[side])
        print(f"| | {names[side]} | {tune_cell} | {kernels} | {median[side] * 1e3:.3f} "
              f"| {spread:.2f} | {median['cold'] / median[side]:.3f} |")
    warm = median["cold"] / median["warm_fifth"]
    print(f"\n{row['model']}: warm (a fifth of the budget) runs at {warm:.1%} of cold's speed "
          f"({'reaches' if warm >= 0.98 else 'misses'} 98%); cold is "
          f"{median['untuned'] / median['cold']:.2f}x untuned. Every process, ms: " +
          "; ".join(f"{side} " + " ".join(f"{t * 1e3:.3f}" for t in times[side])
                    for side in SIDES) + "\n", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["transformer_block"])
    parser.add_argument("--budget", type=float, default=120, metavar="SECONDS",
                        help="the cold tune's --time-budget B; the warm tune gets B/5")
    parser.add_argument("--other-isa", default="avx2",
                        help="TUNESEARCH_CPU_ISA of the device tuned first (default avx2)")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", default=None, metavar="FOLDER",
                        help="write the databases into FOLDER and keep them (default: a "
                             "temporary folder)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.db, args.repeat)
        return 0
    from tunesearch.runtime.host_cpu import cpuinfo
    keys = {isa: device_key(isa) for isa in ("native", args.other_isa)}
    if keys["native"] == keys[args.other_isa]:
        raise SystemExit(f"native and {args.other_isa} give one device key here "
                         f"({keys['native']}): choose another --other-isa")
    from tunesearch import settings
    threads = settings.cpu_threads()
    print(f"{cpuinfo()['model']}, {threads} thread{'s' * (threads != 1)} (TUNESEARCH_THREADS), "
          f"native {keys['native']}, {args.other_isa} "
          f"{keys[args.other_isa]}; budget B = {args.budget:g} s; each side the median of "
          f"{args.processes} processes, each the median of {args.repeat} calls\n", flush=True)
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench_warm_") as scratch:
        folder = args.keep or scratch
        for name in args.models:
            row = run_model(name, args.budget, args.other_isa, args.processes, args.repeat,
                            Path(folder))
            report(row, args.budget, args.other_isa)
    return 0


if __name__ == "__main__":
    sys.exit(main())
