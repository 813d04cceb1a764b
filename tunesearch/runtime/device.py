"""The device interface: render, compile, allocate, copy, launch, time. Devices register by name.

Adding a device is one file here that subclasses Device (rendering through codegen/) and
one entry in DEVICES: where its class lives, its space family and one line that says what it is.
Drivers are imported when the device is first used; a missing one raises DeviceUnavailable with an
install hint.
"""
from __future__ import annotations

import hashlib
import importlib
import itertools
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import numpy as np

from tunesearch.errors import UserError
from tunesearch.graph.dtypes import DType
from tunesearch.graph.kernel import Kernel
from tunesearch.space.config import Config
from tunesearch.space.target import Target


@dataclass(frozen=True)
class DeviceEntry:
    """A device as the registry knows it before it is opened: where its class lives
    ("module:Class", imported on first use, so a device whose driver is missing costs nothing
    until it is asked for), the space family its kernels' knobs come from (the family of the
    Target it describes itself with: a name in space/spaces.py SPACE_FAMILIES), and one line that
    says what it is (the CLI's help and `tunesearch devices`)."""
    device_class: str
    space_family: str
    description: str


# name -> entry. Tests and plugins may add entries at run time: the search hands them to the
# processes it starts (search/messages.py DeviceSpec)
DEVICES: dict[str, DeviceEntry] = {
    "cpu": DeviceEntry("tunesearch.runtime.cpu:CPUDevice", "cpu",
                       "C through the system C compiler, loops shared over a thread pool"),
    "opencl": DeviceEntry("tunesearch.runtime.opencl:OpenCLDevice", "gpu",
                          "OpenCL C through pyopencl, on a GPU or on the CPU with PoCL"),
    "cuda": DeviceEntry("tunesearch.runtime.cuda:CUDADevice", "gpu",
                        "CUDA C compiled by NVRTC, run through cuda-python or pycuda"),
    "reference": DeviceEntry("tunesearch.runtime.reference:ReferenceDevice", "none",
                             "the numpy interpreter every device is checked against (no knobs)"),
}


class DeviceUnavailable(UserError, RuntimeError):
    """The device cannot be used here; the message says why and what to install."""


class CompileError(RuntimeError):
    """The device's compiler rejected a source; the message holds its log. Not a `UserError`:
    tunesearch generates every source, so one that does not compile is tunesearch's bug (in a
    search it is data: the candidate fails)."""


class DeviceLost(RuntimeError):
    """The device can run nothing more in this process (a GPU kernel faulted and left its context
    unusable): the process must end, and a new one gets a working device."""


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is, precisely: its fingerprint is the database's device key."""
    backend: str
    name: str
    fingerprint: tuple[tuple[str, Any], ...]
    target: Target

    @property
    def key(self) -> str:
        text = json.dumps(dict(self.fingerprint), sort_keys=True)
        return f"{self.backend}-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.fingerprint)


_buffer_serials = itertools.count()


@dataclass
class Buffer:
    """Memory on a device: `size` elements (not bytes) of `dtype`; `handle` is what the device
    addresses it by (a numpy array on the host devices, a device pointer on a GPU)."""
    device: str
    size: int
    dtype: DType
    handle: Any = field(repr=False)
    # the address of a host buffer or the pointer of device memory, taken once: reading it from
    # numpy costs ~1 us a launch
    address: int | None = field(default=None, repr=False, compare=False)
    # unique in the process and never reused (an id() is, once a buffer is freed): DEBUG and
    # GRAPH tell buffers apart by it
    serial: int = field(default_factory=lambda: next(_buffer_serials), repr=False,
                        compare=False)


@dataclass(frozen=True)
class Source:
    """A rendered kernel: its source text, the name of its entry function, the key of the
    kernel it computes, how many buffers it takes and, on a GPU, its launch grid."""
    text: str
    entry: str
    kernel_key: str
    n_buffers: int = 0
    global_size: tuple[int, ...] = ()
    local_size: tuple[int, ...] = ()


class Program:
    """A loaded kernel: call with buffers; `timed` returns seconds measured by the device.
    `entry` is the address of a host function `void f(void** buffers)`-compatible entry
    (a CPU kernel's C function), where there is one: a device can then chain launches."""

    def __init__(self, run: Callable[..., Any], timed: Callable[..., float], source: Source,
                 entry: int | None = None):
        self.run, self.timed, self.source, self.entry = run, timed, source, entry

    def __call__(self, buffers: list[Buffer]) -> None:
        self.run(buffers)


