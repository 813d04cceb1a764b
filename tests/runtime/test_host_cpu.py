"""This machine's CPU and its target model: ISA levels, the override, caches and cores."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tunesearch.runtime import host_cpu
from tunesearch.runtime.cpu import CPUDevice
from tunesearch.runtime.device import DeviceUnavailable

LEVELS = host_cpu.supported_levels()
X86 = host_cpu._is_x86()


def test_levels_follow_the_cpu_flags():
    if not X86:
        assert LEVELS == ["native"]
        return
    v3 = "avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 popcnt pni sse4_1 sse4_2 ssse3"
    assert host_cpu.supported_levels(v3) == ["native", "avx2", "sse4"]
    assert host_cpu.supported_levels("sse2 sse") == ["native"]
    v4 = v3 + " avx512f avx512bw avx512cd avx512dq avx512vl"
    assert host_cpu.supported_levels(v4) == ["native", "avx512", "avx2", "sse4"]
    name, level = host_cpu.resolve_level("native", v3)
    assert (name, level.name, level.vector_bytes, level.vector_registers) == \
        ("native", "avx2", 32, 16)
    assert host_cpu.resolve_level("avx512", v4)[1].vector_registers == 32


def test_a_level_the_cpu_cannot_run_is_refused_with_what_it_supports():
    with pytest.raises(host_cpu.IsaError, match="unknown ISA level"):
        host_cpu.resolve_level("avx9000")
    if X86:
        with pytest.raises(host_cpu.IsaError, match=r"cannot execute avx512 \(it supports: "
                                                       r"native, avx2, sse4\)"):
            host_cpu.resolve_level("avx512", "avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 "
                                               "popcnt pni sse4_1 sse4_2 ssse3")


def test_caches_and_cores_are_read_from_the_machine():
    caches = host_cpu.caches()
    if not caches:
        pytest.skip("neither sysfs nor lscpu reports caches here")
    assert caches[1].size >= 8 << 10 and caches[1].ways >= 1 and caches[1].line in (32, 64, 128)
    if 2 in caches:
        assert caches[2].size > caches[1].size
    assert 1 <= host_cpu.physical_cores() <= 4096


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_builds_runs_and_keys_the_database_apart(level, monkeypatch):
    monkeypatch.setenv("TUNESEARCH_CPU_ISA", level)
    device = CPUDevice()
    info = device.info()
    target = info.target
    assert target.isa and target.vector_registers in (16, 32)
    assert info.as_dict()["isa"].startswith(level)
    if level != "native":
        assert f"-march={host_cpu.X86_LEVELS[level].march}" in device.flags
    from tunesearch import Tensor
    from tunesearch.graph.schedule import create_schedule
    a = np.random.default_rng(0).standard_normal((37, 53)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((53, 29)).astype(np.float32)
    item = create_schedule([(Tensor(a) @ Tensor(b)).node])[-1]
    from tunesearch.space.spaces import space_for
    config = space_for(item.kernel, target).default()
    program = device.build(item.kernel, config)
    out = device.alloc(item.kernel.buffers[0].size, item.kernel.buffers[0].dtype)
    program.run([out] + [n.realized for n in item.inputs])
    np.testing.assert_allclose(device.copyout(out).reshape(37, 29), a @ b, rtol=1e-4, atol=1e-4)


def test_levels_have_fingerprints_of_their_own(monkeypatch):
    keys = set()
    for level in LEVELS:
        monkeypatch.setenv("TUNESEARCH_CPU_ISA", level)
        keys.add(CPUDevice().info().key)
    assert len(keys) == len(LEVELS)


def test_the_cli_refuses_an_unknown_level_in_one_line(tmp_path):
    env = {"TUNESEARCH_CPU_ISA": "avx9000", "TUNESEARCH_CACHE": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "tunesearch", "run", "example:tiny_cnn",
                           "--db", f"sqlite:///{tmp_path}/t.db"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "avx9000" in lines[0] and "Traceback" not in proc.stderr


def test_device_start_fails_cleanly_on_a_bad_level(monkeypatch):
    monkeypatch.setenv("TUNESEARCH_CPU_ISA", "bogus")
    with pytest.raises(DeviceUnavailable, match="bogus"):
        CPUDevice()


def test_buffers_start_on_a_cache_line():
    """A vector block of a line's width loads one line, not two, and rows a whole number of
    lines apart all start on one (numpy alone aligns to 16 bytes)."""
    from tunesearch.runtime.device import get_device
    from tunesearch.graph.dtypes import dtypes
    device = get_device("cpu")
    for size in (1, 1000, 3136 * 64, 1 << 20):
        buffer = device.alloc(size, dtypes.float32)
        assert buffer.address % 128 == 0 and buffer.handle.ctypes.data == buffer.address
        values = np.arange(size, dtype=np.float32)
        device.copyin(buffer, values)
        np.testing.assert_array_equal(device.copyout(buffer), values)


@pytest.mark.skipif(not X86, reason="x86 ISA levels")
@pytest.mark.parametrize("level", LEVELS)
def test_a_cpu_the_compiler_does_not_know_gets_the_level_march_and_a_known_tuning(
        level, monkeypatch):
    """GCC 12 resolves -march=native on Zen 5 to generic tuning: the device then compiles for
    the level's -march with the newest core of the vendor that the compiler accepts."""
    from tunesearch.runtime.cpu import compiler
    cc = compiler()[0]
    name, isa = host_cpu.resolve_level(level)
    monkeypatch.setattr(host_cpu, "native_cpu", lambda _cc: "generic")
    flags = host_cpu.compile_flags(name, isa, cc)
    assert flags[0] == f"-march={isa.march}" and flags[1].startswith("-mtune=")
    tuning = flags[1].split("=", 1)[1]
    assert tuning not in ("native", "generic")
    assert subprocess.run([cc, f"-mtune={tuning}", "-E", "-x", "c", "/dev/null"],
                          capture_output=True).returncode == 0
    monkeypatch.setattr(host_cpu, "native_cpu", lambda _cc: "znver3")  # a CPU it knows
    known = host_cpu.compile_flags(name, isa, cc)
    assert known[0] == ("-march=native" if name == "native" else f"-march={isa.march}")
