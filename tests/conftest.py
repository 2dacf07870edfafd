"""Shared test fixtures.

The traces the analysis tests read (`trace_case`) are the recorded set of the installed
TensorFlow, committed under tests/fixtures/traces/ (`tests/recorded_traces.py`); a case
with no current recording there is recorded live with real TensorFlow, once per test
session, by its case of `tests/tracegen*.py`. Tests that need TensorFlow skip cleanly
where it is not installed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import warnings
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
# TensorFlow at run time, a trace recorded for it (`trace_case` where no recorded set
# serves the installed TensorFlow), the installed CLI in a subprocess, a browser. The
# quick lane is the pure-Python part of the suite.
SLOW_FIXTURES = frozenset({"run_cli"})
# Set to 1 to record every trace live, even where a recorded set is committed.
LIVE_TRACES = "TFTUNE_LIVE_TRACES"


@functools.cache
def _records_live() -> bool:
    """Whether `trace_case` records with TensorFlow in this session: no current recorded
    set for the installed TensorFlow (or a stale case in it), or `LIVE_TRACES` asks."""
    import recorded_traces

    found = recorded_traces.set_for_tests()[0]
    stale = found is None or bool(found.stale(recorded_traces.all_cases()))
    return os.environ.get(LIVE_TRACES) == "1" or stale


def _is_slow(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    if "browser" in item.keywords or SLOW_FIXTURES & fixtures:
        return True
    if "trace_case" in fixtures and _records_live():
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


def pytest_report_header(config: pytest.Config) -> str:
    """Which traces `trace_case` serves, said once at the top of the run."""
    import recorded_traces

    why = recorded_traces.set_for_tests()[1]
    if os.environ.get(LIVE_TRACES) == "1":
        why = f"{LIVE_TRACES}=1: every trace is recorded live"
    return f"traces: {why}"


@pytest.fixture(scope="session")
def trace_case(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """`trace_case(name) -> logdir`: the case's recorded trace (from the set of the
    installed TensorFlow, tests/fixtures/traces/), unpacked once per session into its
    temporary folder; where that set has no current recording of the case, it is recorded
    live (tests/tracegen.py), with a warning that says so."""
    import recorded_traces
    import tracegen

    cases = recorded_traces.all_cases()
    found, why = recorded_traces.set_for_tests()
    if os.environ.get(LIVE_TRACES) == "1":
        found, why = None, f"{LIVE_TRACES}=1"
    stale = set(found.stale(cases)) if found is not None else set(cases)
    cache: dict[str, Path] = {}

    def _get(name: str) -> Path:
        if name in cache:
            return cache[name]
        out = tmp_path_factory.mktemp(name)
        if found is not None and name not in stale:
            cache[name] = found.unpack(name, out / "logdir")
            return cache[name]
        reason = why if found is None else f"{found.path.name} has no current recording of it"
        if not has_tensorflow():
            pytest.skip(f"trace {name}: {reason}, and tensorflow is not installed to record it")
        warnings.warn(f"trace {name} recorded live: {reason}", stacklevel=2)
        cache[name] = tracegen.record(cases[name], out)
        return cache[name]

    return _get
