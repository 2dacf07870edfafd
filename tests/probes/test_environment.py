"""The reproducibility record and the mismatch warning."""

from __future__ import annotations

import datetime as dt
import json
import sys

from conftest import requires_tf

from tftune.core.document_reading import Reader
from tftune.core.run_record import Environment, Gpu
from tftune.probes.live.environment import collect, differences


def _fixed() -> Environment:
    return collect(
        sys.executable,
        tf_info=lambda _py: {"version": "2.21.0", "cuda": None, "cudnn": None},
        gpus=lambda: ((Gpu(0, "NVIDIA H200", "570.1", 143771),), None),
        freeze=lambda _py: ["numpy==2.4.6", "tensorflow==2.21.0"],
        now=lambda: dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc),
    )


def test_record_fields_from_injected_readers() -> None:
    env = _fixed()
    rec = env.to_json()
    assert rec["date"] == "2026-11-30T12:00:00+00:00"
    assert rec["tensorflow"] == "2.21.0"
    assert rec["gpus"][0]["name"] == "NVIDIA H200" and rec["gpus"][0]["driver"] == "570.1"
    assert rec["pip_freeze"] == ["numpy==2.4.6", "tensorflow==2.21.0"]
    assert rec["cores"] >= 1 and rec["python"].count(".") == 2
    assert Environment.from_reader(Reader(json.loads(json.dumps(rec)), source="r")) == env


@requires_tf
def test_record_on_this_cpu_machine_is_real() -> None:
    env = collect(sys.executable)
    import platform

    assert env.python == platform.python_version()
    assert env.tensorflow is not None and env.tensorflow.startswith("2.")
    assert any(line.lower().startswith("tensorflow") for line in env.pip_freeze)
    # No GPU here: say why, never invent one.
    assert env.gpus == () and env.gpu_note


def test_differences_name_what_matters() -> None:
    now = _fixed()
    same = now.to_json()
    assert differences(same, now) == []
    older = dict(same, tensorflow="2.19.1", cores=now.cores + 14, gpus=[{"name": "NVIDIA A100"}])
    diffs = differences(older, now)
    assert any("GPU model" in d and "A100" in d and "H200" in d for d in diffs)
    assert any("TensorFlow" in d and "2.19.1" in d for d in diffs)
    assert any("CPU cores" in d for d in diffs)
    # A patch release of TensorFlow and more cores than before do not matter.
    newer = dict(same, tensorflow="2.21.3", cores=1)
    assert differences(newer, now) == []
