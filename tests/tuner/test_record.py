"""The reproducibility record in tftune-best.json and the tuning JSON, and the warning
`tftune run --config` gives on a machine that differs from the one the config was tuned on."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, requires_tf

from tftune.probes.live.environment import cpu_model, nvml_gpus
from tftune.tuner.output.repro import (
    current_environment_cheap,
    environment_differences,
    installed_tensorflow,
)
from tftune.tuner.searchspace.config import Config, save_config

EXAMPLE = ROOT / "examples" / "latency_bound.py"
RunCli = Callable[..., subprocess.CompletedProcess[str]]


@requires_tf
@pytest.mark.slow
def test_record_fields_of_a_cpu_run(tmp_path: Path) -> None:
    """A real optimize run (real discovery, real machine record; the trials faked): every
    field of the record is present and equals what this machine and Python say."""
    import tftune
    from tftune.testing import FakeRunner

    fake = FakeRunner(lambda c: 100.0 * (c.threadpool_size or 1), repeats=1)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    tftune.optimize(
        EXAMPLE,
        ["--steps", "10"],
        trials=5,
        seed=7,
        runner=fake,
        bounds=False,
        storage=str(tmp_path / "s.journal"),
        best_file=tmp_path / "best.json",
        json_file=tmp_path / "t.json",
        html_file=None,
    )
    after = dt.datetime.now(dt.timezone.utc)
    best = json.loads((tmp_path / "best.json").read_text())
    tuning = json.loads((tmp_path / "t.json").read_text())
    rec = best["meta"]["record"]
    assert tuning["record"] == rec  # one record, in both files

    # How it was run: the API call with the script, its arguments and the seed.
    assert rec["command"].startswith(f"tftune.optimize({str(EXAMPLE)!r}, ['--steps', '10']")
    assert "seed=7" in rec["command"] and rec["seed"] == 7
    assert rec["cwd"] == os.getcwd()
    assert rec["script"]["path"] == str(EXAMPLE)
    assert rec["script"]["args"] == ["--steps", "10"]
    assert rec["script"]["sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert before <= dt.datetime.fromisoformat(rec["date"]) <= after

    env = rec["environment"]
    assert env["date"] == rec["date"]
    assert env["python"] == platform.python_version()
    assert env["platform"] == platform.platform()
    assert env["cpu_model"] == cpu_model() and env["cpu_model"]
    assert env["cores"] == len(os.sched_getaffinity(0))
    assert env["tensorflow"] == importlib.metadata.version("tensorflow")
    # CUDA and cuDNN as TensorFlow's build names them (null for a CPU-only build).
    probe = (
        "import json, tensorflow as tf; i = tf.sysconfig.get_build_info(); "
        "print(json.dumps([i.get('cuda_version'), i.get('cudnn_version')]))"
    )
    built = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    cuda, cudnn = json.loads(built.stdout.strip().splitlines()[-1])
    assert (env["cuda"], env["cudnn"]) == (cuda or None, cudnn or None)
    # GPUs as NVML names them; none here (a CPU run): an empty list and the reason.
    gpus, why = nvml_gpus()
    assert env["gpus"] == [dataclasses.asdict(g) for g in gpus]
    assert env["gpu_note"] == why and (gpus or why)
    freeze = env["pip_freeze"]
    assert f"tensorflow=={env['tensorflow']}" in freeze
    assert any(line.startswith("optuna==") for line in freeze)


def _config_with_record(path: Path, environment: dict[str, Any]) -> Path:
    meta = {"record": {"command": "tftune optimize train.py", "environment": environment}}
    return save_config(Config(threadpool_size=2, meta=meta), path)


def test_cheap_environment_reads_no_pip_freeze() -> None:
    env = current_environment_cheap()
    assert env.pip_freeze == ()
    assert env.cores == len(os.sched_getaffinity(0))
    assert env.python == platform.python_version()
    try:
        version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        version = None
    assert env.tensorflow == version == installed_tensorflow("python").get("version")


def test_no_record_no_check() -> None:
    def never() -> Any:
        raise AssertionError("the machine must not be read without a record")

    assert environment_differences({}, never) == []
    assert environment_differences({"record": "garbage"}, never) == []


def test_run_warns_on_a_machine_that_differs(tmp_path: Path, run_cli: RunCli) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    here = current_environment_cheap().to_json()
    other = dict(
        here,
        gpus=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "driver": "535.1", "memory_mib": 1}],
        tensorflow="2.15.1",
        cores=here["cores"] + 62,
    )
    cfg = _config_with_record(tmp_path / "best.json", other)
    out = run_cli("run", "--config", str(cfg), str(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "trained"
    (warning,) = [ln for ln in out.stderr.splitlines() if "tuned on a different machine" in ln]
    assert "GPU model: tuned on NVIDIA A100-SXM4-80GB, now no GPU" in warning
    assert "TensorFlow: tuned on 2.15.1" in warning
    assert f"CPU cores: tuned with {here['cores'] + 62}, now {here['cores']}" in warning
    assert str(cfg) in warning

    # The machine it was tuned on (a newer patch release of TF, as many cores): silent.
    version = here["tensorflow"] or "2.21.0"
    major_minor = ".".join(version.split(".")[:2])
    same = dict(here, tensorflow=f"{major_minor}.99")
    cfg = _config_with_record(tmp_path / "same.json", same)
    out = run_cli("run", "--config", str(cfg), str(script))
    assert out.returncode == 0, out.stderr
    assert "different machine" not in out.stderr


def test_apply_warns_too(tmp_path: Path) -> None:
    here = current_environment_cheap().to_json()
    cfg = _config_with_record(tmp_path / "best.json", dict(here, cores=here["cores"] * 8))
    code = "import tftune, sys; tftune.apply(sys.argv[1])"
    out = subprocess.run(
        [sys.executable, "-W", "always", "-c", code, str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "RuntimeWarning" in out.stderr and "CPU cores: tuned with" in out.stderr


def test_a_run_stopped_early_does_not_wait_for_the_machine_record() -> None:
    """The record's probes (TensorFlow's import, pip freeze) can take minutes on a loaded
    host: a run that exits before they finish (Ctrl-C) exits at once, and the record is
    still there for a run that asks for it."""
    code = (
        "import time, sys\n"
        "from tftune.tuner.optimize import _read_environment\n"
        "_read_environment(lambda: time.sleep(60))\n"
        "print('exiting', flush=True)\n"
        "sys.exit(130)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=40
    )  # a join of the record's thread at exit would run past the timeout
    assert out.returncode == 130 and "exiting" in out.stdout, out.stderr

    from tftune.tuner.optimize import _read_environment

    def fails() -> Any:
        raise OSError("no pip")

    assert _read_environment(lambda: "the record").result(timeout=10) == "the record"  # type: ignore[arg-type,return-value]
    with pytest.raises(OSError, match="no pip"):
        _read_environment(fails).result(timeout=10)
