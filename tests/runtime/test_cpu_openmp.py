"""The CPU device bounds how long idle OpenMP threads spin, before the OpenMP runtime starts:
checked through what libgomp itself reports (OMP_DISPLAY_ENV) in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tunesearch.runtime.cpu import compiler

PROGRAM = """
import numpy as np
from tunesearch import Tensor
a = Tensor(np.ones((64, 64), np.float32))
assert float((a @ a).numpy()[0, 0]) == 64.0
"""

pytestmark = pytest.mark.skipif("Free Software Foundation" not in subprocess.run(
    [compiler()[0], "--version"], capture_output=True, text=True).stdout,
    reason="the OpenMP settings are checked through GCC's libgomp")


def _openmp_env(tmp_path, **env) -> str:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
                         "TUNESEARCH_OMP_SPIN")}
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=300, env={**base, "OMP_DISPLAY_ENV": "VERBOSE",
                                            "TUNESEARCH_CACHE": str(tmp_path), **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def test_idle_threads_spin_briefly_by_default(tmp_path):
    assert "GOMP_SPINCOUNT = '10000'" in _openmp_env(tmp_path)


def test_spin_setting_and_passive_waiting(tmp_path):
    assert "GOMP_SPINCOUNT = '0'" in _openmp_env(tmp_path, TUNESEARCH_OMP_SPIN="0")
    assert "GOMP_SPINCOUNT = '50'" in _openmp_env(tmp_path, TUNESEARCH_OMP_SPIN="50")


def test_the_users_openmp_settings_are_kept(tmp_path):
    shown = _openmp_env(tmp_path, OMP_WAIT_POLICY="active")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in shown and "GOMP_SPINCOUNT = '10000'" not in shown
    shown = _openmp_env(tmp_path, TUNESEARCH_OMP_SPIN="openmp")
    assert "GOMP_SPINCOUNT = '10000'" not in shown
