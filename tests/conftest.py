"""Shared test fixtures."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

PG_URL_ENV = "TUNESEARCH_TEST_PG_URL"


def pytest_configure(config):
    """Ctrl-C as a terminal delivers it, also where the tests were started as a background job
    (`cmd &` in a script starts it with SIGINT ignored, and Python then keeps it ignored, as
    tunesearch does): the Ctrl-C tests send it to this process and to commands started from
    it, which get Python's own handler back on exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _postgres_bindir() -> Path | None:
    """The newest PostgreSQL server binaries: Debian's versioned folders, else the PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                        key=lambda path: int(Path(path).parent.name)
                        if Path(path).parent.name.isdigit() else 0)
    for folder in reversed(candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    """A SQLAlchemy URL of a PostgreSQL server for this test session.

    `$TUNESEARCH_TEST_PG_URL` if set; otherwise a throwaway cluster (initdb + pg_ctl, trust auth,
    loopback only, fsync off) in a temporary folder, stopped and removed at the end. PostgreSQL
    refuses to run as root, so as root the cluster runs as the `postgres` user.
    """
    if os.environ.get(PG_URL_ENV):
        yield os.environ[PG_URL_ENV]
        return
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip(f"no PostgreSQL server binaries (initdb, pg_ctl) found; install PostgreSQL "
                    f"or set {PG_URL_ENV}")
    run_as: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="tunesearch-pg-"))
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder)
            pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL as")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", _free_port()

    def pg(*command: str) -> None:
        done = subprocess.run([*run_as, *command], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")

    try:
        pg(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
           "--encoding=UTF8", "--no-sync")
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {folder} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"),
           "-o", options, "-w", "-t", "60", "start")
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


# the count of generated fuzz cases, summed over xdist workers, in the run's summary
from tests.fuzz.counting import (  # noqa: E402,F401
    pytest_sessionfinish, pytest_terminal_summary, pytest_testnodedown,
)

