"""Every setting tunesearch reads from the environment, read in this one place.

DEBUG=1 schedule summary, 2 one line per kernel run, 3 the applied config, 4 the generated source.
GRAPH=1 writes a Graphviz file of the kernels that ran.
"""
from __future__ import annotations

import os
from pathlib import Path

from tunesearch.errors import SettingError, UserError

MAX_THREADS = 4096  # more than any machine has: a larger value is a typo
MAX_TRIALS = 2 ** 31 - 1  # the most trials --trials takes


def _int(name: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
    value = os.environ.get(name, "")
    try:
        number = int(value) if value.strip() else default
    except ValueError:
        raise SettingError(f"environment variable {name}={value!r} must be an integer") from None
    if minimum is not None and number < minimum or maximum is not None and number > maximum:
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise SettingError(f"environment variable {name}={value!r} must be {bounds}")
    return number


def debug() -> int:
    """The DEBUG level (0 to 4)."""
    return _int("DEBUG", 0, minimum=0, maximum=4)


def graph() -> bool:
    return _int("GRAPH", 0, minimum=0, maximum=1) > 0


def graph_path() -> Path:
    return Path(os.environ.get("GRAPH_PATH", "tunesearch_graph.dot"))


def default_device() -> str:
    return os.environ.get("TUNESEARCH_DEVICE", "").strip() or "cpu"


def cache_path() -> Path:
    """The cache folder's path (XDG cache), not created."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    xdg = xdg if xdg and os.path.isabs(xdg) else os.path.expanduser("~/.cache")
    return Path(os.environ.get("TUNESEARCH_CACHE") or os.path.join(xdg, "tunesearch"))


def cache_dir() -> Path:
    """Where compiled kernels and the default database live (XDG cache), created if needed."""
    path = cache_path()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SettingError(f"cannot create the cache folder {path} (TUNESEARCH_CACHE): "
                           f"{err.strerror or err}") from None
    return path


def db_url() -> str | None:
    """The database URL from TUNESEARCH_DB, or None for the default SQLite file."""
    return os.environ.get("TUNESEARCH_DB") or None


def use_db() -> bool:
    """TUNESEARCH_NODB=1 turns the runtime's database lookups off."""
    return _int("TUNESEARCH_NODB", 0, minimum=0, maximum=1) == 0


def tune_on_miss() -> int:
    """TUNESEARCH_TUNE=N tunes a kernel with N trials when the runtime finds no record (off: 0)."""
    return _int("TUNESEARCH_TUNE", 0, minimum=0, maximum=MAX_TRIALS)


def graph_rewrites() -> bool:
    """TUNESEARCH_REWRITE=0 turns off the graph rewrites at model load (onnx/rewrite.py): every
    node then runs as written, which a comparison of the two can use."""
    return _int("TUNESEARCH_REWRITE", 1, minimum=0, maximum=1) == 1


def cpu_threads() -> int:
    """TUNESEARCH_THREADS: the CPU threads the space may use (default: every core); 1 to 4096."""
    return _int("TUNESEARCH_THREADS", os.cpu_count() or 1, minimum=1, maximum=MAX_THREADS)


def cpu_isa() -> str:
    """TUNESEARCH_CPU_ISA: the ISA level CPU kernels are generated for: native (default),
    avx512, avx2 or sse4 (x86-64-v4/v3/v2), so a smaller machine's code can be built and
    measured here."""
    return os.environ.get("TUNESEARCH_CPU_ISA", "").strip().lower() or "native"


DEFAULT_SPIN = 10000


def omp_spin() -> int:
    """TUNESEARCH_OMP_SPIN: how long an idle worker of the CPU's thread pool spins before it
    sleeps, in rounds of a pause instruction (default 10000, a fraction of a millisecond:
    long enough to catch the next kernel of a model, short enough not to hold a busy
    machine's core). 0 sleeps at once; "openmp", from when the pool was OpenMP's, is the
    default."""
    value = os.environ.get("TUNESEARCH_OMP_SPIN", "").strip().lower()
    if value == "openmp":
        return DEFAULT_SPIN
    return _int("TUNESEARCH_OMP_SPIN", DEFAULT_SPIN, minimum=0, maximum=1 << 30)


def cuda_driver() -> str:
    """TUNESEARCH_CUDA_DRIVER: "cuda-python" or "pycuda" (empty: the first that works)."""
    return os.environ.get("TUNESEARCH_CUDA_DRIVER", "").strip().lower()


def check() -> None:
    """Read every numeric setting once, so that a value out of its range is one line before a
    command does any work, not an error halfway or a value quietly taken; the same for the
    device's name and the paths settings give (see `check_paths`)."""
    for read in (debug, graph, use_db, tune_on_miss, graph_rewrites, cpu_threads, omp_spin):
        read()
    device = os.environ.get("TUNESEARCH_DEVICE", "")
    if device:
        from tunesearch.runtime.device import DEVICES  # the registry, imported when asked
        if device.split(":")[0].lower() not in DEVICES:
            raise SettingError(f"environment variable TUNESEARCH_DEVICE={device!r} is not a "
                               f"device; known devices: {', '.join(DEVICES)}")
    check_paths()


def check_paths() -> None:
    """The paths settings give, checked for what the system and the database can take: the
    cache folder and the database go into SQLite URLs and compiler command lines (UTF-8)."""
    from tunesearch.paths import check_database, check_path
    try:
        where = "TUNESEARCH_CACHE" if os.environ.get("TUNESEARCH_CACHE") else "XDG_CACHE_HOME, HOME"
        check_path(cache_path(), f"the cache folder ({where})", utf8=True)
        if db_url():
            check_database(db_url(), "TUNESEARCH_DB")
        if graph():
            check_path(graph_path(), "GRAPH_PATH")
    except UserError as err:
        raise SettingError(str(err)) from None
