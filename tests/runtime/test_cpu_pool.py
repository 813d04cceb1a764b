"""The thread pool CPU kernels share their loops over (runtime/cpu_pool.py): every block of every
loop runs exactly once, whichever thread takes it; a loop entered while another runs, runs on its
caller; the pool is one per process however many kernels link it; its spin setting is checked.
A C harness linked to the device's pool counts each block's runs, over thousands of loops of
random sizes and teams, on a quiet machine and beside processes that keep both cores busy (where
workers are descheduled mid-loop and the caller takes their blocks), and with a grain, the
least a call is handed."""
from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
import threading

import pytest

from tunesearch.runtime.cpu import compiler
from tunesearch.runtime.device import Source, get_device
from tunesearch.settings import SettingError

HARNESS = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
void ts_parallel(long n, int threads, void (*body)(void*, long, long), void* ctx);
void ts_parallel_grain(long n, int threads, long grain, void (*body)(void*, long, long),
                       void* ctx);

/* with a grain, a call must end a thread's range of the static split (under some team of 1
   to `threads`) or end on a multiple of the grain, and one that starts on a multiple must have
   a grain of iterations or end a range; else it is counted as cut short */
static int ends_a_range(long n, int threads, long hi) {
  for (int team = 1; team <= threads; team++) {
    long q = n / team, extra = n % team;
    for (int t = 0; t < team; t++)
      if (t * q + (t < extra ? t : extra) + q + (t < extra) == hi) return 1;
  }
  return 0;
}

struct counts { _Atomic int* runs; pthread_t caller; _Atomic long others, short_calls;
                long n, grain; int threads; };
static void count(void* c, long lo, long hi) {
  struct counts* k = c;
  if (!pthread_equal(pthread_self(), k->caller)) k->others++;
  if (k->grain && !ends_a_range(k->n, k->threads, hi) &&
      (hi % k->grain || (lo % k->grain == 0 && hi - lo < k->grain)))
    k->short_calls++;
  for (long i = lo; i < hi; i++) atomic_fetch_add(&k->runs[i], 1);
}

/* loops of random sizes (1 to max_n blocks) and teams (1 to 4), through ts_parallel, or with
   max_grain through ts_parallel_grain with grains of 1 to max_grain; returns the number of
   blocks that ran other than once, and counts the calls threads other than the caller ran
   and the calls handed fewer iterations than the grain */
long run_loops(int loops, long max_n, unsigned seed, int max_grain, long* by_others,
               long* short_calls) {
  _Atomic int* runs = calloc(max_n, sizeof(int));
  long wrong = 0;
  *by_others = *short_calls = 0;
  for (int l = 0; l < loops; l++) {
    seed = seed * 1103515245u + 12345u;
    long n = 1 + (seed >> 8) % max_n;
    int threads = 1 + (seed >> 4) % 4;
    long grain = max_grain ? 1 + (seed >> 16) % max_grain : 0;
    struct counts k = {runs, pthread_self(), 0, 0, n, grain, threads};
    if (grain) ts_parallel_grain(n, threads, grain, count, &k);
    else ts_parallel(n, threads, count, &k);
    for (long i = 0; i < n; i++) {
      wrong += runs[i] != 1;
      runs[i] = 0;
    }
    *by_others += k.others;
    *short_calls += k.short_calls;
  }
  free(runs);
  return wrong;
}
"""


@pytest.fixture(scope="module")
def harness():
    device = get_device("cpu")
    if device.threads < 2:
        pytest.skip("one thread: the pool has no workers")
    path = device.compile(Source(HARNESS, "run_loops", "pool-harness"))
    lib = ctypes.CDLL(path.decode())
    lib.run_loops.restype = ctypes.c_long
    lib.run_loops.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_uint, ctypes.c_int,
                              ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_long)]
    return lib


@contextlib.contextmanager
def _busy(n: int):
    """n processes spinning on the CPU while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "print(1, flush=True)\nwhile True: pass"],
                                 stdout=subprocess.PIPE) for _ in range(n)]
    try:
        for process in spinners:
            process.stdout.readline()
        yield
    finally:
        for process in spinners:
            process.kill()
            process.wait()
            process.stdout.close()


