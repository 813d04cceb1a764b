"""Run the ONNX backend node tests for the supported operators through tunesearch.

    python scripts/onnx_node_tests.py                    # every operator, reference device
    python scripts/onnx_node_tests.py --device cpu       # through compiled kernels (slow: compiles)
    python scripts/onnx_node_tests.py --ops Conv MaxPool --failures

The test cases come from the onnx package itself (onnx.backend.test.case.node, the same models and
data that `python -m onnx.backend.test.cmd_tools generate-data` writes). A case passes when every
output has the expected shape and matches within the case's own tolerances (rtol, atol). Cases
named *_expanded are the operator written as its function body (other, smaller operators); they
count toward the operator they expand. Prints a markdown table: pass rate per operator and overall.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# every operator the importer implements (tunesearch.onnx.supported_operators(), which a test
# checks against this list)
OPERATORS = (
    "Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Reciprocal Relu "
    "LeakyRelu Sigmoid Tanh Erf Gelu Clip Softmax LogSoftmax BatchNormalization "
    "InstanceNormalization LayerNormalization GroupNormalization MaxPool AveragePool "
    "GlobalAveragePool GlobalMaxPool Flatten Reshape Transpose Concat Split Slice Gather Squeeze "
    "Unsqueeze Expand Where Equal Less Greater Cast Shape Constant ConstantOfShape Identity "
    "Dropout ReduceMean ReduceSum ReduceMax ReduceMin Pad Resize LRN Sum Max Min "
    "And Or Xor Not LessOrEqual GreaterOrEqual CastLike Range Size Floor Ceil Sin Cos "
    "HardSigmoid HardSwish Softplus Softsign Elu Selu Sign Mod IsNaN IsInf Mean ArgMax ArgMin "
    "ReduceSumSquare ReduceL1 ReduceL2 ReduceLogSumExp GatherElements GatherND CumSum Trilu "
    "Upsample").split()
# element types tunesearch does not compute with: a case that has one is outside the float and
# integer cases the pass rate is counted over
OUTSIDE = ("STRING", "BFLOAT16", "FLOAT8", "FLOAT4", "INT4", "UINT4", "INT2", "UINT2",
           "optional", "sequence")


@dataclass(frozen=True)
class Outcome:
    name: str
    operator: str
    status: str      # "pass", "fail" (wrong values or shapes), "unsupported", "error"
    detail: str = ""
    numeric: bool = True  # every value a float, integer or bool tensor tunesearch computes with


def numeric_case(case) -> bool:
    """Whether every input and output of the case's graph and node is a float, integer or bool
    tensor of a type tunesearch computes with (not strings, 8-bit floats, 4-bit ints, ...)."""
    from onnx import TensorProto
    graph = case.model.graph
    for value in list(graph.input) + list(graph.output):
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            return False
        name = TensorProto.DataType.Name(value.type.tensor_type.elem_type)
        if any(name.startswith(t) for t in OUTSIDE):
            return False
    for node in graph.node:
        for attr in node.attribute:  # a cast to such a type
            if attr.name == "to" and attr.type == attr.INT and \
                    any(TensorProto.DataType.Name(attr.i).startswith(t) for t in OUTSIDE):
                return False
    return True


def node_cases(operators=OPERATORS) -> list[tuple[str, object]]:
    """(operator, onnx TestCase) for every node test of the given operators, sorted by name."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases = [c for c in collect_testcases() if c.model is not None]
    single = {c.name: c.model.graph.node[0].op_type for c in cases
              if len(c.model.graph.node) == 1}
    out = []
    for case in cases:
        base = case.name.split("_expanded")[0]
        op = single.get(case.name) or single.get(base)
        if op in operators:
            out.append((op, case))
    return sorted(out, key=lambda pair: pair[1].name)


