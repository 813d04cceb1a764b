"""The OpenCL device: OpenCL C from the GPU lowering, built and launched through pyopencl.

It uses the first OpenCL device that builds and runs a probe kernel, a GPU first. Without one,
`pip install "tunesearch[opencl]"` brings PoCL (pocl-binary-distribution): pyopencl's wheel ships
an ICD loader that also reads the .icd files in its own folder, where PoCL's is, so no system
setup is needed. Where that PoCL's LLVM does not know the CPU, the distribution's PoCL
(pocl-opencl-icd, found through /etc/OpenCL/vendors) is taken: it builds. Kernel times come from
the queue's profiling events. Artifacts are program binaries, so a program compiled in one
process (the search's compile pool) is loaded in another (its runner).
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import warnings
from collections import OrderedDict
from typing import Any

import numpy as np

from tunesearch.graph.dtypes import DType
from tunesearch.runtime.device import (Buffer, CompileError, DeviceInfo, DeviceUnavailable,
                                       Program, Source)
from tunesearch.runtime.gpu import GPUDevice
from tunesearch.codegen.gpu_dialects import OpenCLDialect
from tunesearch.space.target import Target

INSTALL_HINT = 'pip install "tunesearch[opencl]" (pyopencl, and PoCL to run on the CPU)'
ARTIFACT_MAGIC = b"tunesearch-opencl-binary\n"
PROGRAM_CACHE = 64   # built programs kept per process, most recently used


def _prepare_icd_loader() -> None:
    """pyopencl's loader finds no platform at all when OCL_ICD_VENDORS names a path that does not
    exist (a stale setting), not even the PoCL in its own folder; drop such a setting before the
    loader first runs. A setting that names a real folder is kept: the loader reads both."""
    if "pyopencl" in sys.modules:
        return
    vendors = os.environ.get("OCL_ICD_VENDORS")
    if vendors and not os.path.exists(vendors):
        del os.environ["OCL_ICD_VENDORS"]


def _import_pyopencl():
    _prepare_icd_loader()
    try:
        import pyopencl
    except ImportError as exc:
        raise DeviceUnavailable(f"pyopencl is not installed ({exc}): {INSTALL_HINT}") from None
    return pyopencl


PROBE_SOURCE = ("__kernel void tunesearch_probe(__global float* x) "
                "{ x[get_global_id(0)] += 1.0f; }")
DISTRIBUTION_HINT = ("install the distribution's PoCL, whose LLVM picks a kernel library for "
                     "CPUs it does not know (Debian/Ubuntu: apt-get install pocl-opencl-icd)")


def _probe(cl, device) -> str | None:
    """None where the device builds and runs a one-line kernel; else why not, in one line. A
    platform may list a device and still build nothing: PoCL's pip build (LLVM 14) answers
    "unknown target CPU" on a CPU newer than its LLVM."""
    try:
        context = cl.Context([device])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = cl.Program(context, PROBE_SOURCE).build()
        queue = cl.CommandQueue(context)
        host = np.zeros(4, np.float32)
        buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                           hostbuf=host)
        program.tunesearch_probe(queue, (4,), None, buffer)
        cl.enqueue_copy(queue, host, buffer, is_blocking=True)
    except Exception as exc:  # noqa: BLE001 - any failure of a driver means: not this one
        return _first_error_line(str(exc) or type(exc).__name__)
    if not np.array_equal(host, np.ones(4, np.float32)):
        return "the probe kernel computed wrong values"
    return None


def _first_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[0][:200]


def _pick_device(cl, probe=_probe) -> Any:
    """The first device that builds and runs a probe kernel, GPUs first, then accelerators,
    then the rest, in the platforms' order. Raises DeviceUnavailable with every device's
    reason when none does."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise DeviceUnavailable(f"no OpenCL platform found ({exc}): {INSTALL_HINT}") from None
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        raise DeviceUnavailable(f"OpenCL platforms have no devices: {INSTALL_HINT}")
    rank = {cl.device_type.GPU: 0, cl.device_type.ACCELERATOR: 1}
    devices.sort(key=lambda d: min((v for t, v in rank.items() if d.type & t), default=2))
    failures = []
    for device in devices:
        why = probe(cl, device)
        if why is None:
            return device
        failures.append(f"{device.platform.version.strip()} {device.name.strip()}: {why}")
    raise DeviceUnavailable(f"no OpenCL device builds a kernel ({'; '.join(failures)}): "
                            f"{DISTRIBUTION_HINT}")


