"""What a candidate is checked against: seeded random inputs, the reference output, a tolerance.

Inputs are random, never zeros, so a kernel that skips work or reads the wrong element shows up:
floats uniform in [-1, 1), integers small and non-zero (no division by zero, no overflow in a
reduce), booleans random. The reference is the numpy interpreter's output on the same inputs.
"""
from __future__ import annotations

import math

import numpy as np

from tunesearch.graph.dtypes import DType
from tunesearch.graph.kernel import Kernel
from tunesearch.runtime.interpret import read_view, run_kernel

# rounding error of one operation per float dtype (the integer dtypes must match exactly)
EPSILON = {"float32": float(np.finfo(np.float32).eps), "float16": float(np.finfo(np.float16).eps)}
MAX_TOLERANCE = 0.05


def random_array(dtype: DType, size: int, rng: np.random.Generator) -> np.ndarray:
    """Random values of dtype, none of them zero (except booleans)."""
    if dtype.is_float:
        values = rng.uniform(-1.0, 1.0, size)
        values[values == 0] = 0.5
        return values.astype(dtype.np)
    if dtype.name == "bool":
        return rng.integers(0, 2, size).astype(np.bool_)
    magnitude = rng.integers(1, 8, size)
    sign = np.where(rng.integers(0, 2, size) == 1, 1, -1)
    return (magnitude * sign).astype(dtype.np)


def make_inputs(kernel: Kernel, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arrays for buffers 1..n of kernel."""
    rng = np.random.default_rng(seed)
    return [random_array(spec.dtype, spec.size, rng) for spec in kernel.buffers[1:]]


def reference_output(kernel: Kernel, inputs: list[np.ndarray]) -> np.ndarray:
    """The flat output the numpy interpreter computes."""
    return run_kernel(kernel, inputs)


def tolerance(kernel: Kernel) -> float:
    """Allowed error relative to the output's magnitude.

    Reordered sums (register blocks, partial sums, threads) round differently; the error of a
    sum of R terms grows about like sqrt(R) ulps, so the bound does too, with room for libm
    differences in transcendental ops. Integer and boolean outputs must match exactly.
    """
    dtype = kernel.buffers[0].dtype
    if dtype.name not in EPSILON:
        return 0.0
    reduce_length = math.prod(kernel.domain[kernel.n_out:]) if kernel.n_reduce else 1
    return min(MAX_TOLERANCE, EPSILON[dtype.name] * 16 * math.sqrt(reduce_length))


def written(kernel: Kernel) -> np.ndarray | None:
    """The elements of the output buffer the kernel writes, where that is not all of them (a
    piece of a concatenation writes its slice); None where it writes the whole buffer."""
    size = kernel.buffers[0].size
    if math.prod(kernel.out_shape) == size:
        return None
    box = tuple((0, s) for s in kernel.out_shape) + ((0, 1),) * kernel.n_reduce
    mask = np.zeros(size, np.bool_)
    mask[read_view(np.arange(size), kernel.out_view, box).reshape(-1)] = True
    return mask


def unwritten_fill(reference: np.ndarray, writes: np.ndarray | None = None) -> np.ndarray:
    """Initial output contents that differ from the reference at every element the kernel
    writes (`writes`, all where None), so a candidate that leaves one unwritten cannot pass;
    and equal to it at the others, so one that writes there (out of its slice) cannot."""
    if reference.dtype == np.bool_:
        fill = ~reference
    elif np.issubdtype(reference.dtype, np.floating):
        fill = np.full_like(reference, np.nan)
    else:
        fill = reference ^ np.asarray(0x55555555 & np.iinfo(reference.dtype).max,
                                      reference.dtype)
    if writes is not None:
        fill[~writes] = reference[~writes]
    return fill


def compare(output: np.ndarray, reference: np.ndarray, rel_tolerance: float
            ) -> tuple[bool, float, str]:
    """(matches, max |output - reference|, a message naming the worst element when it does not).

    Errors are measured against the output's magnitude (its largest |value|) as well as each
    element's own, so a sum that cancels to near zero is not held to a relative bound it cannot
    meet. NaN must be NaN and infinities must be equal where the reference has them.
    """
    if output.shape != reference.shape:
        return False, math.inf, f"output has {output.size} elements, expected {reference.size}"
    if rel_tolerance == 0.0:
        bad = output != reference
        diff = np.abs(output.astype(np.float64) - reference.astype(np.float64))
        max_error = float(diff.max()) if diff.size else 0.0
    else:
        out64, ref64 = output.astype(np.float64), reference.astype(np.float64)
        finite = np.isfinite(ref64)
        scale = float(np.abs(ref64[finite]).max()) if finite.any() else 0.0
        with np.errstate(invalid="ignore"):
            diff = np.abs(out64 - ref64)
            allowed = rel_tolerance * (np.abs(ref64) + scale) + np.finfo(np.float32).tiny
            same_special = (np.isnan(out64) & np.isnan(ref64)) | (out64 == ref64)
            bad = ~(same_special | (diff <= allowed))
        diff = np.where(same_special, 0.0, np.where(np.isnan(diff), np.inf, diff))
        max_error = float(diff.max()) if diff.size else 0.0
    if not bad.any():
        return True, max_error, ""
    worst = int(np.argmax(np.where(bad, diff, -1.0)))
    count = int(bad.sum())
    return False, max_error, (f"{count} of {output.size} outputs differ from the reference; "
                              f"element {worst} is {output[worst].item()!r}, expected "
                              f"{reference[worst].item()!r} (max error {max_error:.3g})")
