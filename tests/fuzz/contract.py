"""The contract every fuzz case is checked against, through the command line's `main` in this
process (a case costs milliseconds, not a Python start): exit code 2 with exactly one line on
stderr, nothing on stdout and no file created or changed; or, where the input is valid after all,
exit code 0 with no internal error and no file changed but those the command may write.

    outcome = run_cli(["run", str(model), "--repeat", "1"], folder, env={"TUNESEARCH_NODB": "1"})
    outcome.check()

The number of examples per test is bounded (fast enough for every run of the suite);
TUNESEARCH_FUZZ_EXAMPLES=2000 runs that many per test instead. The seed is fixed (derandomize).
"""
from __future__ import annotations

import hashlib
import io
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings

from tests.fuzz.counting import tried
from tunesearch.cli import main
from tunesearch.runtime import graphviz

# settings a case may not inherit from the shell that started the tests
_CLEARED = ("DEBUG", "GRAPH", "GRAPH_PATH", "TUNESEARCH_DB", "TUNESEARCH_NODB", "TUNESEARCH_TUNE",
            "TUNESEARCH_THREADS", "TUNESEARCH_OMP_SPIN", "TUNESEARCH_DEVICE",
            "TUNESEARCH_REWRITE", "TUNESEARCH_CPU_ISA")


def fuzz_settings(examples: int):
    """Hypothesis settings of a fuzz test: `examples` cases (TUNESEARCH_FUZZ_EXAMPLES instead,
    where set), a fixed seed, no example database (every run tries the same cases)."""
    wanted = os.environ.get("TUNESEARCH_FUZZ_EXAMPLES", "").strip()
    return settings(max_examples=int(wanted) if wanted else examples, derandomize=True,
                    database=None, deadline=None, suppress_health_check=list(HealthCheck))


def snapshot(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@dataclass
class Outcome:
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    before: dict[str, str]
    after: dict[str, str]
    may_change: tuple[str, ...] = field(default=())

    def check(self) -> None:
        where = f"{self.argv}: exit {self.code}, stderr {self.stderr[-2000:]!r}"
        assert self.code in (0, 2), where
        assert "Traceback" not in self.stderr and "internal error" not in self.stderr, where
        if self.code == 2:
            assert len(self.stderr.strip().splitlines()) == 1, where
            assert self.stdout == "", where
            assert self.after == self.before, f"{where}: files changed"
        else:
            changed = {name for name in set(self.before) | set(self.after)
                       if self.before.get(name) != self.after.get(name)}
            assert changed <= set(self.may_change), f"{where}: changed {sorted(changed)}"


def run_cli(argv: list[str], folder: Path, env: dict[str, str] | None = None,
            may_change: tuple[str, ...] = ()) -> Outcome:
    """Run `tunesearch argv` in `folder` (its working folder) with these settings, as a user
    would, and return what it did; the files of `folder` are compared before and after."""
    tried()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    for name in _CLEARED:
        os.environ.pop(name, None)
    os.environ["TUNESEARCH_DB"] = str(folder / "default.db")  # must not be created either
    os.environ.update(env or {})
    before = snapshot(folder)
    out, err = io.StringIO(), io.StringIO()
    os.chdir(folder)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit_:  # argparse refuses an argument this way
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        # a process renders its GRAPH=1 drawing when it exits, in its folder: this case's
        # folder is gone by then, so the drawing is forgotten as the case's process would be
        graphviz._saved.clear()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return Outcome(argv, code, out.getvalue(), err.getvalue(), before, snapshot(folder),
                   may_change)
