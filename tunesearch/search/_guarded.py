"""Buffers in host memory fenced by inaccessible pages, for the runner process.

Each buffer gets a mapping of its own: a guard zone of PROT_NONE pages, then the buffer's pages,
then another guard zone. The data ends exactly where the back guard begins, so a write (or a
read) one element past the end faults at once; in front of the data, in the part of its first
page it does not fill, lies the slack:

    [ guard zone | slack | data ][ guard zone ]
                   ^ canary (output) or read-only (input)

An output's slack holds a canary that is checked after the run (a write just before the start
is seen even where it does not fault; one further back hits the front guard). An input is mapped
read-only once its values are in, slack included, so any write into it faults. A fault kills the
runner process: the candidate fails, and the runner starts again with fresh buffers.
"""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
GUARD_BYTES = 1 << 20  # address space only: PROT_NONE pages are never backed by memory
CANARY_BYTE = 0xA5
_PROT_NONE, _PROT_READ = 0, 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _protect(address: int, length: int, prot: int) -> None:
    if length and _libc.mprotect(address, length, prot) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mprotect failed: {errno}")


class GuardedArray:
    """`size` elements of `dtype` between guard zones (see the module docstring).

    `array` is the data (a numpy view whose address never changes); `read_only()` seals it,
    `canary_intact()` says whether the slack in front of it is as it was.
    """

    def __init__(self, size: int, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        nbytes = max(size, 1) * self.dtype.itemsize
        self.pages = -(-nbytes // PAGE) * PAGE
        guard = -(-GUARD_BYTES // PAGE) * PAGE
        self._map = mmap.mmap(-1, guard + self.pages + guard,
                              flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        whole = np.frombuffer(self._map, np.uint8)
        self._base = whole.ctypes.data
        self._start = guard  # first byte of the buffer's pages
        self._data = guard + self.pages - nbytes  # first byte of the data
        self._slack = whole[self._start:self._data]  # the part of the first page before it
        self._slack[:] = CANARY_BYTE
        self.array = np.frombuffer(self._map, self.dtype, max(size, 1), self._data)[:size]
        self.address = self._base + self._data
        del whole
        _protect(self._base, guard, _PROT_NONE)
        _protect(self._base + guard + self.pages, guard, _PROT_NONE)

    def read_only(self) -> None:
        """From now on a write to the data (or its slack) faults."""
        _protect(self._base + self._start, self.pages, _PROT_READ)
        self.array.flags.writeable = False

    def reset_canary(self) -> None:
        """Write the canary again (before each candidate: the last one may have spoilt it)."""
        self._slack[:] = CANARY_BYTE

    def canary_intact(self) -> bool:
        """Whether the slack in front of the data still holds the canary."""
        return bool(np.all(self._slack == CANARY_BYTE))
