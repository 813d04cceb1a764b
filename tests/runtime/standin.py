"""The stand-in CUDA driver library (standin_cuda.c), built with the C compiler for a test session,
and scenarios (standin_scenarios.py) run against it in processes of their own.

A process binds its driver library once (cuda-python looks for libcuda.so.1 on first use, the
loader reads LD_LIBRARY_PATH at start), so the stand-in is put first on LD_LIBRARY_PATH of a new
process, and the test process itself never sees it: its own tests still find no GPU.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SOURCE = HERE / "standin_cuda.c"
PYCUDA = HERE / "standin_pycuda"


def build(folder: Path) -> Path | None:
    """libcuda.so.1 from the stand-in's source in folder; None without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    library = folder / "libcuda.so.1"
    subprocess.run([cc, "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1",
                    str(SOURCE), "-o", str(library), "-lpthread"], check=True,
                   capture_output=True, text=True)
    return folder


def environment(folder: Path, pycuda: bool = False, **settings: object) -> dict[str, str]:
    """This process's environment with the stand-in first on the library path; settings
    become STANDIN_CUDA_<NAME> (version=12080 sets STANDIN_CUDA_VERSION)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(folder), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    paths = [str(PYCUDA)] if pycuda else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    if pycuda:
        env["TUNESEARCH_CUDA_DRIVER"] = "pycuda"
    for name, value in settings.items():
        env[f"STANDIN_CUDA_{name.upper()}"] = str(value)
    return env


def run(folder: Path, scenario: str, *args: object, pycuda: bool = False, timeout: float = 300,
        **settings: object) -> dict:
    """What standin_scenarios.<scenario>(*args) returns, run in a new process on the stand-in."""
    code = ("import json, sys\nfrom tests.runtime import standin_scenarios as s\n"
            f"print(json.dumps(s.{scenario}(*{args!r})))")
    done = subprocess.run([sys.executable, "-c", code], env=environment(folder, pycuda, **settings),
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        raise AssertionError(f"scenario {scenario} failed ({done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
