"""Building and running one scheduled kernel on the CPU device under a config: the default at a
thread count with some knobs changed, checked valid, run on the item's realized inputs."""
from __future__ import annotations

import dataclasses

import numpy as np

from tunesearch.runtime.device import get_device
from tunesearch.space.cpu_model import MAX_BLOCK_ROWS, registers_needed
from tunesearch.space.spaces import space_for

DEVICE = get_device("cpu")


def cpu_config(kernel, threads: int, **knobs):
    """The default config at `threads` (the outer loop shared where there are two or more),
    with knobs replaced; asserted valid."""
    space = space_for(kernel, dataclasses.replace(DEVICE.info().target, threads=threads))
    config = space.default().replace(threads=threads, parallel=1 if threads > 1 else 0,
                                     **knobs)
    assert space.validate(config) is None, space.validate(config)
    return config


def rows_that_fit(vectors: int) -> int:
    """The most rows of a register block `vectors` vectors wide whose accumulators, column
    vectors and broadcast fit this target's register file (cpu_model.registers_needed), at
    least one: a block sized by the machine the test runs on, not the one it was written on
    (5 x 80 and 4 x 96 at AVX-512; one row at AVX2, where no such block fits)."""
    registers = DEVICE.info().target.vector_registers
    return max([1] + [rows for rows in range(1, MAX_BLOCK_ROWS + 1)
                      if registers_needed(rows, vectors) <= registers])


def run_item(item, config) -> tuple[np.ndarray, object]:
    """The item's output under config, shaped, and the program that computed it."""
    kernel = item.kernel
    program = DEVICE.build(kernel, config)
    out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    program([out] + [node.realized for node in item.inputs])
    return DEVICE.copyout(out).reshape(kernel.out_shape), program
