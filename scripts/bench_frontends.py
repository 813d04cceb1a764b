"""The same convolutions through both front ends: `Tensor.conv2d` in a traced Tensor program and
a one-node ONNX model, untuned, each timed in its own block of runs, several processes.

    python scripts/bench_frontends.py                    # the four resnet-like convolutions
    python scripts/bench_frontends.py --processes 5 --repeat 30 --threads 1

Prints a markdown table: per convolution the median process's median call of each front end,
their ratio (Tensor over ONNX: 1.00 is the same speed), and whether both ran the same kernels
(the same kernel keys in the same order). Both use the default configs (TUNESEARCH_NODB=1).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (name, in channels, out channels, map size, kernel size)
CONVS = [("3x3 64->64 56x56", 64, 64, 56, 3), ("3x3 128->128 28x28", 128, 128, 28, 3),
         ("3x3 256->256 14x14", 256, 256, 14, 3), ("1x1 64->256 56x56", 64, 256, 56, 1)]


def _one_process(repeat: int) -> dict:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import tunesearch.onnx as tox
    from tunesearch import Tensor, traced

    results = {}
    rng = np.random.default_rng(0)
    for name, cin, cout, size, k in CONVS:
        x = rng.standard_normal((1, cin, size, size), dtype=np.float32)
        w = rng.standard_normal((cout, cin, k, k), dtype=np.float32) * 0.05
        b = rng.standard_normal(cout, dtype=np.float32)
        pad = k // 2
        graph = helper.make_graph(
            [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[pad] * 4)], "conv",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
        model = tox.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
        weight, bias = Tensor(w), Tensor(b)
        program = traced(lambda t: t.conv2d(weight, bias, padding=pad))
        want = model(x=x)["y"]
        got = program(x)
        assert np.allclose(got, np.asarray(want), rtol=1e-3, atol=1e-3), name
        same = [i.kernel.key for i in program.plan(x).items] == \
            [i.kernel.key for i in model._plan({"x": x.shape}).items]
        times = {}
        for label, call in (("onnx", lambda: model(x=x)), ("tensor", lambda: program(x))):
            for _ in range(3):
                call()
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
            times[label] = statistics.median(samples)
        results[name] = {**times, "same": same}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_one_process(args.repeat)))
        return
    env = dict(os.environ, TUNESEARCH_NODB="1")
    if args.threads:
        env["TUNESEARCH_THREADS"] = str(args.threads)
    runs = []
    for _ in range(args.processes):
        out = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat)],
                             env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    sys.path.insert(0, os.path.dirname(__file__))
    from isa_level import describe
    os.environ.setdefault("TUNESEARCH_CPU_ISA", os.environ.get("TUNESEARCH_CPU_ISA", "native"))
    print(describe())
    print(f"threads: {args.threads or 'default'}; {args.processes} processes x {args.repeat} "
          "calls\n")
    print("| convolution | ONNX ms | Tensor ms | Tensor / ONNX | same kernels |")
    print("|---|---|---|---|---|")
    for name, *_ in CONVS:
        onnx_ms = statistics.median(r[name]["onnx"] for r in runs) * 1e3
        tensor_ms = statistics.median(r[name]["tensor"] for r in runs) * 1e3
        same = all(r[name]["same"] for r in runs)
        print(f"| {name} | {onnx_ms:.3f} | {tensor_ms:.3f} | {tensor_ms / onnx_ms:.2f} | "
              f"{'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
