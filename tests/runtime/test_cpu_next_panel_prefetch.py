"""A weight's panel packed when the plan was built, one panel per block of the outer (column)
loop: each row block fetches its share of the next panel while it reads the current one
(codegen/prefetch.py). The kernel is compiled with every fetch recorded instead of issued,
and run: the fetches together cover every panel after the first (of every k tile after the first
with a k tile), stay on the panel, and the result still matches numpy. With a k tile and the
block loop shared, each thread walks its own blocks once per tile (codegen/c_entry.py), and
fetches its blocks' next tile."""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

from tests.runtime.cpu_items import DEVICE, cpu_config
from tunesearch import Tensor
from tunesearch.graph.schedule import create_schedule
from tunesearch.codegen.c import render_c

RECORD = """#include <stdint.h>
static uintptr_t ts_fetched[1 << 22];
static long ts_count;
long ts_fetches(uintptr_t* out, long cap) {
  long n = ts_count < cap ? ts_count : cap;
  for (long i = 0; i < n; i++) out[i] = ts_fetched[i];
  return ts_count;
}
static inline void ts_record(const void* p) {
  long i = __atomic_fetch_add(&ts_count, 1, __ATOMIC_RELAXED);
  if (i < (1 << 22)) ts_fetched[i] = (uintptr_t)p;
}
#define __builtin_prefetch(p, rw, hint) ts_record(p)
"""


def _matmul(rows=49, depth=300, cols=200):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, depth)).astype(np.float32)
    w = rng.standard_normal((depth, cols)).astype(np.float32)
    item = create_schedule([(Tensor(x) @ Tensor(w)).node])[-1]
    return item, x @ w


