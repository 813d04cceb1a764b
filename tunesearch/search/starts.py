"""Where a kernel's search starts besides the default: winners the database already holds for
this kernel on other devices, and for kernels of its structure in other shapes.

    starts = find_starts(store, kernel_record(kernel), space, device_record(device.info()))
    search_kernel(..., first=starts.first, starts=starts.later)

The search measures them in this order:

1. right after the default, before its neighbours: this kernel's winners on the nearest other
   devices of the same backend (another ISA level, another CPU model, another GPU of the
   family), nearest device first. Its shapes are exactly this kernel's, so only what differs
   between the devices can make it a poor start; a search on a device new to a database then
   measures what won next door before it spends its budget on local steps from the heuristic;
2. after the default's neighbours: the winners of kernels of the same structure in other
   shapes on this device, nearest shapes first (a model's many kernels of one kind share their
   search), then those on the nearest other devices. A winner of another shape is adapted by
   clipping its blocks to this shape, so it comes after this kernel's own winners.

Each is made to fit this kernel's space (`space.adapt`) and dropped where it cannot be. Every
start is measured and verified like any other candidate: a database row never decides a winner.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tunesearch.db import DatabaseError, DeviceRecord, KernelRecord
from tunesearch.space.config import Config, ConfigError
from tunesearch.space.spaces import Space

NEAREST_DEVICES = 3   # other devices whose winners are tried: a few starts, not a second search
SHAPES = 3            # winners of other shapes, from this device and from the others each

# The fingerprint fields (runtime/cpu.py, opencl.py, cuda.py) nearness is read from. A field a
# device does not store counts as unknown, which is never as near as an equal value.
_FAMILY = ("vendor", "machine", "platform")            # CPU vendor and architecture, CL platform
_WIDTHS = ("vector_bytes", "vector_registers")          # register blocks follow the vector lanes
_SIZES = ("cores", "threads", "fma_units", "l1d", "l2", "l3",   # tiles and parallel splits
          "sm_count", "compute_units", "max_work_group", "local_memory")  # grids and local sizes
_TOOLS = ("compiler", "flags", "driver", "nvrtc", "nvrtc_options", "arch", "build_options",
          "platform_version", "opencl_c")


@dataclass(frozen=True)
class Starts:
    """The configs a kernel's search measures early (see the module docstring)."""
    first: tuple[Config, ...] = ()   # this kernel's winners on the nearest other devices
    later: tuple[Config, ...] = ()   # other shapes' winners: this device's, then the others'
    source: str = ""                 # the device whose winner leads `first`, for the report


def _major(fingerprint: dict) -> str | None:
    """A CUDA device's compute capability major ("8" of "8.6"): the family of its GPUs."""
    value = fingerprint.get("compute_capability")
    return str(value).split(".", 1)[0] if value is not None else None


def _isa_level(fingerprint: dict) -> str | None:
    """The CPU's ISA level, "native (avx2)" and "avx2" alike: the same instructions."""
    value = fingerprint.get("isa")
    if not isinstance(value, str):
        return None
    return value[len("native ("):-1] if value.startswith("native (") else value


def _factor(here: Any, there: Any) -> float:
    """How many factors of two apart two sizes are; 1 (as if one factor) where one is unknown
    or not a positive number, 0 where neither device stores it."""
    if here is None and there is None:
        return 0.0
    number = (int, float)
    if isinstance(here, bool) or isinstance(there, bool) or not isinstance(here, number) or \
            not isinstance(there, number) or not here > 0 or not there > 0 or \
            not math.isfinite(here) or not math.isfinite(there):
        return 1.0
    return abs(math.log2(here / there))


def device_distance(here: dict, there: dict) -> tuple[int, float, float, int]:
    """How far a device (its stored fingerprint) is from this one, for ordering: smaller is
    nearer, compared tier by tier.

    1. the hardware: 0 for the same model (name) of the same family, 1 for the same family (CPU
       vendor and architecture, OpenCL platform, CUDA compute capability major), 2 otherwise.
       The same chip shares its caches, cores and latencies whatever the ISA level chosen;
    2. the instruction set: factors of two between vector widths and register counts, plus one
       for another ISA level or compute capability (the widths shape the register blocks);
    3. the sizes: factors of two between core and thread counts, caches, compute units, work
       group and local memory sizes (they shape the tiles and the parallel split);
    4. the toolchain: how many of compiler, flags, driver and the like differ.

    Both dicts come from the database: a field that is missing or malformed degrades the match
    instead of failing (`_factor`).
    """
    family = all(here.get(f) == there.get(f) for f in _FAMILY) and _major(here) == _major(there)
    same_model = here.get("name") is not None and here.get("name") == there.get("name")
    hardware = 0 if family and same_model else 1 if family else 2
    isa = sum(_factor(here.get(f), there.get(f)) for f in _WIDTHS)
    isa += (_isa_level(here) != _isa_level(there)) + \
        (here.get("compute_capability") != there.get("compute_capability"))
    sizes = sum(_factor(here.get(f), there.get(f)) for f in _SIZES)
    tools = sum(here.get(f) != there.get(f) for f in _TOOLS)
    return hardware, isa, sizes, tools


def device_label(device: DeviceRecord) -> str:
    """A device as the report names it: its name, its ISA level where it has one, its key."""
    level = _isa_level(device.fingerprint)
    return f"{device.name}{', ' + level if level else ''} ({device.key})"


def _fit(space: Space, config: dict, taken: list[Config]) -> Config | None:
    """A stored config made to fit `space`, or None where it cannot be or is taken already."""
    try:
        adapted = space.adapt(Config.from_json(config))
    except ConfigError:
        return None
    return adapted if adapted is not None and adapted not in taken else None


def find_starts(store, kernel: KernelRecord, space: Space, device: DeviceRecord) -> Starts:
    """The starts of `kernel`'s search on `device`, from one query of the store. No starts
    where the database cannot be read."""
    try:
        rows = store.on_backend(kernel, device.backend)
    except DatabaseError:
        return Starts()
    here = [config for other, kernel_key, _, config in rows
            if other.key == device.key and kernel_key != kernel.key][:SHAPES]
    there = [row for row in rows if row[0].key != device.key]
    devices: dict[str, DeviceRecord] = {}
    for other, *_ in there:
        devices.setdefault(other.key, other)
    fingerprint = device.fingerprint
    nearest = sorted(devices.values(),
                     key=lambda d: (device_distance(fingerprint, d.fingerprint), d.key))
    rank = {d.key: i for i, d in enumerate(nearest[:NEAREST_DEVICES])}
    there = sorted((row for row in there if row[0].key in rank),
                   key=lambda row: rank[row[0].key])  # stable: each device's rows keep order
    first: list[Config] = []
    source = ""
    for other, kernel_key, _, config in there:
        if kernel_key == kernel.key and (adapted := _fit(space, config, first)) is not None:
            first.append(adapted)
            source = source or device_label(other)
    later: list[Config] = []
    for config in here:
        if (adapted := _fit(space, config, first + later)) is not None:
            later.append(adapted)
    others = 0
    for _, kernel_key, _, config in there:
        if others < SHAPES and kernel_key != kernel.key and \
                (adapted := _fit(space, config, first + later)) is not None:
            later.append(adapted)
            others += 1
    return Starts(tuple(first), tuple(later), source)
