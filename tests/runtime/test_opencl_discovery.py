"""How the OpenCL device is chosen: the first device that builds and runs a probe kernel, GPUs
first. A platform can list a device that builds nothing (PoCL's pip build on a CPU newer than its
LLVM: "unknown target CPU"); such a device is passed over, and where no device builds, the one
line that says so names each device's reason and the distribution's PoCL."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tunesearch.runtime import opencl
from tunesearch.runtime.device import DeviceUnavailable

cl = pytest.importorskip("pyopencl")


def _platforms(*devices):
    """Stand-in platforms for the selection alone: each device a name, a type and the reason
    its probe fails (None: it builds)."""
    found = []
    for name, kind, why in devices:
        platform = SimpleNamespace(version=f"OpenCL 3.0 {name}-platform")
        found.append(SimpleNamespace(name=name, type=kind, platform=platform, why=why))
    platforms = [SimpleNamespace(get_devices=lambda d=d: [d]) for d in found]
    return SimpleNamespace(get_platforms=lambda: platforms, device_type=cl.device_type,
                           Error=cl.Error)


def _probe(_cl, device):
    return device.why


def test_a_device_that_builds_is_preferred_to_one_listed_first_that_does_not():
    fake = _platforms(("pip-pocl", cl.device_type.CPU, "error: unknown target CPU 'generic'"),
                      ("debian-pocl", cl.device_type.CPU, None))
    assert opencl._pick_device(fake, _probe).name == "debian-pocl"


def test_gpus_come_first_among_devices_that_build():
    fake = _platforms(("cpu", cl.device_type.CPU, None), ("gpu", cl.device_type.GPU, None),
                      ("broken-gpu", cl.device_type.GPU, "error: no compiler"))
    assert opencl._pick_device(fake, _probe).name == "gpu"


def test_no_device_that_builds_is_one_line_with_each_reason_and_the_hint():
    fake = _platforms(("pip-pocl", cl.device_type.CPU, "error: unknown target CPU 'generic'"))
    with pytest.raises(DeviceUnavailable) as caught:
        opencl._pick_device(fake, _probe)
    message = str(caught.value)
    assert "\n" not in message
    assert "unknown target CPU 'generic'" in message and "pocl-opencl-icd" in message


def test_the_probe_of_a_real_device_builds_and_runs_or_says_why():
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as exc:
        pytest.skip(f"no OpenCL platform: {exc}")
    for device in devices:
        why = opencl._probe(cl, device)
        assert why is None or (why and "\n" not in why), why


def test_a_build_log_is_cut_to_its_first_error_line():
    log = "Build on <pyopencl.Device>:\n\nwarning: x\nerror: unknown target CPU 'generic'\nmore"
    assert opencl._first_error_line(log) == "error: unknown target CPU 'generic'"
