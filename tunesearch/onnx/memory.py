"""Memory a model's call needs, checked against what the machine can give before it is allocated.

Linux hands out memory it does not have and ends the process later (the OOM killer, SIGKILL), so
an input too large to fit is refused here, in one line, rather than found out by a crash:

    check_fits(least_bytes, "inputs x (500000000x4 float32)")   # InputError when it cannot fit

The figures are lower bounds (every input twice: the caller's array and the plan's buffer, and
the largest kernel with its operands), so a run that is refused could not have fitted; one that
passes may still need more.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Optional

from tunesearch.errors import InputError


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes ({} where there is none)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def _cgroup_room() -> Optional[int]:
    """What the process's cgroup (v2) lets it allocate beyond what the cgroup uses now."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        folder = Path("/sys/fs/cgroup") / line.partition("::")[2].lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        used = int((folder / "memory.current").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def _process_bytes() -> tuple[int, int]:
    """This process's address space and resident memory (it may use that again, as it frees)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
        virtual, resident = int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return 0, 0
    page = os.sysconf("SC_PAGE_SIZE")
    return virtual * page, resident * page


def available_bytes() -> Optional[int]:
    """The most memory this process can hold: what it holds now plus what the machine (its
    cgroup, its address-space limit) can still give; None where the system does not say."""
    info = _meminfo()
    if "MemAvailable" not in info:
        return None
    room = info["MemAvailable"] + info.get("SwapFree", 0)
    cgroup = _cgroup_room()
    if cgroup is not None:
        room = min(room, cgroup)
    virtual, held = _process_bytes()
    most = room + held
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:  # `ulimit -v`: what is left of the address space
        most = min(most, held + max(soft - virtual, 0))
    return most


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_fits(needed: int, what: str) -> None:
    """Refuse, before it is allocated, work whose memory cannot fit: `what` names it."""
    most = available_bytes()
    if most is not None and needed > most:
        raise InputError(f"{what} need at least {size_text(needed)} of memory; this machine can "
                         f"give the process {size_text(most)}; give smaller shapes "
                         "(--input-shape)")
