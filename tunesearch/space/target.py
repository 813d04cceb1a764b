"""What the space needs to know about a device: its family and its limits."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    family: str                 # "cpu" or "gpu"
    threads: int = 1            # CPU: hardware threads to share work over
    vector_bytes: int = 32      # CPU: widest SIMD register
    max_local_size: int = 1024  # GPU: work-items per work-group
    max_local_dims: tuple[int, ...] = (1024, 1024, 64)
    local_memory: int = 48 * 1024  # GPU: bytes of local/shared memory per work-group
    max_registers: int = 255    # GPU: a rough cap on accumulators per work-item
    warp: int = 32              # GPU: SIMD width of the scheduler
    compute_units: int = 1
