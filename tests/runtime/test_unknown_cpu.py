"""A CPU that neither the C compiler nor PoCL's LLVM knows, emulated: GCC's driver and a Python
process run under qemu-x86_64 on a CPU of Intel's family 19, newer than GCC 12 and LLVM 14. Both
read the CPU with cpuid, so each answers as it would on such a machine: GCC resolves
-march=native to an old -march with "generic" tuning, and LLVM 14 names the host CPU "generic",
which PoCL's pip build passes on and then cannot build for. What runs natively (cc1, the
assembler, the linker) gets only the flags the device chose.

The CPU device must tune for a core the compiler knows; the OpenCL device must build on a platform
that knows the CPU (the distribution's PoCL, which picks a kernel library by the CPU's features)
or say in one line why none does. qemu-user is installed by .ci/run; without it these tests skip.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tunesearch.runtime import host_cpu

QEMU = shutil.which("qemu-x86_64")


def _binary(*paths: str | None) -> str | None:
    """The first of paths that is a program itself: qemu runs binaries, not a script that
    wraps one (scripts/unknown_cpu.sh runs gcc and Python through such scripts)."""
    for path in paths:
        try:
            with open(path or "", "rb") as file:
                if file.read(4) == b"\x7fELF":
                    return path
        except OSError:
            continue
    return None


GCC = _binary(shutil.which("gcc"), "/usr/bin/gcc")
# Intel's family 19 with the features QEMU emulates (AVX2 and FMA, no AVX-512)
UNKNOWN_CPU = "max,vendor=GenuineIntel,family=19,model=1"

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or QEMU is None,
    reason="needs x86-64 and qemu-x86_64 (apt-get install qemu-user)")


def _on_unknown_cpu(program: str, folder: Path) -> str:
    """A script that runs program's process on the emulated CPU (children it starts run
    natively unless they are such scripts too)."""
    script = folder / Path(program).name
    script.write_text(f'#!/bin/sh\nexec {QEMU} -0 {program} -cpu {UNKNOWN_CPU} {program} "$@"\n')
    script.chmod(0o755)
    return str(script)


@pytest.mark.skipif(GCC is None, reason="GCC's driver answers what -march=native resolves to")
def test_on_a_cpu_gcc_does_not_know_the_device_tunes_for_a_core_it_knows(tmp_path):
    cc = _on_unknown_cpu(GCC, tmp_path)
    resolved = host_cpu.native_cpu(cc)
    assert resolved is not None and resolved.lower() in host_cpu.UNKNOWN_CPU, resolved
    for name in host_cpu.supported_levels():
        name, level = host_cpu.resolve_level(name)
        flags = host_cpu.compile_flags(name, level, cc)
        assert f"-march={level.march}" in flags, flags
        tuning = next(f.split("=", 1)[1] for f in flags if f.startswith("-mtune="))
        known = {t for by_level in host_cpu.KNOWN_TUNINGS.values() for t in by_level[level.name]}
        assert tuning in known, flags
        # the compiler accepts them (the register-file tests check what it makes of a block)
        subprocess.run([cc, *flags, "-O2", "-c", "-x", "c", "-", "-o", os.devnull],
                       input="float f(float *x) { return x[0] * x[1] + x[2]; }",
                       text=True, check=True, capture_output=True)


# the child: every OpenCL device's probe, then a kernel on the device tunesearch picks
CHILD = """
import json, numpy as np
from tunesearch import Tensor
from tunesearch.runtime import opencl
from tunesearch.runtime.device import DeviceUnavailable, get_device
cl = opencl._import_pyopencl()
report = {"probes": [], "picked": None, "error": None, "unavailable": None}
try:
    for platform in cl.get_platforms():
        for device in platform.get_devices():
            report["probes"].append([platform.version, opencl._probe(cl, device)])
except cl.Error as exc:
    report["probes"] = str(exc)
try:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = (Tensor(x, device="opencl") * 2 + 1).sum(1).numpy()
    report["error"] = float(np.abs(got - (x * 2 + 1).sum(1)).max())
    report["picked"] = get_device("opencl").device.platform.version
except DeviceUnavailable as exc:
    report["unavailable"] = str(exc)
print(json.dumps(report))
"""


def _opencl_on_unknown_cpu(tmp_path, **env) -> dict:
    pytest.importorskip("pyopencl")
    if _binary(sys.executable) is None:
        pytest.skip("this interpreter already runs under an emulator")
    python = _on_unknown_cpu(sys.executable, tmp_path)
    # the CPU device is not used; its kernels would be AVX-512 here, which QEMU does not run
    child_env = {**os.environ, "TUNESEARCH_CPU_ISA": "avx2",
                 "TUNESEARCH_CACHE": str(tmp_path / "cache"), **env}
    done = subprocess.run([python, "-c", CHILD], capture_output=True, text=True, timeout=600,
                          env=child_env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _llvm14_pocl(report: dict) -> list:
    return [why for version, why in report["probes"] if "LLVM 14" in version]


def test_opencl_on_a_cpu_llvm_does_not_know_builds_where_a_platform_can(tmp_path):
    report = _opencl_on_unknown_cpu(tmp_path)
    if isinstance(report["probes"], str) or not report["probes"]:
        pytest.skip(f"no OpenCL platform here: {report['probes']}")
    # the premise: PoCL's pip build (LLVM 14) cannot build for this CPU
    assert all(why and "unknown target CPU" in why for why in _llvm14_pocl(report)), report
    if any(why is None for _, why in report["probes"]):
        assert report["picked"] is not None and report["error"] == 0.0, report
        assert "LLVM 14" not in report["picked"], report
    else:
        assert report["unavailable"] and "\n" not in report["unavailable"], report
        assert "pocl-opencl-icd" in report["unavailable"], report


def test_opencl_with_only_a_pocl_that_does_not_know_the_cpu_says_why_in_one_line(tmp_path):
    empty = tmp_path / "no-vendors"
    empty.mkdir()
    # the loader then reads only the platforms in pyopencl's own folder (PoCL's pip build)
    report = _opencl_on_unknown_cpu(tmp_path, OCL_ICD_VENDORS=str(empty))
    if isinstance(report["probes"], str) or not _llvm14_pocl(report):
        pytest.skip(f"PoCL's pip build is not installed here: {report['probes']}")
    assert report["picked"] is None, report
    message = report["unavailable"]
    assert message and "\n" not in message, report
    assert "unknown target CPU" in message and "pocl-opencl-icd" in message, message
