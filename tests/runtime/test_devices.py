"""Every registered device, known through its registry entry alone: the entry names a class that
imports without the device's driver, a space family the space knows, and one line of description.
Where the device is available here, its target is of the entry's family and a few catalogue
kernels (elementwise, reduce, matmul with tails, padded convolution, integers) under its default,
naive and a sampled config match the numpy interpreter through the Device interface alone
(build, alloc, copy, run). A device that is not available here is skipped, with its reason.

A new device is checked here by its registry entry alone; its own test file goes further
(test_cpu_conformance.py, test_opencl.py and test_cuda.py run every catalogue kernel under many
configs, with the helpers of tests/conformance.py).
"""
from __future__ import annotations

import importlib

import pytest

from tests.catalogue import catalogue, random_inputs
from tests.conformance import device_buffers, output_error, poison, sample_configs, tolerance
from tunesearch.runtime.device import DEVICES, Device, DeviceUnavailable, get_device
from tunesearch.runtime.interpret import run_kernel
from tunesearch.space.spaces import SPACE_FAMILIES, space_for

NAMES = sorted(DEVICES)
KERNELS = {name: kernel for name, kernel in catalogue()
           if name in ("broadcast_mul_add", "sum_last_axis", "matmul_prime",
                       "conv2d_stride_pad.0", "conv2d_stride_pad.1", "int_mod_div_where")}
CONFIGS = 3  # the default, the naive one and one sampled


def available(name: str) -> Device:
    try:
        device = get_device(name)
        device.info()
    except DeviceUnavailable as exc:
        pytest.skip(f"{name} is not available here: {str(exc).splitlines()[0]}")
    return device


@pytest.mark.parametrize("name", NAMES)
def test_entry_names_an_importable_class_a_space_family_and_what_it_is(name):
    entry = DEVICES[name]
    module, cls = entry.device_class.split(":")
    assert issubclass(getattr(importlib.import_module(module), cls), Device)
    assert entry.space_family in SPACE_FAMILIES
    assert entry.description and "\n" not in entry.description and ";" not in entry.description


@pytest.mark.parametrize("name", NAMES)
def test_target_is_of_the_entry_family(name):
    assert available(name).info().target.family == DEVICES[name].space_family


@pytest.mark.parametrize("kernel_name", sorted(KERNELS))
@pytest.mark.parametrize("name", NAMES)
def test_kernels_match_the_interpreter(name, kernel_name):
    device = available(name)
    kernel = KERNELS[kernel_name]
    configs = sample_configs(space_for(kernel, device.info().target), CONFIGS,
                             seed=len(kernel_name))
    inputs = random_inputs(kernel, seed=1)
    expected = run_kernel(kernel, inputs, out=poison(kernel))  # a piece leaves the rest
    buffers = device_buffers(device, kernel, inputs)
    for config in configs:
        program = device.build(kernel, config)
        device.copyin(buffers[0], poison(kernel))  # a config that writes nothing cannot pass
        program(buffers)
        device.synchronize()
        error = output_error(device.copyout(buffers[0]), expected)
        assert error <= tolerance(kernel), f"{name}, {config}: error {error:.2e}"
