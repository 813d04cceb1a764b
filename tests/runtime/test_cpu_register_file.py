"""A register block that fills the register file keeps its accumulators in registers through
the reduce: no FMA of the compiled block reads an operand from the stack. The case is a fire
module's 3x3 convolution written into its concatenation (48 -> 192 channels over 13x13): at
AVX2 its default block is 4x24, all 16 registers, and its epilogue adds a zero vector that
GCC's RTL loop-invariant motion held in a register through the reduce, which put an
accumulator on the stack. x86 and GCC only (the assembly is read); the output against
onnxruntime."""
from __future__ import annotations

import platform
import re
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tunesearch.onnx.model import load
from tunesearch.runtime.cpu import compiler
from tunesearch.runtime.device import get_device

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64")
    or "Free Software Foundation" not in subprocess.run(
        [compiler()[0], "--version"], capture_output=True, text=True).stdout,
    reason="x86 assembly from GCC")


def _fire_module(rng):
    weights = {"w1": (48, 64, 1, 1), "b1": (48,), "w2": (192, 48, 3, 3), "b2": (192,),
               "w3": (192, 48, 1, 1), "b3": (192,)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r1", "w3", "b3"], ["c3"]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Concat", ["r3", "r2"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 13, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 384, 13, 13])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_full_register_block_spills_no_accumulator():
    rng = np.random.default_rng(0)
    model = _fire_module(rng)
    x = rng.standard_normal((1, 64, 13, 13)).astype(np.float32)
    m = load(model)
    arrays = m._arrays({"x": x})
    plan = m._plan({k: a.shape for k, a in arrays.items()})
    got = plan.run(arrays, trace=False)[0]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    step = max(plan.steps, key=lambda s: s.kernel.flops)
    assert step.kernel.domain[-2:] == (3, 144), step.kernel.domain  # the 3x3 convolution
    cc, _ = compiler()
    flags = [f for f in get_device("cpu").flags if f != "-shared"]
    asm = subprocess.run([cc, *flags, "-S", "-x", "c", "-", "-o", "-"],
                         input=step.program.source.text, capture_output=True, text=True,
                         check=True).stdout
    spilled = [line for line in asm.splitlines()
               if re.search(r"vfmadd\S*\s+-?\d*\(%r[sb]p\)", line)]
    assert not spilled, (step.choice.config, spilled)
