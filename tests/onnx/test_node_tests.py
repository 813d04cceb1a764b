"""The ONNX backend node tests of the supported operators (scripts/onnx_node_tests.py prints the
table), run through the importer on the reference device."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "onnx_node_tests.py"
# measured: how many cases of each operator pass; a change that breaks one fails this test
MIN_PASSED = {
    "Abs": 1, "Add": 8, "AveragePool": 20, "BatchNormalization": 2, "Cast": 16, "Clip": 22,
    "Concat": 12, "Constant": 1, "ConstantOfShape": 3, "Conv": 6, "ConvTranspose": 11, "Div": 10,
    "Dropout": 6, "Equal": 8, "Erf": 1, "Exp": 2, "Expand": 2, "Flatten": 9, "Gather": 4,
    "Gelu": 8, "Gemm": 11, "GlobalAveragePool": 2, "GlobalMaxPool": 2, "Greater": 8,
    "GroupNormalization": 4, "Identity": 3, "InstanceNormalization": 2, "LRN": 2,
    "LayerNormalization": 57, "LeakyRelu": 6, "Less": 8, "Log": 2, "LogSoftmax": 21, "MatMul": 7,
    "Max": 14, "MaxPool": 17, "Min": 14, "Mul": 9, "Neg": 2, "Pad": 6, "Pow": 12,
    "Reciprocal": 2, "ReduceMax": 9, "ReduceMean": 8, "ReduceMin": 9, "ReduceSum": 12, "Relu": 2,
    "Reshape": 9, "Resize": 15, "Shape": 11, "Sigmoid": 2, "Slice": 8, "Softmax": 21,
    "Split": 16, "Sqrt": 2, "Squeeze": 2, "Sub": 9, "Sum": 3, "Tanh": 2, "Transpose": 7,
    "Unsqueeze": 7, "Where": 2,
}
# zero-size tensors: reductions over an empty set, a reshape to a shape with a 0
KNOWN_FAILURES = {"test_reduce_max_empty_set", "test_reduce_max_empty_set_bool",
                  "test_reduce_min_empty_set", "test_reshape_allowzero_reordered"}


def _runner():
    spec = importlib.util.spec_from_file_location("onnx_node_tests", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def outcomes():
    runner = _runner()
    assert set(MIN_PASSED) == set(runner.OPERATORS)
    return runner.run(runner.OPERATORS, device="reference")


def test_node_tests_pass_per_operator(outcomes):
    passed = {op: 0 for op in MIN_PASSED}
    for o in outcomes:
        passed[o.operator] += o.status == "pass"
    failures = "\n".join(f"{o.name}: {o.status} {o.detail}" for o in outcomes
                         if o.status != "pass")
    short = {op: (n, MIN_PASSED[op]) for op, n in passed.items() if n < MIN_PASSED[op]}
    assert not short, f"passed (now, before) per operator: {short}\n{failures}"


def test_the_rest_is_refused_as_unsupported(outcomes):
    """Cases outside what the importer does (8-bit float types, Resize linear/cubic, training
    mode) are refused at import, never run to a wrong answer."""
    wrong = {o.name for o in outcomes if o.status in ("fail", "error")}
    assert wrong <= KNOWN_FAILURES, sorted(wrong - KNOWN_FAILURES)
    unsupported = [o for o in outcomes if o.status == "unsupported"]
    assert unsupported and all("unsupported" in o.detail for o in unsupported)


@pytest.fixture(scope="module")
def cpu_outcomes():
    runner = _runner()
    return runner.run(runner.OPERATORS, device="cpu")


def test_node_tests_pass_on_the_cpu_too(outcomes, cpu_outcomes):
    """The same cases through compiled C kernels: every case the reference device passes, the
    CPU passes, and the README's count holds (521 of 661)."""
    reference = {o.name for o in outcomes if o.status == "pass"}
    cpu = {o.name for o in cpu_outcomes if o.status == "pass"}
    assert reference <= cpu, sorted(reference - cpu)
    wrong = {o.name for o in cpu_outcomes if o.status in ("fail", "error")}
    assert wrong <= KNOWN_FAILURES, sorted(wrong - KNOWN_FAILURES)
    assert len(cpu) >= 521
