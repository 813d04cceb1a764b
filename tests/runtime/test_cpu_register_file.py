"""A register block that fills the register file keeps its accumulators in registers through
the reduce: no FMA of the compiled block reads an operand from the stack. The case is a fire
module's 3x3 convolution written into its concatenation (48 -> 192 channels over 13x13): at
AVX2 its default block is 4x24, all 16 registers, and its epilogue adds a zero vector that
GCC's RTL loop-invariant motion held in a register through the reduce, which put an
accumulator on the stack. With a SiLU for epilogue, the sigmoid's dozen constants did the same
(the epilogue now runs in a function of its own).

It holds at every ISA level this CPU runs and under both tunings the device may compile with:
the one -march=native gives where the compiler knows the CPU, and the one the device picks
where it does not (the level's -march and the newest core of the vendor the compiler knows:
GCC 12 on Zen 5 resolves -march=native to "generic" tuning, which spilled the 3x3 block). The
unknown CPU is emulated by the compiler's answer ("generic"), the one GCC 12 gives on a CPU it
does not know (test_unknown_cpu.py runs its driver on one under qemu); the flags, the kernel
and its assembly are real. x86 and GCC only (the assembly is read); the output against
onnxruntime."""
from __future__ import annotations

import platform
import re
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tunesearch.onnx.model import load
from tunesearch.runtime import device as device_registry
from tunesearch.runtime import host_cpu, realize
from tunesearch.runtime.cpu import CPUDevice, compiler

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64")
    or "Free Software Foundation" not in subprocess.run(
        [compiler()[0], "--version"], capture_output=True, text=True).stdout,
    reason="x86 assembly from GCC")


