"""Run catalogue kernels under many CPU configs with every buffer against an inaccessible page.

    python -m tests.guard_pages [--o3-only]   # exit 0: all outputs right; killed by SIGSEGV:
                                              # a config read or wrote past a buffer's edge
                                              # (the last line printed names it)

Each buffer is placed twice: ending just before a PROT_NONE page, then starting just after one.
The configs compile at -O0 (the loop nest as written) and the first few again at -O3, where the
vectorizer could turn a guarded read into a wide one. Run in a child process by
tests/runtime/test_cpu_conformance.py, since the failure is a crash.
"""
from __future__ import annotations

import ctypes
import mmap
import sys
import tempfile
from pathlib import Path

import numpy as np

from tests.catalogue import catalogue, random_inputs
from tests.conformance import (build_cpu_library, call_config, k_tiled_configs, output_error,
                               sample_configs, tolerance)
from tunesearch.runtime.device import get_device
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space.spaces import space_for

PAGE = mmap.PAGESIZE
O3_CONFIGS = 4
PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_keep: list[mmap.mmap] = []


def guarded(array: np.ndarray, at_end: bool) -> np.ndarray:
    """A copy of array whose bytes end (or start) exactly at an inaccessible page."""
    nbytes = max(array.nbytes, 1)
    pages = -(-nbytes // PAGE)
    region = mmap.mmap(-1, (pages + 1) * PAGE)
    _keep.append(region)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    guard = base + (pages * PAGE if at_end else 0)
    if _libc.mprotect(ctypes.c_void_p(guard), PAGE, PROT_NONE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = pages * PAGE - array.nbytes if at_end else PAGE
    out = np.frombuffer(region, array.dtype, array.size, offset)
    out[...] = array
    return out


def main(o3_only: bool = False) -> int:
    """o3_only: only the configs compiled at -O3 (another ISA level's vectorized code; the
    loop nest at -O0 is the same on every level)."""
    target = get_device("cpu").info().target
    checked = 0
    with tempfile.TemporaryDirectory() as folder:
        for name, kernel in catalogue():
            space = space_for(kernel, target)
            configs = sample_configs(space, 24, seed=7 + len(name))
            if kernel.n_reduce and kernel.domain[kernel.n_out] >= 3:
                configs += [c for c in k_tiled_configs(kernel, 9, seed=len(name))
                            if c not in configs]
            inputs = random_inputs(kernel, seed=2)
            expected = run_kernel(kernel, inputs)
            out_spec = kernel.buffers[0]
            builds = [("-O0", configs)] if not o3_only else []
            for opt, chosen in builds + [("-O3", configs[:O3_CONFIGS])]:
                lib = build_cpu_library(kernel, chosen, Path(folder), opt)
                for at_end in (True, False):
                    args = [guarded(a, at_end) for a in inputs]
                    for i, config in enumerate(chosen):
                        print(f"{name} {opt} {'end' if at_end else 'start'} {config}", flush=True)
                        out = guarded(np.zeros(out_spec.size, out_spec.dtype.np), at_end)
                        call_config(lib, i, kernel, out, args)
                        err = output_error(out, expected)
                        if not err <= tolerance(kernel):
                            print(f"WRONG: error {err:.2e}", flush=True)
                            return 1
                        checked += 1
    print(f"{checked} configs checked", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(o3_only="--o3-only" in sys.argv[1:]))
