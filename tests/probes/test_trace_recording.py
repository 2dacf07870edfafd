"""The recorded traces the analysis tests read (tests/fixtures/traces/), and recording
itself: TensorFlow, run now, writes a trace that tftune reads as it reads the recorded
one. These are the only tests of the analysis that record with TensorFlow on every run;
every other reads the committed set of the installed TensorFlow (`trace_case`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import recorded_traces as rt
import tracegen
from conftest import requires_tf

from tftune.probes.advice.analysis import Analysis, analyze
from tftune.probes.traces import locate, steps, trace_file

# Recorded live: the plainest pipeline (markers, a py_function map), and Keras' own
# per-batch markers inside `fit`, which a new Keras or TensorFlow may name differently.
LIVE = ["latency_py", "keras_markers"]


def _shape(a: Analysis) -> dict[str, object]:
    """What a trace shows that does not move with the machine's load: how its steps were
    found, how many, and the pipeline's stages (the rewritten tf.data graph)."""
    data = a.to_json()
    return {
        "step_detection": data["step_detection"],
        "steps": data["steps"]["count"],
        "stages": sorted(s["name"] for s in data["stages"]),
        "device": data["device"],
    }


@requires_tf
@pytest.mark.slow
@pytest.mark.parametrize("name", LIVE)
def test_tensorflow_writes_a_trace_tftune_reads_as_it_reads_the_recorded_one(
    name: str, tmp_path: Path
) -> None:
    case = rt.all_cases()[name]
    logdir = tracegen.record(case, tmp_path)
    run = locate.locate(logdir)
    host = trace_file.load_host(run.hosts[0].path)
    assert host.host_plane is not None
    names = set(host.host_plane.event_names.values())
    assert any(n.startswith("Iterator::Root") for n in names)
    st = steps.detect_steps(host)
    assert st.detection == "markers" and len(st) == case.steps
    live = _shape(analyze(logdir))
    found = rt.load_set(rt.TRACES / rt.series(rt.installed_tensorflow() or ""))
    if found is None or name in found.stale(rt.all_cases()):
        pytest.skip(f"no current recording of {name} for this TensorFlow to compare with")
    recorded = _shape(analyze(found.unpack(name, tmp_path / "recorded")))
    assert live == recorded, f"{found.path.name} no longer shows what TensorFlow writes now"


def test_the_installed_tensorflows_set_is_current() -> None:
    """Every case has a recording made from its present source and parameters; a case
    changed without recording it again fails here (and `trace_case` records it live)."""
    version = rt.installed_tensorflow()
    if version is None:
        pytest.skip("tensorflow is not installed: no set of its own to check")
    found = rt.load_set(rt.TRACES / rt.series(version))
    if found is None:
        pytest.skip(f"no recorded set for TensorFlow {version}: {rt.RECORD_COMMAND}")
    stale = found.stale(rt.all_cases())
    assert not stale, f"{found.path.name} is stale for {stale}; record: {rt.RECORD_COMMAND}"
    assert set(found.manifest["cases"]) == set(rt.all_cases()), "cases that are gone"
    assert found.manifest["tensorflow"].startswith(version.rsplit(".", 1)[0])


@pytest.mark.parametrize("found", rt.committed_sets(), ids=lambda s: s.path.name)
def test_a_committed_set_says_what_recorded_it_and_unpacks(
    found: rt.TraceSet, tmp_path: Path
) -> None:
    m = found.manifest
    assert found.path.name == rt.series(m["tensorflow"])
    assert m["python"] and m["command"] == rt.RECORD_COMMAND and m["compression"] == "xz"
    for name, entry in m["cases"].items():
        logdir = found.unpack(name, tmp_path / name)
        files = [p for p in logdir.rglob("*") if p.is_file()]
        assert sum(f.stat().st_size for f in files) == entry["bytes"]
        assert any(f.name.endswith(".xplane.pb") for f in files), name
    packed = sum(p.stat().st_size for p in found.path.rglob("*") if p.is_file())
    assert packed < 5_000_000, f"{found.path.name} holds {packed / 1e6:.1f} MB: record less"


def test_a_tensorflow_without_a_set_records_live_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rt, "TRACES", tmp_path)
    monkeypatch.setattr(rt, "installed_tensorflow", lambda: "9.99.0")
    found, why = rt.set_for_tests()
    assert found is None
    assert "no recorded traces for TensorFlow 9.99.0" in why and "recording live" in why
    assert rt.RECORD_COMMAND in why


def test_without_tensorflow_the_newest_set_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for series in ("tf-2.9", "tf-2.21", "tf-2.10"):
        (tmp_path / series).mkdir()
        (tmp_path / series / rt.MANIFEST).write_text(json.dumps({"cases": {}}))
    monkeypatch.setattr(rt, "TRACES", tmp_path)
    monkeypatch.setattr(rt, "installed_tensorflow", lambda: None)
    found, why = rt.set_for_tests()
    assert found is not None and found.path.name == "tf-2.21"
    assert "tensorflow is not installed" in why


def test_a_case_changed_since_its_recording_is_stale() -> None:
    case = tracegen.CASES["latency_py"]
    record = rt.CaseRecord.of(case)
    found = rt.TraceSet(Path("unused"), {"cases": {"latency_py": asdict(record)}})
    assert found.stale({"latency_py": case}) == []
    edited = tracegen.Case(case.name, case.source + "\n# edited\n", steps=case.steps)
    assert found.stale({"latency_py": edited}) == ["latency_py"]
    fewer = tracegen.Case(case.name, case.source, steps=case.steps - 1)
    assert found.stale({"latency_py": fewer}) == ["latency_py"]