def _run_recorded(item, config):
    """(result, fetched byte offsets from the panel's start, panel bytes) of the kernel run
    with the panel of its weight packed ahead."""
    kernel = item.kernel
    inputs = [node.realized for node in item.inputs]
    program = DEVICE.build(kernel, config, frozenset({2}))
    assert "nx2" in program.source.text  # the device renders the fetch at its L2
    source = dataclasses.replace(program.source, text=RECORD + program.source.text)
    lib = ctypes.CDLL(DEVICE.compile(source).decode())
    panel = np.ascontiguousarray(DEVICE.prepack(kernel, config, 2, DEVICE.copyout(inputs[1])))
    x = np.ascontiguousarray(DEVICE.copyout(inputs[0]))
    out = np.zeros(kernel.buffers[0].size, np.float32)
    getattr(lib, source.entry)(*(ctypes.c_void_p(a.ctypes.data) for a in (out, x, panel)))
    cap = 1 << 22
    fetched = np.zeros(cap, np.uintp)
    lib.ts_fetches.restype = ctypes.c_long
    count = lib.ts_fetches(ctypes.c_void_p(fetched.ctypes.data), ctypes.c_long(cap))
    assert 0 < count <= cap
    offsets = fetched[:count].astype(np.int64) - panel.ctypes.data
    return out.reshape(kernel.out_shape), offsets, panel.nbytes


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("ktile", [0, 128])
def test_the_row_blocks_fetch_every_next_panel_between_them(ktile, threads):
    item, want = _matmul()
    kernel = item.kernel
    lanes = DEVICE.info().target.lanes()
    config = cpu_config(kernel, threads, upcast=(5, 2 * lanes), order=(1, 0), pack=(2,),
                        ktile=ktile, split=1)
    # two threads under a k tile: each walks its own blocks tile by tile
    walk = threads > 1 and ktile > 0
    assert ("ts_parallel_grain((long)" in DEVICE.build(kernel, config, frozenset({2})).source.text) \
        == walk
    got, offsets, nbytes = _run_recorded(item, config)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    depth, width = 300, 2 * lanes
    panel = depth * width * 4  # one column block's panel, whole reduce
    blocks = -(-200 // width)
    assert nbytes == blocks * panel
    # on the panel (a share rounded up may run a few bytes into the next)
    assert offsets.min() >= 0 and offsets.max() < nbytes + depth * 4 + 256
    lines = set((offsets // 64).tolist())
    if not ktile:  # every panel but the first, fetched while the one before it is read
        wanted = range(panel // 64, nbytes // 64)
    else:  # every block's k tile but the first one's first tile
        wanted = range(ktile * width * 4 // 64, nbytes // 64)
        wanted = [line for line in wanted if (line * 64) % panel >= ktile * width * 4
                  or line * 64 >= panel]
    missing = sorted(set(wanted) - lines)
    assert not missing, f"{len(missing)} lines never fetched, first {missing[:5]}"


def test_a_panel_too_large_for_l2_twice_or_one_block_per_thread_is_not_fetched():
    item, _ = _matmul()
    kernel = item.kernel
    lanes = DEVICE.info().target.lanes()
    config = cpu_config(kernel, 1, upcast=(5, 2 * lanes), order=(1, 0), pack=(2,), ktile=0,
                        split=1)
    panel = 300 * 2 * lanes * 4
    assert "nx2" in render_c(kernel, config, "k", lanes * 4, frozenset({2}), 2 * panel)
    assert "nx2" not in render_c(kernel, config, "k", lanes * 4, frozenset({2}), 2 * panel - 4)
    assert "nx2" not in render_c(kernel, config, "k", lanes * 4, frozenset(), 1 << 30)
    # rows outer: the column panels are walked inside every row block, nothing to fetch ahead
    rows_outer = config.replace(order=(0, 1))
    assert "nx2" not in render_c(kernel, rows_outer, "k", lanes * 4, frozenset({2}), 1 << 30)
    # as many threads as column blocks: each thread's next block is another thread's
    blocks = -(-200 // (2 * lanes))
    shared = cpu_config(kernel, blocks, upcast=(5, 2 * lanes), order=(1, 0), pack=(2,),
                        ktile=0, split=1)
    assert shared.get("parallel") >= 1
    assert "nx2" not in render_c(kernel, shared, "k", lanes * 4, frozenset({2}), 1 << 30)


def _loop_function_and_entry(source: str, entry: str) -> tuple[str, str]:
    """(the shared loop's outlined function, the entry point) of a kernel's C."""
    start = source.index(f"static void {entry}_loop0(")
    return source[start:source.index("\n}\n", start)], source[source.index(f"void {entry}("):]


@pytest.mark.parametrize("parallel", [1, 2])
def test_each_thread_walks_its_blocks_once_per_k_tile(parallel):
    """The tile loop runs inside the shared loop's function (no fork and join per tile) where
    the weight arrives packed; with the weight packed per tile in the call it stays around the
    shared loop, whose fills need every thread. Both match numpy, the last tile a short one."""
    item, want = _matmul(rows=49, depth=300, cols=200)
    kernel = item.kernel
    lanes = DEVICE.info().target.lanes()
    config = cpu_config(kernel, 2, upcast=(5, 2 * lanes), order=(1, 0), pack=(2,), ktile=128,
                        split=1).replace(parallel=parallel)
    program = DEVICE.build(kernel, config, frozenset({2}))
    function, entry = _loop_function_and_entry(program.source.text, program.source.entry)
    assert "for (int kt = 0; kt < 3; kt++)" in function and "kt <" not in entry
    assert "ts_parallel_grain((long)" in entry
    inputs = [node.realized for node in item.inputs]
    panel = DEVICE.prepack(kernel, config, 2, DEVICE.copyout(inputs[1]))
    packed = DEVICE.alloc(panel.size, kernel.buffers[2].dtype)
    DEVICE.copyin(packed, panel)
    out = DEVICE.alloc(kernel.buffers[0].size, kernel.buffers[0].dtype)
    for _ in range(2):  # the partial sums' scratch is reused by the second call
        program([out, inputs[0], packed])
        np.testing.assert_allclose(DEVICE.copyout(out).reshape(want.shape), want,
                                   rtol=1e-4, atol=1e-4)
    per_call = DEVICE.build(kernel, config)  # B packed per tile in the call
    function, entry = _loop_function_and_entry(per_call.source.text, per_call.source.entry)
    assert "kt <" not in function and "for (int kt = 0; kt < 3; kt++)" in entry
    per_call([out, *inputs])
    np.testing.assert_allclose(DEVICE.copyout(out).reshape(want.shape), want, rtol=1e-4,
                               atol=1e-4)
