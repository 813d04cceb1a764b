"""The CPU kernels' own sqrt, exp2 and log2 (codegen/c_support.VECTOR_MATH, inline so that
they vectorize) against numpy: sqrt exact, exp2 within 1 ulp and log2 within 3 of float64, over
the whole float range, with libm's special values, and vectorized where the kernel's lane loop
is."""
from __future__ import annotations

import numpy as np

from tunesearch import Tensor

RNG = np.random.default_rng(11)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))


def _same_specials(got, want):
    special = ~np.isfinite(want)
    assert np.array_equal(np.isnan(got[special]), np.isnan(want[special]))
    assert np.array_equal(got[special & ~np.isnan(want)], want[special & ~np.isnan(want)])


def _check(op: str, x: np.ndarray, max_ulps: int) -> None:
    """The CPU kernel's op against numpy's in float64: within max_ulps where finite, libm's
    special values elsewhere."""
    got = getattr(Tensor(x, device="cpu"), op)().numpy()
    with np.errstate(all="ignore"):
        want = getattr(np, op)(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want)
    assert _ulps(got[finite], want[finite]).max() <= max_ulps
    _same_specials(got, want)


def test_exp2_within_one_ulp_everywhere():
    edges = [0, -0.0, 1, -1, 0.5, -0.5, 127.99, 128, 128.5, -126, -126.5, -149, -149.5, -150,
             -151, -1e4, 1e4, np.inf, -np.inf, np.nan]
    x = np.concatenate([RNG.uniform(-160, 140, 100000), RNG.uniform(-1, 1, 50000),
                        edges]).astype(np.float32)
    _check("exp2", x, 1)


def test_log2_within_three_ulps_everywhere():
    magnitudes = 10.0 ** RNG.uniform(-45, 38.5, 100000)
    edges = [0, -0.0, -1, 1, 2, 0.5, np.inf, -np.inf, np.nan, 1e-45, 1.4e-45, 1.17e-38, 3.4e38,
             0.70710677, 1.4142135, 1.4142137, -1e-40]
    x = np.concatenate([magnitudes, RNG.uniform(0.5, 2, 50000), edges]).astype(np.float32)
    _check("log2", x, 3)


def test_exp2_and_log2_vectorize():
    """No call to libm's exp2f or log2f is left: the lane loop computes them in vector
    registers (the kernel's source and its compiled code, disassembled where objdump is)."""
    import platform
    import shutil
    import subprocess
    from tunesearch.graph.schedule import create_schedule
    from tunesearch.runtime.device import get_device
    from tunesearch.runtime.lookup import TunedConfigs
    device = get_device("cpu")
    x = Tensor(RNG.standard_normal(4096).astype(np.float32), device="cpu")
    kernel = create_schedule([(x.exp2() + x.abs().log2()).node])[-1].kernel
    config = TunedConfigs.defaults().choose(kernel, device).config
    source = device.render(kernel, config)
    assert "ts_exp2f(" in source.text and "ts_log2f(" in source.text
    if shutil.which("objdump") and platform.machine() in ("x86_64", "AMD64"):
        library = device.compile(source).decode()
        dump = subprocess.run(["objdump", "-d", library], capture_output=True, text=True).stdout
        assert "exp2f" not in dump and "log2f" not in dump
        # exp2's rint, on packed lanes (scalar code has roundss, or AVX-512's vrndscaless)
        assert "roundps" in dump or "vrndscaleps" in dump


def test_sqrt_is_ieee_and_vectorizes():
    """sqrt exact (IEEE) with NaN for a negative input and -0 kept, and no call left behind
    it: without its negative inputs made NaN explicitly, GCC keeps libm's sqrtf (for errno)
    and vectorizes no loop that holds one."""
    import platform
    import shutil
    import subprocess
    from tunesearch.graph.schedule import create_schedule
    from tunesearch.runtime.device import get_device
    from tunesearch.runtime.lookup import TunedConfigs
    edges = [0, -0.0, -1, 1, 2, np.inf, -np.inf, np.nan, 1e-45, 3.4e38]
    x = np.concatenate([10.0 ** RNG.uniform(-45, 38.5, 20000), edges]).astype(np.float32)
    got = Tensor(x, device="cpu").sqrt().numpy()
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.signbit(got[np.flatnonzero(np.signbit(x) & (x == 0))]).all()
    device = get_device("cpu")
    t = Tensor(RNG.standard_normal(4096).astype(np.float32), device="cpu")
    kernel = create_schedule([(t * t).sqrt().node])[-1].kernel
    source = device.render(kernel, TunedConfigs.defaults().choose(kernel, device).config)
    assert "ts_sqrtf(" in source.text
    if shutil.which("objdump") and platform.machine() in ("x86_64", "AMD64"):
        dump = subprocess.run(["objdump", "-d", device.compile(source).decode()],
                              capture_output=True, text=True).stdout
        assert "sqrtf@plt" not in dump and "sqrtps" in dump


def test_sigmoid_in_one_function_keeps_exp2s_accuracy():
    """A sigmoid (1 / (1 + 2^x) in the graph) runs as one function (ts_recip_1_exp2f) that
    scales once and tests no NaN: relative error within a few ulps plus the rounding of
    -x * log2(e), which the graph has either way; 0, 1 and NaN where numpy has them, and below
    float's normal range an error under 2^-126."""
    from tunesearch.graph.schedule import create_schedule
    from tunesearch.runtime.device import get_device
    from tunesearch.runtime.lookup import TunedConfigs
    edges = [0, -0.0, 1, -1, 80, -80, 87, -87, 88, -88, 89, -89, 104, -104, 200, -200, 1e30,
             -1e30, np.inf, -np.inf, np.nan]
    x = np.concatenate([RNG.uniform(-110, 110, 100000), RNG.uniform(-4, 4, 50000),
                        edges]).astype(np.float32)
    t = Tensor(x, device="cpu")
    got = t.sigmoid().numpy()
    with np.errstate(all="ignore"):
        want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert np.array_equal(np.isnan(got), np.isnan(x))
    normal = want >= 2.0 ** -126
    relative = np.abs(got[normal] - want[normal]) / want[normal]
    assert (relative <= (8 + 2 * np.abs(x[normal])) * 2.0 ** -24).all(), relative.max()
    assert (np.abs(got[~normal & ~np.isnan(x)]) <= 2.0 ** -126).all()
    assert got[x == np.inf][0] == 1.0 and got[x == -np.inf][0] == 0.0
    device = get_device("cpu")
    kernel = create_schedule([t.sigmoid().node])[-1].kernel
    source = device.render(kernel, TunedConfigs.defaults().choose(kernel, device).config)
    assert "ts_recip_1_exp2f(" in source.text
