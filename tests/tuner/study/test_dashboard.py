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
from studykit import MAP, latency_bound, settings, space

from tftune._optimize_cli import dashboard_command
from tftune.testing import FakeRunner
from tftune.tuner.study import Objective, run_study
from tftune.tuner.study.contract import METRIC_NAMES
from tftune.tuner.study.objective import INTERNAL_ATTRS

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
    """What a user sees in optuna-dashboard's trial table, read back through its HTTP API:
    the objective named, each knob in the reports' words beside the raw parameter, and
    none of tftune's own bookkeeping among the user attributes."""
    journal = tmp_path / "tftune-study.journal"
    sp = space()
    out = run_study(
        sp,
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
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert detail["objective_names"] == list(METRIC_NAMES[Objective.THROUGHPUT])
    trials = detail["trials"]
    finished = [r for r in out.records if r.role.value != "confirm"]
    assert len(trials) == len(finished)
    complete = [t for t in trials if t["state"] == "Complete"]
    best = max(v for t in complete for v in t["values"])
    assert best == pytest.approx(max(r.examples_per_s or 0 for r in finished))
    for t in trials:
        attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
        assert not INTERNAL_ATTRS & set(attrs), sorted(attrs)
        raw = {p["name"]: p["param_external_value"] for p in t["params"]}
        assert {k.name for k in sp.knobs} <= set(attrs)
        for name, value in raw.items():  # the word beside the raw value Optuna keeps
            word = {"-1": "AUTOTUNE", "None": "as written"}.get(value, value)
            assert attrs[name] == word, (name, value, attrs[name])
    aw = next(t for t in trials if {"key": "role", "value": "as_written"} in t["user_attrs"])
    auto = next(t for t in trials if {"key": "role", "value": "autotune"} in t["user_attrs"])
    words = [
        {a["key"]: a["value"] for a in x["user_attrs"]}[knob]
        for x, knob in ((aw, "threadpool_size"), (auto, f"{MAP}/num_parallel_calls"))
    ]
    assert words == ["as written", "AUTOTUNE"]


def test_the_printed_command_names_the_storage_and_redacts_nothing_new() -> None:
    assert dashboard_command("runs/study.journal") == "optuna-dashboard runs/study.journal"
    quoted = dashboard_command("my runs/study.journal")
    assert quoted == "optuna-dashboard 'my runs/study.journal'"
    url = dashboard_command("postgresql://me:***@db/tftune")
    assert "***" in url and url.startswith("optuna-dashboard ")


def test_the_summary_prints_the_install_hint_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's dashboard hint, where optuna-dashboard is missing: the extra's
    brackets are printed, not read as console markup; below it, why its parameter
    importance means nothing for a study this small."""
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
    hint, why = buf.getvalue().strip().splitlines()[-2:]
    assert hint.startswith("every trial in a browser: optuna-dashboard ")
    assert hint.endswith("(pip install 'tftune[dashboard]')"), hint
    complete = out.counts()["complete"]
    assert out.importances == {} and out.importances_withheld is not None
    assert why == f"  its parameter importance means nothing here: {out.importances_withheld}"
    assert why.split(": ", 1)[1].startswith(f"{complete} complete trials; ")