def _array(value) -> np.ndarray:
    import onnx
    from onnx import numpy_helper
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def known_inputs(model) -> set[str]:
    """Graph inputs that feed an input the importer needs known at import (a shape, axes, pads):
    the node tests feed those as data, a model file carries them as initializers."""
    from tunesearch.onnx import OPS
    names = set()
    for node in model.graph.node:
        spec = OPS.get(node.op_type)
        for index in spec.known_inputs if spec else ():
            if index < len(node.input) and node.input[index]:
                names.add(node.input[index])
    return names


def with_initializers(model, values: dict[str, np.ndarray]):
    """A copy of model with the given inputs turned into initializers."""
    import onnx
    from onnx import numpy_helper
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [v for v in model.graph.input if v.name not in values]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(a), name)
                                   for name, a in values.items())
    return model


def run_case(op: str, case, device: str) -> Outcome:
    from dataclasses import replace
    outcome = _run_case(op, case, device)
    return replace(outcome, numeric=numeric_case(case))


def _run_case(op: str, case, device: str) -> Outcome:
    import tunesearch.onnx as tox
    try:
        graph_inputs = [v.name for v in case.model.graph.input]
        frozen = known_inputs(case.model) & set(graph_inputs)
        for inputs, expected in case.data_sets:
            arrays = dict(zip(graph_inputs, [_array(v) for v in inputs]))
            model = tox.load(with_initializers(case.model, {k: arrays[k] for k in frozen}),
                             device=device)
            feeds = {v.name: arrays[v.name] for v in model.inputs}
            with np.errstate(all="ignore"):
                got = model(feeds)
            for info, want in zip(model.outputs, expected):
                have, want = got[info.name], _array(want)
                if have.shape != want.shape:
                    return Outcome(case.name, op, "fail", f"{info.name}: shape {have.shape}, "
                                   f"expected {want.shape}")
                if want.dtype.kind in "fc":
                    ok = np.allclose(have.astype(np.float64), want.astype(np.float64),
                                     rtol=case.rtol, atol=case.atol, equal_nan=True)
                else:
                    ok = np.array_equal(have, want)
                if not ok:
                    return Outcome(case.name, op, "fail", f"{info.name}: values differ")
        return Outcome(case.name, op, "pass")
    except (tox.UnsupportedOperatorError, tox.UnsupportedTypeError) as exc:
        return Outcome(case.name, op, "unsupported", str(exc))
    except Exception as exc:  # a case that breaks the importer is reported, not fatal
        return Outcome(case.name, op, "error", f"{type(exc).__name__}: {exc}".splitlines()[0])


def run(operators=OPERATORS, device: str = "reference", only=None) -> list[Outcome]:
    cases = node_cases(operators)
    if only is not None:
        cases = [(op, c) for op, c in cases if c.name in only]
    return [run_case(op, case, device) for op, case in cases]


def table(outcomes: list[Outcome]) -> str:
    by_op: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_op[o.operator].append(o)
    lines = ["| operator | cases | passed | failed | unsupported | pass rate |",
             "|---|---:|---:|---:|---:|---:|"]

    def row(label: str, items: list[Outcome], bold: bool = False) -> str:
        counts = [sum(o.status == s for o in items) for s in ("pass", "fail", "unsupported")]
        counts[1] += sum(o.status == "error" for o in items)
        cells = [label, str(len(items)), *map(str, counts),
                 f"{100 * counts[0] / max(len(items), 1):.{1 if bold else 0}f}%"]
        return "| " + " | ".join(f"**{c}**" if bold else c for c in cells) + " |"
    lines += [row(op, by_op[op]) for op in sorted(by_op)]
    lines.append(row("all", outcomes, bold=True))
    lines.append(row("float and integer", [o for o in outcomes if o.numeric], bold=True))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="reference")
    parser.add_argument("--ops", nargs="*", default=list(OPERATORS))
    parser.add_argument("--failures", action="store_true", help="list every case that failed")
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = run(args.ops, args.device)
    print(table(outcomes))
    print(f"\n{len(outcomes)} node tests on {args.device} in {time.perf_counter() - start:.0f} s")
    if args.failures:
        print()
        for o in outcomes:
            if o.status != "pass":
                print(f"- {o.name} ({o.operator}): {o.status}: {o.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
