"""This machine's CPU, read when the CPU device starts: the ISA levels it runs, its vector
registers, FMA pipes, data caches, cores and clock, and the Target model (space/target.py) of the
level kernels are generated for, which the CPU space derives its defaults from.

The ISA level can be lowered (TUNESEARCH_CPU_ISA=avx2 on an AVX-512 machine) so the code, the
model and the device fingerprint of a smaller machine can be built, tested, tuned and measured
here. Levels follow the x86-64 micro-architecture levels that compilers know:

    native   -march=native, the model of the best level the CPU runs
    avx512   x86-64-v4: 32 registers of 64 bytes
    avx2     x86-64-v3: AVX2 + FMA, 16 registers of 32 bytes
    sse4     x86-64-v2: SSE4.2, 16 registers of 16 bytes

On other architectures only `native` exists (on ARM: NEON, 32 registers of 16 bytes).

The model (registers and width by level, two FMA pipes, caches from sysfs) has been checked
against these x86 machines, each with its own figures in docs/benchmarks/: Intel Xeon of the
Sapphire Rapids generation (AVX-512, L1d 48 KiB, L2 2 MiB), AMD Zen 3 (AVX2 + FMA, L1d 32 KiB,
L2 512 KiB), Zen 4 (AVX-512 on 256-bit pipes, L1d 32 KiB, L2 1 MiB) and Zen 5 (AVX-512 on
512-bit pipes, L1d 48 KiB, L2 1 MiB). GCC 12 does not know Zen 5: see compile_flags. A CPU
the compiler does not know is checked under qemu's emulation of one (tests/runtime/
test_unknown_cpu.py, scripts/unknown_cpu.sh).
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tunesearch.space.target import Cache, Target


@dataclass(frozen=True)
class IsaLevel:
    name: str
    march: str                  # the compiler's -march value
    needs: frozenset[str]       # /proc/cpuinfo flags the level requires
    vector_bytes: int
    vector_registers: int
    fma: bool


X86_LEVELS = {
    "avx512": IsaLevel("avx512", "x86-64-v4", frozenset(
        "avx512f avx512bw avx512cd avx512dq avx512vl avx2 fma".split()), 64, 32, True),
    "avx2": IsaLevel("avx2", "x86-64-v3", frozenset(
        "avx avx2 bmi1 bmi2 f16c fma movbe xsave".split()), 32, 16, True),
    "sse4": IsaLevel("sse4", "x86-64-v2", frozenset(
        "cx16 popcnt pni sse4_1 sse4_2 ssse3".split()), 16, 16, False),
}
ARM_NEON = IsaLevel("neon", "native", frozenset(), 16, 32, True)
LEVEL_NAMES = ("native", *X86_LEVELS)


class IsaError(ValueError):
    """An ISA level that is unknown or that this CPU cannot execute."""


@functools.lru_cache(maxsize=None)
def cpuinfo() -> dict[str, str]:
    """Model name, vendor, flags and clock (MHz) of the first CPU in /proc/cpuinfo."""
    info = {"model": "", "vendor": "", "flags": "", "mhz": ""}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key in ("model name", "Model") and not info["model"]:
                info["model"] = value
            elif key in ("vendor_id", "CPU implementer") and not info["vendor"]:
                info["vendor"] = value
            elif key in ("flags", "Features") and not info["flags"]:
                info["flags"] = value
            elif key == "cpu MHz" and not info["mhz"]:
                info["mhz"] = value
    except OSError:
        pass
    info["model"] = info["model"] or platform.processor() or platform.machine()
    return info


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def supported_levels(flags: str | None = None) -> list[str]:
    """The ISA levels this CPU can execute, best first ("native" always)."""
    if not _is_x86():
        return ["native"]
    have = set((cpuinfo()["flags"] if flags is None else flags).split())
    return ["native"] + [name for name, level in X86_LEVELS.items() if level.needs <= have]


def resolve_level(requested: str, flags: str | None = None) -> tuple[str, IsaLevel]:
    """(the level's name, the level whose model applies) for a TUNESEARCH_CPU_ISA value.
    Raises IsaError naming what the CPU supports."""
    name = (requested or "native").strip().lower()
    levels = supported_levels(flags)
    if name not in LEVEL_NAMES or (name != "native" and not _is_x86()):
        known = ", ".join(LEVEL_NAMES if _is_x86() else ["native"])
        raise IsaError(f"TUNESEARCH_CPU_ISA={requested}: unknown ISA level (known on "
                       f"{platform.machine()}: {known})")
    if name not in levels:
        raise IsaError(f"TUNESEARCH_CPU_ISA={requested}: this CPU cannot execute {name} "
                       f"(it supports: {', '.join(levels)})")
    if not _is_x86():
        return name, ARM_NEON
    best = next((X86_LEVELS[n] for n in levels[1:]), None)
    if name == "native":
        if best is None:  # an x86 below x86-64-v2: SSE2, 16 registers of 16 bytes
            return name, IsaLevel("sse2", "native", frozenset(), 16, 16, False)
        return name, best
    return name, X86_LEVELS[name]


# Tunings a compiler may know, newest first, by vendor and level: where the compiler does not
# know this CPU (GCC 12 on Zen 5), -march=native tunes for "generic", whose register allocation
# spilled a full register block's accumulators; the newest core of the vendor that runs the
# level, which the compiler knows, is tuned for instead.
KNOWN_TUNINGS = {
    "AuthenticAMD": {"avx512": ("znver5", "znver4", "icelake-server", "skylake-avx512"),
                     "avx2": ("znver5", "znver4", "znver3", "znver2", "haswell"),
                     "sse4": ("znver3", "znver2", "znver1", "nehalem")},
    "GenuineIntel": {"avx512": ("graniterapids", "sapphirerapids", "icelake-server",
                                "skylake-avx512"),
                     "avx2": ("alderlake", "skylake", "haswell"),
                     "sse4": ("skylake", "nehalem")},
}
UNKNOWN_CPU = frozenset({"", "generic", "x86-64", "intel"})


@functools.lru_cache(maxsize=None)
def native_cpu(cc: str) -> str | None:
    """The CPU the compiler tunes for under -march=native ("generic" or "x86-64" where it does
    not know this one); None where the compiler does not say (neither GCC nor clang)."""
    try:
        gcc = subprocess.run([cc, "-march=native", "-Q", "--help=target"],
                             capture_output=True, text=True, timeout=30)
        for line in gcc.stdout.splitlines():
            option, _, value = line.strip().partition(" ")
            if option == "-mtune=" and gcc.returncode == 0:
                return value.strip()
        clang = subprocess.run([cc, "-march=native", "-###", "-c", "-x", "c", os.devnull],
                               capture_output=True, text=True, timeout=30)
        words = clang.stderr.replace('"', " ").split()
        if "-target-cpu" in words:
            return words[words.index("-target-cpu") + 1]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return None


@functools.lru_cache(maxsize=None)
def _compiler_knows_tuning(cc: str, tuning: str) -> bool:
    try:
        return subprocess.run([cc, f"-mtune={tuning}", "-E", "-x", "c", os.devnull],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def known_tuning(cc: str, level: IsaLevel, vendor: str) -> str | None:
    """The newest core of this vendor (else Intel's) that runs the level and that the compiler
    knows; None where it knows none of them."""
    tunings = KNOWN_TUNINGS.get(vendor, KNOWN_TUNINGS["GenuineIntel"]).get(level.name, ())
    return next((t for t in tunings if _compiler_knows_tuning(cc, t)), None)


def compile_flags(name: str, level: IsaLevel, cc: str | None = None) -> list[str]:
    """The code generation flags of a level. The preferred vector width is set to the level's
    registers: the model's register blocks assume the compiler uses the whole register (GCC
    otherwise stays at 256 bits on some AVX-512 parts). Where the compiler does not know this
    CPU, the level's -march and a tuning it knows replace -march=native / -mtune=native, so
    the code does not depend on the compiler being newer than the CPU."""
    if not _is_x86():
        return ["-march=native"]
    resolved = native_cpu(cc) if cc else None
    tuning = "native"
    if resolved is not None and resolved.lower() in UNKNOWN_CPU:
        tuning = known_tuning(cc, level, cpuinfo()["vendor"]) or "generic"
    if name == "native" and tuning == "native":
        flags = ["-march=native"]
    else:
        flags = [f"-march={level.march}", f"-mtune={tuning}"]
    flags.append(f"-mprefer-vector-width={level.vector_bytes * 8}")
    return flags


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMGB ") or 0) * scale


def _cpu_list_count(text: str) -> int:
    count = 0
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            count += int(hi) - int(lo) + 1
        elif part:
            count += 1
    return max(count, 1)


def _sysfs_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[int, Cache]:
    caches: dict[int, Cache] = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            shared = index / "shared_cpu_list"
            caches[level] = Cache(
                size=_size((index / "size").read_text()),
                ways=int((index / "ways_of_associativity").read_text() or 0) or 8,
                line=int((index / "coherency_line_size").read_text() or 0) or 64,
                shared_by=_cpu_list_count(shared.read_text()) if shared.exists() else 1)
        except (OSError, ValueError):
            continue
    return caches


def _lscpu_caches() -> dict[int, Cache]:
    """The caches as `lscpu -C` reports them, where sysfs has none (some containers)."""
    try:
        out = subprocess.run(["lscpu", "-C", "-B", "-J"], capture_output=True, text=True,
                             timeout=10).stdout
        import json
        rows = json.loads(out)["caches"]
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        return {}
    caches: dict[int, Cache] = {}
    for row in rows:
        try:
            if row.get("type") not in ("Data", "Unified"):
                continue
            one, total = int(row["one-size"]), int(row["all-size"])
            caches[int(row["level"])] = Cache(one, int(row.get("ways") or 8),
                                              int(row.get("coherency-size") or 64),
                                              shared_by=max(1, total // max(one, 1)))
        except (KeyError, TypeError, ValueError):
            continue
    return caches


@functools.lru_cache(maxsize=None)
def caches() -> dict[int, Cache]:
    """Data caches by level (1, 2, 3) from sysfs, else lscpu; levels not found are absent."""
    return _sysfs_caches() or _lscpu_caches()


@functools.lru_cache(maxsize=None)
def physical_cores() -> int:
    seen = set()
    for topo in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            seen.add(((topo / "physical_package_id").read_text().strip(),
                      (topo / "core_id").read_text().strip()))
        except OSError:
            continue
    return len(seen) or os.cpu_count() or 1


def clock_ghz() -> float:
    """The core clock /proc/cpuinfo reports (2.5 where it reports none)."""
    try:
        return max(0.5, float(cpuinfo()["mhz"]) / 1000)
    except ValueError:
        return 2.5


def target_for(family: str, level: IsaLevel, threads: int, fork_join_s: float = 0.0) -> Target:
    """The model of this CPU, for the knobs of a space family (the CPU device's: "cpu"), with
    kernels generated for level and shared over threads."""
    found, defaults = caches(), Target(family)
    # two FMA pipes on every x86 core with FMA since Haswell and Zen, and on the common ARM
    # cores; without FMA a multiply and a dependent add take about 7 cycles
    return Target(family, threads=threads, vector_bytes=level.vector_bytes,
                  vector_registers=level.vector_registers, fma_units=2,
                  fma_latency=4 if level.fma else 7, fma=level.fma, isa=level.name,
                  l1d=found.get(1, defaults.l1d), l2=found.get(2, defaults.l2),
                  l3=found.get(3, defaults.l3), cores=physical_cores(), ghz=clock_ghz(),
                  fork_join_s=fork_join_s)