def _fire_module(rng, activation: str = "relu"):
    weights = {"w1": (48, 64, 1, 1), "b1": (48,), "w2": (192, 48, 3, 3), "b2": (192,),
               "w3": (192, 48, 1, 1), "b3": (192,)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             *([helper.make_node("Relu", ["c2"], ["r2"])] if activation == "relu" else
               [helper.make_node("Sigmoid", ["c2"], ["s2"]),
                helper.make_node("Mul", ["c2", "s2"], ["r2"])]),
             helper.make_node("Conv", ["r1", "w3", "b3"], ["c3"]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Concat", ["r3", "r2"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 13, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 384, 13, 13])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# an arithmetic instruction that reads an operand from the stack: a spilled accumulator (at
# SSE4, without FMA, the multiply and the add read it)
SPILLED = re.compile(r"\b(v?fmadd\S*|v?mulps|v?addps)\s+-?\d*\(%r[sb]p\)")


@pytest.fixture
def cpu_at(monkeypatch):
    """A CPU device at an ISA level, on a CPU the compiler knows or (known=False) one whose
    -march=native it resolves to generic tuning; installed as the process's "cpu" device for
    the test, the programs built before and during it forgotten."""
    def make(level: str, known: bool) -> CPUDevice:
        monkeypatch.setenv("TUNESEARCH_CPU_ISA", level)
        if not known:
            monkeypatch.setattr(host_cpu, "native_cpu", lambda cc: "generic")
        device = CPUDevice()
        monkeypatch.setitem(device_registry._instances, "cpu", device)
        realize.clear_programs()
        return device
    yield make
    realize.clear_programs()


@pytest.mark.parametrize("activation", ["relu", "silu"])
@pytest.mark.parametrize("known", [True, False], ids=["known CPU", "CPU unknown to the compiler"])
@pytest.mark.parametrize("level", host_cpu.supported_levels())
def test_a_full_register_block_spills_no_accumulator(level, known, activation, cpu_at):
    device = cpu_at(level, known)
    if not known:  # the level's -march and a tuning the compiler knows, never generic
        assert f"-march={device.isa.march}" in device.flags or device.isa.march == "native"
        assert not any(f in ("-march=native", "-mtune=native", "-mtune=generic")
                       for f in device.flags), device.flags
    rng = np.random.default_rng(0)
    model = _fire_module(rng, activation)
    x = rng.standard_normal((1, 64, 13, 13)).astype(np.float32)
    m = load(model)
    arrays = m._arrays({"x": x})
    plan = m._plan({k: a.shape for k, a in arrays.items()})
    got = plan.run(arrays, trace=False)[0]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    step = max(plan.steps, key=lambda s: s.kernel.flops)
    assert step.kernel.domain[-1] == 144  # the 3x3 convolution: 48 channels x 9 taps summed
    cc, _ = compiler()
    flags = [f for f in device.flags if f != "-shared"]
    asm = subprocess.run([cc, *flags, "-S", "-x", "c", "-", "-o", "-"],
                         input=step.program.source.text, capture_output=True, text=True,
                         check=True).stdout
    if activation == "silu":  # its epilogue runs apart, reading the sums from the stack
        assert "_epilogue(" in step.program.source.text
    spilled = [line for line in _outside_epilogues(asm) if SPILLED.search(line)]
    assert not spilled, (device.flags, step.choice.config, spilled)


def _outside_epilogues(asm: str, *others: str) -> list[str]:
    """The assembly's lines outside the functions that run a block's epilogue (their operands
    are the block's sums, handed over on the stack), and outside those named with any of
    others."""
    lines, inside = [], False
    for line in asm.splitlines():
        label = re.match(r"^([\w.]+):", line)
        if label and not label.group(1).startswith("."):
            inside = any(part in label.group(1) for part in ("_epilogue", *others))
        if not inside:
            lines.append(line)
    return lines


# an arithmetic instruction that reads a vector from memory (not a broadcast, not the stack)
RELOADED = re.compile(r"\b(v?fmadd\S*|v?mulps)\s+-?\d*\(%r(?![sb]p)\w+(?:,%r\w+(?:,\d)?)?\)"
                      r"(?!\{1to)")


def _matmul_model(m: int, k: int, n: int):
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [k, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(68, 68, 200), (3136, 64, 64)], ids=["68x68x200", "3136x64x64"])
@pytest.mark.parametrize("known", [True, False], ids=["known CPU", "CPU unknown to the compiler"])
@pytest.mark.parametrize("level", host_cpu.supported_levels())
def test_a_full_register_block_reads_each_column_vector_once_a_step(level, known, sizes, threads,
                                                                    cpu_at, monkeypatch):
    """The block's column vectors are loaded once per step of the reduce and used by every
    row: no FMA of the block loop reads its vector from memory (GCC left them there, an
    operand of each row's FMA, four loads of each where one would do, when the block loops
    were nested; a third slower on AVX2's 4x24 block). Tails (fewer rows, each vector used
    once) and epilogues are not the block loop. Sizes: a matmul whose columns end in a tail
    block, a 1x1 convolution's (positions x channels), the form of resnet50's first."""
    monkeypatch.setenv("TUNESEARCH_THREADS", str(threads))
    device = cpu_at(level, known)
    rng = np.random.default_rng(0)
    model = _matmul_model(*sizes)
    feeds = {"x": rng.standard_normal(sizes[:2]).astype(np.float32),
             "w": rng.standard_normal(sizes[1:]).astype(np.float32)}
    m = load(model)
    arrays = m._arrays(feeds)
    plan = m._plan({k: a.shape for k, a in arrays.items()})
    got = plan.run(arrays, trace=False)[0]
    np.testing.assert_allclose(got, feeds["x"] @ feeds["w"], rtol=1e-4, atol=1e-4)
    step = plan.steps[-1]
    cc, _ = compiler()
    flags = [f for f in device.flags if f != "-shared"]
    asm = subprocess.run([cc, *flags, "-S", "-x", "c", "-", "-o", "-"],
                         input=step.program.source.text, capture_output=True, text=True,
                         check=True).stdout
    reloaded = [line for line in _outside_epilogues(asm, "_tail") if RELOADED.search(line)]
    assert not reloaded, (device.flags, step.choice.config, reloaded)
