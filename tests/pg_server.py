"""A throwaway PostgreSQL server from the system's binaries (initdb + pg_ctl): trust auth,
loopback only, fsync off, in a temporary folder that is removed with it. The tests' `postgres_url`
fixture runs on one, and so does `scripts/bench_leases.py`.

    with throwaway_postgres(max_connections=100) as url:
        Store(url)   # postgresql+psycopg://postgres@127.0.0.1:PORT/postgres
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

from sqlalchemy.engine import make_url


class NoPostgres(Exception):
    """No server can start here; the message says why (a test skips on it)."""


def postgres_bindir() -> Path | None:
    """The newest PostgreSQL server binaries: Debian's versioned folders, else the PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                        key=lambda path: int(Path(path).parent.name)
                        if Path(path).parent.name.isdigit() else 0)
    for folder in reversed(candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def throwaway_postgres(max_connections: int = 60) -> Iterator[str]:
    """Start a server, yield its SQLAlchemy URL (database `postgres`), stop and remove it.

    PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
    NoPostgres where there are no binaries, or no such user to run them as.
    """
    bindir = postgres_bindir()
    if bindir is None:
        raise NoPostgres("no PostgreSQL server binaries (initdb, pg_ctl) found")
    run_as: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="tunesearch-pg-"))
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder)
            raise NoPostgres("running as root and there is no 'postgres' user to run "
                             "PostgreSQL as") from None
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()

    def pg(*command: str) -> None:
        done = subprocess.run([*run_as, *command], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")

    try:
        pg(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
           "--encoding=UTF8", "--no-sync")
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {folder} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off "
                   f"-c max_connections={max_connections}")
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


def server_version(url: str) -> str:
    """The server's version, e.g. "15.8"."""
    import psycopg  # here, so that suites with no PostgreSQL tests import without the driver
    with psycopg.connect(_libpq(url)) as connection:
        return connection.execute("SHOW server_version").fetchone()[0].split()[0]


def new_database(url: str, prefix: str = "ts") -> str:
    """Create an empty database on the server of `url`; its URL."""
    import psycopg
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_libpq(url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
