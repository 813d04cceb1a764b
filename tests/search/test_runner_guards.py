"""The runner process fences every CPU buffer: hand-written kernels that touch memory they do not
own are caught (a fault, or the canary), the runner starts again cleanly, and an output that
changes between runs is caught even when a slow candidate is timed only once."""
from __future__ import annotations

import numpy as np
import pytest

from tunesearch.runtime.device import Source, get_device
from tunesearch.search._runner_child import guard_values
from tunesearch.search.messages import DeviceSpec, RunRequest, RunSetup, Timing
from tunesearch.search.runner import ProcessRunner

TEMPLATE = """
static int calls = 0;
void k(float* restrict out, const float* restrict in) {
  for (int i = 0; i < %(n)d; i++) out[i] = in[i] * 2.0f;
  %(fault)s
  calls++;
}
"""
FAULTS = {
    "past the end": "((volatile float*)out)[%(n)d] = 1.0f;",
    "before the start": "((volatile float*)out)[-1] = 1.0f;",
    "into the input": "((volatile float*)in)[0] = 1.0f;",
    "reading past the input": "out[0] = ((volatile const float*)in)[%(n)d];",
    "far past the end": "((volatile float*)out)[%(n)d + 5000] = 1.0f;",
}


def _build(n: int, fault: str = "") -> tuple[bytes, Source]:
    device = get_device("cpu")
    source = Source(TEMPLATE % {"n": n, "fault": fault % {"n": n}}, "k", f"guards{n}", 2)
    return device.compile(source), source


def _request(built: tuple[bytes, Source], timing: Timing = Timing(),
             timeout_s: float = 30.0) -> RunRequest:
    return RunRequest(*built, timing, timeout_s)


def _runner(n: int) -> tuple[ProcessRunner, np.ndarray]:
    runner = ProcessRunner(DeviceSpec.of("cpu"))
    inputs = (np.linspace(-1.0, 1.0, n, dtype=np.float32),)
    runner.load(RunSetup(f"guards{n}", ((n, "float32"), (n, "float32")), inputs,
                         np.full(n, np.nan, np.float32), guard_values("float32", 64)))
    return runner, inputs[0] * 2.0


# 64 floats leave most of their page in front of them (the canary); 1024 fill it exactly, so
# the front guard page is right before the first element
@pytest.mark.parametrize("n", [64, 1024])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_kernel_touching_memory_it_does_not_own_is_caught(n, fault):
    runner, expected = _runner(n)
    good = _build(n)
    try:
        result = runner.run(_request(_build(n, FAULTS[fault])))
        if not result.ok:
            assert result.error == "crash" and "SIGSEGV" in result.message, result
        else:  # it did not fault: the canary in front of the output says what happened
            assert fault == "before the start" and n == 64, result
            assert "before the start of its output" in result.violation
        for _ in range(2):  # the runner starts again, and the canary is written afresh
            result = runner.run(_request(good))
            assert (result.error, result.violation, result.changed) == (None, None, None)
            np.testing.assert_array_equal(result.first, expected)
    finally:
        runner.close()


def test_an_output_that_changes_between_runs_is_caught_when_timed_once():
    runner, expected = _runner(64)
    try:
        changing = _build(64, "if (calls > 0) out[3] += 1.0f;")
        # a cutoff below any run: the candidate is far too slow, and timed once
        result = runner.run(_request(changing, Timing(cutoff_s=1e-12)))
        assert result.ok and len(result.times) == 1 and result.violation is None
        np.testing.assert_array_equal(result.first, expected)  # the first run was right
        assert result.changed is not None and result.changed[3] == expected[3] + 1.0
    finally:
        runner.close()


CL_TEMPLATE = """
__kernel void k(__global float* out, __global const float* in) {
  int i = get_global_id(0);
  out[i] = in[i] * 2.0f;
  if (i == 0) { %s }
}
"""
CL_FAULTS = {"past the end": ("out[64] = 1.0f;", "wrote past the end of its output"),
             "into the input": ("((__global float*)in)[5] = 7.0f;",
                                "wrote into its input buffer 1")}


@pytest.mark.parametrize("fault", list(CL_FAULTS))
def test_a_device_without_guard_pages_checks_canary_and_inputs(fault):
    """OpenCL buffers are not host memory: the canary after the output and a comparison of the
    inputs catch a stray write, and an input written is put back for the next candidate."""
    try:
        device = get_device("opencl")
        device.info()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no OpenCL device: {exc}")

    def build(body: str) -> tuple[bytes, Source]:
        source = Source(CL_TEMPLATE % body, "k", "guards-cl", 2, (64,), (16,))
        return device.compile(source), source

    runner = ProcessRunner(DeviceSpec.of("opencl"))
    inputs = (np.linspace(-1.0, 1.0, 64, dtype=np.float32),)
    runner.load(RunSetup("guards-cl", ((64, "float32"), (64, "float32")), inputs,
                         np.full(64, np.nan, np.float32), guard_values("float32", 64)))
    body, words = CL_FAULTS[fault]
    try:
        result = runner.run(_request(build(body), timeout_s=60.0))
        assert result.ok and words in result.violation, result
        result = runner.run(_request(build(""), timeout_s=60.0))
        assert (result.error, result.violation) == (None, None)
        np.testing.assert_array_equal(result.first, inputs[0] * 2.0)
    finally:
        runner.close()