class OpenCLDevice(GPUDevice):
    name = "opencl"
    # options for clBuildProgram; conformance tests add -cl-opt-disable to build faster
    build_options: tuple[str, ...] = ()

    def __init__(self):
        cl = self.cl = _import_pyopencl()
        self.device = _pick_device(cl)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.dialect = OpenCLDialect()
        self._programs: OrderedDict[str, Any] = OrderedDict()

    @functools.cache
    def info(self) -> DeviceInfo:
        d = self.device
        fingerprint = (
            ("backend", "opencl"), ("platform", d.platform.name.strip()),
            ("platform_version", d.platform.version.strip()), ("name", d.name.strip()),
            ("vendor", d.vendor.strip()), ("driver", d.driver_version.strip()),
            ("version", d.version.strip()), ("opencl_c", d.opencl_c_version.strip()),
            ("compute_units", d.max_compute_units), ("max_work_group", d.max_work_group_size),
            ("local_memory", d.local_mem_size), ("build_options", " ".join(self.build_options)))
        sizes = tuple(int(s) for s in d.max_work_item_sizes)
        target = Target(self.space_family, max_local_size=int(d.max_work_group_size),
                        max_local_dims=sizes, local_memory=int(d.local_mem_size),
                        compute_units=int(d.max_compute_units),
                        warp=32 if d.type & self.cl.device_type.GPU else 1)
        return DeviceInfo("opencl", d.name.strip(), fingerprint, target)

    # ---- memory
    def alloc(self, size: int, dtype: DType) -> Buffer:
        flags = self.cl.mem_flags.READ_WRITE
        return Buffer(self.name, size, dtype,
                      self.cl.Buffer(self.context, flags, max(size * dtype.itemsize, 1)))

    def part(self, buffer: Buffer, size: int) -> Buffer:
        # a sub-buffer at origin 0, which every device's base-address alignment allows
        return Buffer(self.name, size, buffer.dtype, buffer.handle.get_sub_region(
            0, max(size * buffer.dtype.itemsize, 1)))

    def _to_device(self, handle, host: np.ndarray) -> None:
        self.cl.enqueue_copy(self.queue, handle, host, is_blocking=True)

    def _to_host(self, host: np.ndarray, handle) -> None:
        self.cl.enqueue_copy(self.queue, host, handle, is_blocking=True)

    def synchronize(self) -> None:
        self.queue.finish()

    # ---- programs
    def _build(self, program, what: str):
        cl = self.cl
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                return program.build(options=list(self.build_options))
        except cl.Error as exc:
            raise CompileError(f"OpenCL build of {what} failed:\n{str(exc)[-4000:]}") from None

    def compile(self, source: Source) -> bytes:
        """Build the source; the artifact is the device's program binary."""
        program = self._build(self.cl.Program(self.context, source.text), source.entry)
        binary = program.get_info(self.cl.program_info.BINARIES)[0]
        self._remember(ARTIFACT_MAGIC + bytes(binary), program)
        return ARTIFACT_MAGIC + bytes(binary)

    def _remember(self, artifact: bytes, program) -> None:
        key = hashlib.sha256(artifact).hexdigest()
        self._programs[key] = program
        self._programs.move_to_end(key)
        while len(self._programs) > PROGRAM_CACHE:
            self._programs.popitem(last=False)

    def _program(self, artifact: bytes, source: Source):
        """The built program of an artifact: cached, else from its binary, else from source."""
        key = hashlib.sha256(artifact).hexdigest()
        if key in self._programs:
            self._programs.move_to_end(key)
            return self._programs[key]
        program = None
        if artifact.startswith(ARTIFACT_MAGIC):
            binary = artifact[len(ARTIFACT_MAGIC):]
            try:
                program = self._build(
                    self.cl.Program(self.context, [self.device], [binary]), source.entry)
            except (CompileError, self.cl.Error):
                program = None  # another driver's binary: rebuild from the source
        if program is None:
            program = self._build(self.cl.Program(self.context, source.text), source.entry)
        self._remember(artifact, program)
        return program

    def load(self, artifact: bytes, source: Source) -> Program:
        # a kernel object of its own per load (pyopencl warns when getattr hands out another)
        kernel = self.cl.Kernel(self._program(artifact, source), source.entry)
        queue, global_size, local_size = self.queue, source.global_size, source.local_size
        empty = not global_size or 0 in global_size

        def launch(buffers: list[Buffer]):
            return kernel(queue, global_size, local_size, *[b.handle for b in buffers])

        def run(buffers: list[Buffer]) -> None:
            if not empty:
                launch(buffers)

        def timed(buffers: list[Buffer]) -> float:
            if empty:
                return 0.0
            event = launch(buffers)
            event.wait()
            return (event.profile.end - event.profile.start) * 1e-9

        return Program(run, timed, source)