def _run(harness, loops: int, max_n: int, seed: int, max_grain: int = 0
         ) -> tuple[int, int, int]:
    """(blocks run other than once, calls run by other threads, calls short of the grain)"""
    by_others, short_calls = ctypes.c_long(), ctypes.c_long()
    wrong = harness.run_loops(loops, max_n, seed, max_grain, ctypes.byref(by_others),
                              ctypes.byref(short_calls))
    return wrong, by_others.value, short_calls.value


def test_every_block_runs_once_on_a_quiet_machine(harness):
    wrong, by_others, _ = _run(harness, 4000, 300, 1)
    assert wrong == 0
    assert by_others > 0  # the workers took part


def test_every_block_runs_once_beside_processes_that_take_the_cores(harness):
    """Workers are descheduled in the middle of loops; the caller runs what they did not
    claim, and no block is lost or run twice."""
    with _busy(2):
        wrong, _, _ = _run(harness, 3000, 300, 2)
    assert wrong == 0


@pytest.mark.parametrize("busy", [0, 2])
def test_a_grain_hands_out_whole_outer_blocks(harness, busy):
    """A loop walked tile by tile (codegen/c_entry.py) is handed whole outer blocks (runs that
    end on a multiple of the grain, a grain or more from one), or what is left of a thread's
    range, quiet or with the cores taken; every block once."""
    with _busy(busy):
        wrong, _, short_calls = _run(harness, 2000, 300, 7 + busy, max_grain=12)
    assert wrong == 0 and short_calls == 0


def test_loops_entered_from_several_threads_at_once_each_run_whole(harness):
    """The pool runs one loop at a time: a thread that enters while another's runs does its
    loop alone, and both come out whole."""
    results = []

    def work(seed: int) -> None:
        results.append(_run(harness, 1500, 200, seed)[0])
    threads = [threading.Thread(target=work, args=(seed,)) for seed in (3, 4, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [0, 0, 0]


def test_kernels_link_the_one_pool_of_the_device_by_its_path():
    device = get_device("cpu")
    if "Free Software Foundation" not in subprocess.run(
            [compiler()[0], "--version"], capture_output=True, text=True).stdout:
        pytest.skip("ELF libraries from GCC are read")
    source = Source("void ts_parallel(long, int, void (*)(void*, long, long), void*);\n"
                    "static void f(void* c, long lo, long hi) {}\n"
                    "void k(void) { ts_parallel(4, 2, f, 0); }\n", "k", "pool-link")
    library = device.compile(source).decode()
    dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True)
    if dynamic.returncode != 0:
        pytest.skip("no readelf here")
    assert f"[{device._pool_path}]" in dynamic.stdout


def test_the_pools_spin_setting_is_checked(monkeypatch):
    from tunesearch import settings
    monkeypatch.setenv("TUNESEARCH_OMP_SPIN", "-5")
    with pytest.raises(SettingError, match="TUNESEARCH_OMP_SPIN"):
        settings.omp_spin()
    monkeypatch.setenv("TUNESEARCH_OMP_SPIN", str(1 << 40))
    with pytest.raises(SettingError, match="TUNESEARCH_OMP_SPIN"):
        settings.omp_spin()
    monkeypatch.setenv("TUNESEARCH_OMP_SPIN", "0")
    assert settings.omp_spin() == 0


def test_a_model_with_shared_loops_matches_numpy_with_workers_that_sleep_at_once(tmp_path):
    """Workers that sleep between loops (TUNESEARCH_OMP_SPIN=0) are woken for each one."""
    program = ("import numpy as np\nfrom tunesearch import Tensor\n"
               "a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)\n"
               "for _ in range(20):\n"
               "    got = (Tensor(a) @ Tensor(a)).relu().numpy()\n"
               "    np.testing.assert_allclose(got, np.maximum(a @ a, 0), rtol=1e-4, atol=1e-4)\n")
    env = {"TUNESEARCH_OMP_SPIN": "0", "TUNESEARCH_CACHE": str(tmp_path),
           "TUNESEARCH_NODB": "1", "TUNESEARCH_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