class Device(ABC):
    """A place kernels run, behind one small interface (one file per device in runtime/,
    registered by name in DEVICES):

    - info(): what the device is (backend, name, the fingerprint that keys the database, the
      target model the space derives its defaults from, of the entry's `space_family`);
    - alloc(size, dtype): a buffer of `size` elements; copyin / copyout move numpy arrays in and
      out of it (whole buffers, flat);
    - render(kernel, config): the source of a kernel under a config; compile(source): a loadable
      artifact (safe to call in another process: the compile pool does); load(artifact,
      source): a `Program`, whose `run(buffers)` launches it and whose `timed(buffers)` launches
      it once and returns the seconds the device measured (a device timer on a GPU, the wall
      clock around the call on the CPU), after the kernel finished;
    - synchronize(): wait for every launch; sequence(steps): one function that launches a
      model's programs in order (devices with a cheaper way to chain launches override it);
    - prepack_layouts(kernel, config, constants) and prepack(kernel, config, index, values):
      which constant operands a program reads packed ahead, and their panels (CPU), or none.
    """
    name: str
    # buffers are host memory that kernels address directly (the runner fences them with guard
    # pages, see search/_guarded.py); a Buffer's handle is then its numpy array
    host_memory: bool = False

    @abstractmethod
    def info(self) -> DeviceInfo: ...

    @property
    def space_family(self) -> str:
        """The space family of this device's registry entry: the family of its Target."""
        return DEVICES[self.name].space_family

    @abstractmethod
    def alloc(self, size: int, dtype: DType) -> Buffer: ...

    def part(self, buffer: Buffer, size: int) -> Buffer | None:
        """The first `size` elements of buffer as a buffer of their own (the same memory), or
        None where the device cannot address part of a buffer."""
        return None

    @abstractmethod
    def copyin(self, buffer: Buffer, array: np.ndarray) -> None: ...

    @abstractmethod
    def copyout(self, buffer: Buffer) -> np.ndarray: ...

    @abstractmethod
    def render(self, kernel: Kernel, config: Config,
               prepacked: frozenset[int] = frozenset()) -> Source:
        """The source of kernel under config. prepacked: buffers the program receives already
        packed (see `prepack`); only devices whose prepack gives panels are asked for them."""

    @abstractmethod
    def compile(self, source: Source) -> bytes:
        """Source to a loadable artifact. Must be safe to call in another process."""

    @abstractmethod
    def load(self, artifact: bytes, source: Source) -> Program: ...

    def synchronize(self) -> None:
        pass

    def evict(self, buffers: list[Buffer]) -> bool:
        """Push these buffers out of the device's caches, so that the next launch reads them
        from memory, as a model's kernel reads its weights (every other kernel of the model ran
        since it last did). False where the device cannot (then nothing changed)."""
        return False

    def sequence(self, steps: list[tuple[Program, list[Buffer]]]) -> Callable[[], None]:
        """A function that launches the programs in order on their buffers, with everything
        about the launches bound once: a model's plan calls it per run. Devices with a cheaper
        way to chain launches override this; one whose kernels can read host memory in place
        gives the function a `rebind(buffer, array | None)` that points the launches reading
        `buffer` at `array` instead (None: back at the buffer), so a plan feeds its inputs
        without copying them."""
        bound = [(program.run, buffers) for program, buffers in steps]

        def launch() -> None:
            for run, buffers in bound:
                run(buffers)
        return launch

    def compile_settings(self) -> dict[str, Any]:
        """What a process that only compiles needs to build this device's artifacts without
        opening the device; the compile pool hands it to its processes (see for_compiling)."""
        return {}

    @classmethod
    def for_compiling(cls, **settings: Any) -> Device:
        """A device that compiles as the one whose compile_settings() these are."""
        return cls()

    def from_numpy(self, array: np.ndarray, dtype: DType) -> Buffer:
        buf = self.alloc(array.size, dtype)
        self.copyin(buf, np.ascontiguousarray(array, dtype.np).reshape(-1))
        return buf

    def build(self, kernel: Kernel, config: Config,
              prepacked: frozenset[int] = frozenset()) -> Program:
        source = self.render(kernel, config, prepacked)
        return self.load(self.compile(source), source)

    def prepack_layouts(self, kernel: Kernel, config: Config, constants: frozenset[int]
                        ) -> dict[int, Hashable]:
        """The buffers among `constants` (buffer indices whose contents never change, a
        model's weights) that the program of kernel under config reads prepacked, each with a
        key of its panel's layout (configs with equal keys read the same panel): render and
        prepack are asked for these. Empty (the default) where the device packs nothing ahead."""
        return {}

    def prepack(self, kernel: Kernel, config: Config, index: int,
                values: np.ndarray) -> np.ndarray | None:
        """The panel the program of kernel under config reads in place of buffer `index`
        when that buffer never changes (a model's weight): packed once, when a model's plan is
        built, instead of on every call. values are the buffer's contents. None (the default)
        where the device packs nothing ahead."""
        return None


_instances: dict[str, Device] = {}


def device_names() -> list[str]:
    return list(DEVICES)


def registered_class(base: str) -> type[Device]:
    """The class registered under a device's base name (its registry entry, imported now)."""
    module, cls = DEVICES[base].device_class.split(":")
    return getattr(importlib.import_module(module), cls)


def use_for_compiling(name: str, settings: dict[str, Any]) -> None:
    """Make get_device(name) in this process a device that only compiles, built from the
    compile_settings() of the real one (a compile process never opens the device)."""
    if name not in _instances:
        _instances[name] = registered_class(name.split(":")[0].lower()).for_compiling(**settings)


def get_device(name: str) -> Device:
    """The device registered under name (one instance per process)."""
    base = name.split(":")[0].lower()
    if base not in DEVICES:
        raise DeviceUnavailable(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}")
    if name not in _instances:
        _instances[name] = registered_class(base)()
    return _instances[name]
