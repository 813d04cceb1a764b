"""What the space needs to know about a device: its family and its limits.

For a CPU this is a model of the core the kernels run on: the vector ISA (width and number of
registers), the FMA pipes and their latency, the data caches (size, associativity, line) and
the cores. The default configs derive their register blocks and cache tiles from it
(space/cpu_model.py), so they follow the machine instead of the machine they were written on.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cache:
    """One level of data cache, as the core sees it."""
    size: int               # bytes
    ways: int = 8           # associativity
    line: int = 64          # bytes
    shared_by: int = 1      # cores sharing it


@dataclass(frozen=True)
class Target:
    family: str                 # its space family: "cpu", "gpu", "none" (spaces.SPACE_FAMILIES)
    threads: int = 1            # CPU: hardware threads to share work over
    vector_bytes: int = 32      # CPU: widest SIMD register
    vector_registers: int = 16  # CPU: SIMD registers the compiler may allocate
    fma_units: int = 2          # CPU: vector FMA pipes per core
    fma_latency: int = 4        # CPU: cycles before an FMA's result can feed the next
    fma: bool = True            # CPU: fused multiply-add (else a multiply into a temporary, an add)
    isa: str = ""               # CPU: ISA level the code is generated for (avx512, avx2, sse4...)
    l1d: Cache = Cache(32 << 10, 8)
    l2: Cache = Cache(512 << 10, 8)
    l3: Cache = Cache(8 << 20, 16, shared_by=8)
    cores: int = 1              # CPU: physical cores of the machine
    ghz: float = 2.5            # CPU: core clock
    fork_join_s: float = 5e-6   # CPU: measured cost of starting and ending a parallel loop
    max_local_size: int = 1024  # GPU: work-items per work-group
    max_local_dims: tuple[int, ...] = (1024, 1024, 64)
    local_memory: int = 48 * 1024  # GPU: bytes of local/shared memory per work-group
    max_registers: int = 255    # GPU: a rough cap on accumulators per work-item
    warp: int = 32              # GPU: SIMD width of the scheduler
    compute_units: int = 1

    def lanes(self, itemsize: int = 4) -> int:
        """Elements of itemsize bytes in one vector register."""
        return max(1, self.vector_bytes // itemsize)
