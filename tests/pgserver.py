"""A throwaway PostgreSQL server on loopback for the shared-storage tests.

Debian's server binaries live in /usr/lib/postgresql/<version>/bin. The server refuses to
run as root, so when the tests run as root (as CI does) it runs as the `postgres` user
that Debian's package creates. `.ci/run` installs the package; locally the tests skip
when no server is installed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

STARTUP_TIMEOUT_S = 30.0


def server_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a fresh cluster on 127.0.0.1 and yield its SQLAlchemy URL; stop it after."""
    bindir = server_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="tftune-pg-"))
    data = root / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    port = _free_port()
    subprocess.run(
        _as_server_user(
            [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]
        ),
        check=True,
        capture_output=True,
    )
    log = root / "server.log"
    subprocess.run(
        _as_server_user(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-w",
                "-t",
                str(int(STARTUP_TIMEOUT_S)),
                "-o",
                f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=100",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_server_user(
                [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            ),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
