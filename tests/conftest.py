"""Shared test fixtures.

Traces are recorded with real TensorFlow, once per test session, by the cases of
`tests/tracegen.py` (`trace_case`); tests that need TensorFlow skip cleanly where it is not
installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def has_tensorflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


NO_TENSORFLOW = "tensorflow is not installed"
requires_tf = pytest.mark.skipif(not has_tensorflow(), reason=NO_TENSORFLOW)

# What leaves a test out of the quick lane (`-m "not slow"`) besides its own `slow` mark:
# TensorFlow at run time, a trace recorded for it, the installed CLI in a subprocess, a
# browser. The quick lane is the pure-Python part of the suite.
SLOW_FIXTURES = frozenset({"trace_case", "run_cli"})


def _is_slow(item: pytest.Item) -> bool:
    if "browser" in item.keywords or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return any(
        m.name == "skipif" and m.kwargs.get("reason") == NO_TENSORFLOW for m in item.iter_markers()
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_visible = (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )
    for item in items:
        if "gpu" in item.keywords and not gpu_visible:
            item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU visible"))
        if "slow" not in item.keywords and _is_slow(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def run_cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run the installed `tftune` entry point as a user would, in a subprocess."""

    def _run(
        *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if env:
            full_env.update(env)
        return subprocess.run(
            [sys.executable, "-m", "tftune", *args],
            cwd=cwd or tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
        )

    return _run


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL server for the session (`tests/pgserver.py`): its URL."""
    from pgserver import postgres_server, server_bin

    if server_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL server binaries are missing on CI")
        pytest.skip("PostgreSQL server binaries are not installed")
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def trace_case(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """`trace_case(name) -> logdir`: record a tests/tracegen.py case once per session."""
    if not has_tensorflow():
        pytest.skip("tensorflow is not installed: cannot record traces")
    sys.path.insert(0, str(Path(__file__).parent))
    import tracegen

    cache: dict[str, Path] = {}

    def _get(name: str) -> Path:
        if name not in cache:
            cache[name] = tracegen.record(tracegen.CASES[name], tmp_path_factory.mktemp(name))
        return cache[name]

    return _get
