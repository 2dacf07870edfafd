"""The dashboards users know: a study tftune ran, read back through optuna-dashboard's
HTTP API (a real server on the study's journal), and the command `tftune optimize`
prints for it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from studykit import latency_bound, settings, space

from tftune._optimize_cli import dashboard_command
from tftune.testing import FakeRunner
from tftune.tuner.study import run_study

pytest.importorskip("optuna_dashboard")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, deadline: float) -> Any:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.mark.slow
def test_optuna_dashboard_reads_the_trials_back(tmp_path: Path) -> None:
    journal = tmp_path / "tftune-study.journal"
    out = run_study(
        space(),
        FakeRunner(latency_bound),
        settings(tmp_path, n_trials=6, storage=str(journal), study_name="tftune-train"),
    )
    port = _free_port()
    command = dashboard_command(str(journal)).split()
    assert command[:2] == ["optuna-dashboard", str(journal)]
    exe = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent))
    assert exe is not None
    server = subprocess.Popen(
        [exe, str(journal), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}/api/studies"
        summaries = _get(base, time.monotonic() + 60)["study_summaries"]
        (study,) = [s for s in summaries if s["study_name"] == "tftune-train"]
        detail = _get(f"{base}/{study['study_id']}?after=0", time.monotonic() + 30)
        trials = detail["trials"]
        finished = [r for r in out.records if r.role.value != "confirm"]
        assert len(trials) == len(finished)
        complete = [t for t in trials if t["state"] == "Complete"]
        best = max(v for t in complete for v in t["values"])
        assert best == pytest.approx(max(r.examples_per_s or 0 for r in finished))
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_printed_command_names_the_storage_and_redacts_nothing_new() -> None:
    assert dashboard_command("runs/study.journal") == "optuna-dashboard runs/study.journal"
    quoted = dashboard_command("my runs/study.journal")
    assert quoted == "optuna-dashboard 'my runs/study.journal'"
    url = dashboard_command("postgresql://me:***@db/tftune")
    assert "***" in url and url.startswith("optuna-dashboard ")


def test_the_summary_prints_the_install_hint_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's last line, where optuna-dashboard is missing: the extra's brackets
    are printed, not read as console markup."""
    import importlib.util
    import io

    from rich.console import Console
    from studykit import outcome_document

    from tftune._optimize_cli import _summary
    from tftune.tuner.optimize import OptimizeResult

    out = run_study(space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=6))
    result = OptimizeResult(
        out, space(), None, tmp_path / "b.json", None, None, "cmd", "", "", outcome_document(out)
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "optuna_dashboard" else real(name, *a),
    )
    buf = io.StringIO()
    _summary(Console(file=buf, width=200), result)
    last = buf.getvalue().strip().splitlines()[-1]
    assert last.startswith("every trial in a browser: optuna-dashboard ")
    assert last.endswith("(pip install 'tftune[dashboard]')"), last
