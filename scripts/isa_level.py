"""`--isa LEVEL` for the benchmarks: kernels generated for that ISA level (TUNESEARCH_CPU_ISA)
and numpy's OpenBLAS held to its kernel for the same level (OPENBLAS_CORETYPE), in this process
only. Import this module and call `apply()` before numpy is imported: OpenBLAS picks its kernel
when it loads.

    native   tunesearch -march=native; OpenBLAS picks by CPU (OPENBLAS_CORETYPE unset)
    avx512   x86-64-v4; OpenBLAS SkylakeX
    avx2     x86-64-v3; OpenBLAS Haswell
    sse4     x86-64-v2; OpenBLAS Nehalem (SSE kernels; OpenBLAS has no SSE4.2-only sgemm)
"""
from __future__ import annotations

import os
import sys

OPENBLAS_CORE = {"avx512": "SkylakeX", "avx2": "Haswell", "sse4": "Nehalem"}


def apply(argv: list[str] | None = None) -> str:
    """Read --isa from argv (default native) and set the environment for it."""
    argv = sys.argv[1:] if argv is None else argv
    level = "native"
    for i, arg in enumerate(argv):
        if arg == "--isa" and i + 1 < len(argv):
            level = argv[i + 1]
        elif arg.startswith("--isa="):
            level = arg.split("=", 1)[1]
    # a machine-wide OPENBLAS_CORETYPE/L2_SIZE (set on some machines for old OpenBLAS builds)
    # would hold numpy below what it does on the user's machine: both go, together
    os.environ.pop("OPENBLAS_CORETYPE", None)
    os.environ.pop("OPENBLAS_L2_SIZE", None)
    if level in OPENBLAS_CORE:
        os.environ["OPENBLAS_CORETYPE"] = OPENBLAS_CORE[level]
    os.environ["TUNESEARCH_CPU_ISA"] = level
    return level


def describe() -> str:
    """The CPU, the level and the model tunesearch uses, and the kernel OpenBLAS runs."""
    from threadpoolctl import threadpool_info

    from tunesearch.runtime.host_cpu import cpuinfo
    from tunesearch.runtime.device import get_device
    target = get_device("cpu").info().target
    blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                     for i in threadpool_info() if i.get("user_api") == "blas")
    return (f"CPU: {cpuinfo()['model']}; ISA level: {os.environ['TUNESEARCH_CPU_ISA']} "
            f"(model: {target.isa}, {target.vector_registers} registers of "
            f"{target.vector_bytes} bytes, L1d {target.l1d.size >> 10} KiB, "
            f"L2 {target.l2.size >> 10} KiB); numpy BLAS: {blas or 'unknown'}")
