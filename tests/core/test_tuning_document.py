"""The tuning document's one type tree (`core.tuning_document`): what tftune writes reads
back to an equal document and to the same JSON, the producer's document is what its JSON
reads back to, and a malformed document is one user-error line naming the field."""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from golden.make_tuning_input import SPACE, outcome
from repo_paths import FIXTURES, ROOT

from tftune.core.errors import UserError
from tftune.core.failures import CrashSummary, FailureKind
from tftune.core.run_record import Environment, Record
from tftune.core.sizing import ServiceSizing
from tftune.core.training import TrainingFacts, TrainingTime
from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_parts import ABSENT, ConfigSettings, MeasuredRate
from tftune.core.tuning_run import ScreenCandidate, ScreenRanking
from tftune.core.tuning_trials import Instability, TrialRow
from tftune.core.vocabulary import TrialState
from tftune.probes.advice.service_sizing import size_service
from tftune.reports import read_report_json
from tftune.tuner.output.assemble import RunFacts, tuning_document
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.trial.crashes import Run, crash_summary, find_instability

TUNING_FIXTURES = sorted(FIXTURES.glob("tuning_*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def as_written_json(data: Any) -> Any:
    """`data` as the file holds it (tuples become lists)."""
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("path", TUNING_FIXTURES, ids=lambda p: p.name)
def test_every_tuning_fixture_reads_back_to_the_same_json(path: Path) -> None:
    data = load(path)
    doc = TuningDocument.from_json(data, source=path.name)
    assert doc.to_json() == data
    assert json.dumps(doc.to_json(), indent=2) == json.dumps(data, indent=2)  # key order too
    assert TuningDocument.from_json(doc.to_json(), source=path.name) == doc


def test_an_older_document_keeps_its_absent_fields_absent() -> None:
    """tuning_latency.json predates ``instability``, a baseline's ``confirmed`` and a
    row's ``notes``/``stderr_tail``/``crash``/``training``: none is written back."""
    doc = TuningDocument.from_json(load(FIXTURES / "tuning_latency.json"))
    assert doc.instability is ABSENT and doc.run is None
    assert doc.baselines.as_written is not None and doc.baselines.as_written.confirmed is ABSENT
    row = doc.trials_detail[0]
    assert (row.notes, row.stderr_tail, row.crash, row.training) == (ABSENT,) * 4
    assert "instability" not in doc.to_json() and "notes" not in doc.to_json()["trials_detail"][0]


MACHINE = Environment(
    date="2026-12-01T00:00:00+00:00", python="3.11.7", python_executable="/usr/bin/python3",
    platform="Linux", cpu_model=None, cores=16, tensorflow="2.21.0", cuda=None, cudnn=None,
    gpus=(), gpu_note="NVML found no GPU", pip_freeze=("numpy==2.1.0",),
)  # fmt: skip
RECORD = Record(
    command="tftune optimize train.py", argv=("tftune", "optimize", "train.py"), cwd="/w",
    script="/w/train.py", script_args=(), script_sha256="0" * 64, seed=0, environment=MACHINE,
)  # fmt: skip


def _run_facts(screen: Any = ABSENT) -> RunFacts:
    stall = TrainingTime(preamble_s=12.5, excluded_s=1.5, epoch_stall_s=0.4, epochs_seen=2)
    return RunFacts(
        wall_s=1400.256,
        training=TrainingFacts(preamble_s=12.5, as_written=stall),
        record=RECORD,
        findings=("the output layer computes in float16",),
        advice="keep the output layer in float32",
        requires='keep the output layer in float32: `Dense(..., dtype="float32")`',
        screen=screen,
    )  # fmt: skip


def _producers_document(run: RunFacts | None, ceiling: Ceiling | None = None) -> TuningDocument:
    out = outcome()
    crash = crash_summary(FailureKind.NATIVE, signal="SIGSEGV", returncode=-11)
    runs = [Run(0, True, {}, crash), Run(6, False, {"threadpool_size": 64}, crash)]
    out = replace(out, instability=find_instability(runs))
    return tuning_document(
        script="train.py",
        outcome=out,
        space=SPACE,
        ceiling=ceiling or Ceiling(4200.0, None, None, "not measured (no model step seen)"),
        device="GPU",
        config_file="tftune-best.json",
        command="tftune run --config tftune-best.json train.py",
        diff="",
        snippet="",
        seed=0,
        run=run,
    )


@pytest.mark.parametrize("whole_run", [False, True], ids=["study alone", "whole run"])
def test_the_producers_document_is_what_its_json_reads_back_to(whole_run: bool) -> None:
    doc = _producers_document(_run_facts() if whole_run else None)
    written = as_written_json(doc.to_json())
    assert TuningDocument.from_json(written) == doc
    assert TuningDocument.from_json(written).to_json() == written
    assert isinstance(doc.instability, Instability) and doc.instability.as_written == 1
    assert doc.instability.sentence.startswith("the script is unstable on its own")
    if whole_run:
        assert doc.run is not None and doc.run.break_even is not None
        assert doc.best.requires == (_run_facts().requires,)
        assert written["wall_s"] == 1400.26 and written["notes"][-1].startswith("keep")
    else:
        assert doc.run is None and doc.best.requires is ABSENT
        assert "break_even" not in written and "requires" not in written["best"]


RANKED = ScreenRanking(3.5, None, (ScreenCandidate("as written", 120.5, busy_cores=1.5),))


@pytest.mark.parametrize("screen", [None, RANKED], ids=["none", "ranked"])
def test_the_screen_is_the_whole_runs_last_field(screen: ScreenRanking | None) -> None:
    doc = _producers_document(_run_facts(screen))
    written = as_written_json(doc.to_json())
    assert list(written)[-1] == "screen"
    assert written["screen"] == (None if screen is None else as_written_json(screen.to_json()))
    assert TuningDocument.from_json(written) == doc
    assert "screen" not in _producers_document(_run_facts()).to_json()


def test_every_part_is_a_typed_value_that_reads_back_equal() -> None:
    """The parts the producers above core make (training, record, break-even, sizing,
    screen, the winner's config, a crash) are the document's own types, not JSON."""
    sizing = size_service(
        pipeline_rate=900.0, busy_cores=7.5, model_rate=4000.0, host_cores=8, unit="examples"
    )
    ceiling = Ceiling(900.0, 4000.0, sizing=sizing)
    doc = _producers_document(_run_facts(RANKED), ceiling)
    run = doc.run
    assert run is not None and isinstance(run.training, TrainingFacts)
    assert run.record == RECORD and run.screen == RANKED and run.break_even is not None
    assert isinstance(doc.best.config, ConfigSettings) and doc.best.config.schema == 1
    assert doc.ceiling is not None and isinstance(doc.ceiling.sizing, ServiceSizing)
    assert doc.ceiling.sizing.more_workers == 4 and "4 more workers" in doc.ceiling.sizing.sentence
    written = as_written_json(doc.to_json())
    assert TuningDocument.from_json(written) == doc
    saved = TuningDocument.from_json(load(FIXTURES / "tuning_gpu_both.json"))
    crash = saved.trials_detail[6].crash
    assert isinstance(crash, CrashSummary) and crash.kind is FailureKind.NATIVE
    assert crash.key_lines[0] == crash.headline


def test_the_winners_speedup_is_the_producers_and_stored() -> None:
    doc = _producers_document(None)
    assert doc.best.speedup_vs_as_written == pytest.approx(1850.0 / 405.0, abs=5e-4)
    assert doc.to_json()["best"]["speedup_vs_as_written"] == doc.best.speedup_vs_as_written


def test_why_importances_are_withheld_is_written_only_when_they_are() -> None:
    """``importances_withheld``: the producer's reason where it gave no importances,
    absent (and not written back) where it gave them, as in every older document."""
    shown = _producers_document(None)
    assert shown.importances and shown.importances_withheld is ABSENT
    assert "importances_withheld" not in shown.to_json()
    why = "3 complete trials; importance is estimated from 10 on"
    out = replace(outcome(), importances={}, importances_withheld=why)
    doc = tuning_document(
        script="train.py", outcome=out, space=SPACE, ceiling=None, device="GPU",
        config_file="b.json", command="c", diff="", snippet="", seed=0,
    )  # fmt: skip
    written = as_written_json(doc.to_json())
    assert written["importances"] == {} and written["importances_withheld"] == why
    assert list(written).index("importances_withheld") == list(written).index("importances") + 1
    assert TuningDocument.from_json(written) == doc
    written["importances_withheld"] = ["3 trials"]
    with pytest.raises(UserError, match="importances_withheld"):
        TuningDocument.from_json(written)


def test_trial_states_are_read_in_tftunes_and_optunas_words() -> None:
    data = load(FIXTURES / "tuning_gpu_both.json")
    rows = data["trials_detail"]
    rows[0]["state"], rows[1]["state"], rows[2]["state"] = "FAIL", "COMPLETE", "RUNNING"
    del rows[3]["state"]
    doc = TuningDocument.from_json(data)
    states = [r.state for r in doc.trials_detail[:4]]
    assert states == [TrialState.FAILED, TrialState.COMPLETE, None, TrialState.COMPLETE]
    assert doc.trials_detail[2].state_word == "unfinished"
    assert doc.to_json()["trials_detail"][2]["state"] == "running"


def test_a_hand_made_minimal_document_reads() -> None:
    doc = TuningDocument.from_json(
        {"schema": 1, "objective": "throughput", "baselines": {}, "best": {}}
    )
    assert doc.best.measured == MeasuredRate()
    assert doc.trials_detail == () and doc.space is None and doc.ceiling is None
    assert doc.baselines.as_written is None and doc.instability is ABSENT
    row = TrialRow(3, value=0.5)
    assert row.to_json()["value"] == 0.5 and "notes" not in row.to_json()


MALFORMED = [
    (lambda d: d.pop("best"), "t.json: field 'best' is missing"),
    (lambda d: d.pop("baselines"), "t.json: field 'baselines' is missing"),
    (lambda d: d.update(schema=2), "t.json: field 'schema' is 2; this tftune reads schema 1"),
    (lambda d: d.update(objective="speed"), "t.json: field 'objective' must be one of"),
    (
        lambda d: d["trials_detail"][3].update(state="EXPLODED"),
        "t.json: field 'trials_detail[3].state' must be one of",
    ),
    (lambda d: d["trials_detail"][1].pop("number"), "t.json: field 'trials_detail[1].number'"),
    (lambda d: d["best"].update(config=[1]), "t.json: field 'best.config' must be an object"),
    (
        lambda d: d["best"]["config"]["sites"]["train.py:41"].update(num_parallel_calls=[8]),
        "t.json: field 'best.config.sites.train.py:41.num_parallel_calls' must be a knob's value",
    ),
    (
        lambda d: d["trials_detail"][6]["crash"].update(kind="exit"),
        "t.json: field 'trials_detail[6].crash.kind' must be one of native, exception, killed",
    ),
    (
        lambda d: d["trials_detail"][6]["crash"].pop("headline"),
        "t.json: field 'trials_detail[6].crash.headline' is missing",
    ),
    (
        lambda d: d["ceiling"].update(service_sizing={"sized": False, "reason": "x"}),
        "t.json: field 'ceiling.service_sizing.reason' must be one of python, waiting",
    ),
    (
        lambda d: d.update(break_even={"tuning_s": "long"}),
        "t.json: field 'break_even.tuning_s' must be a number",
    ),
    (
        lambda d: d.update(training={"as_written": {"stall": {"stall_s": 1.0}}}),
        "t.json: field 'training.as_written.stall.steps_per_epoch' is missing",
    ),
    (lambda d: d.update(study={"seed": "seven"}), "t.json: field 'study.seed' must be an integer"),
    (
        lambda d: d["importances"].update(batch_size="high"),
        "t.json: field 'importances.batch_size' must be a number",
    ),
    (
        lambda d: d["baselines"]["autotune"].update(utilization=3),
        "t.json: field 'baselines.autotune.utilization' must be a fraction",
    ),
    (
        lambda d: d.update(instability={"sentence": "s", "trials": ["x"]}),
        "t.json: field 'instability.trials[0]' must be an integer, got \"x\"",
    ),
    (lambda d: d["space"]["knobs"][0].pop("name"), "t.json: field 'space.knobs[0].name'"),
    (lambda d: d.update(notes="x"), "t.json: field 'notes' must be a list"),
]


@pytest.mark.parametrize(("mutate", "message"), MALFORMED)
def test_a_malformed_document_is_one_line_naming_the_field(mutate: Any, message: str) -> None:
    bad = copy.deepcopy(load(FIXTURES / "tuning_gpu_both.json"))
    mutate(bad)
    with pytest.raises(UserError) as from_json:
        TuningDocument.from_json(bad, source="t.json")
    assert str(from_json.value).startswith(message) and "\n" not in str(from_json.value)
    with pytest.raises(UserError) as report:  # what `tftune report` reads a JSON with
        read_report_json(bad, source="t.json")
    assert str(report.value) == str(from_json.value)


def test_a_document_that_is_not_an_object_is_one_line() -> None:
    with pytest.raises(UserError, match=r"^t\.json: expected a JSON object at the top level$"):
        TuningDocument.from_json([], source="t.json")  # type: ignore[arg-type]


def test_each_document_class_name_is_defined_once() -> None:
    """The tuner's computation types (the measured run, the search-space knob) and the
    document's types have different names; the instability is the document's alone."""
    names: dict[str, list[str]] = {}
    for folder in ("core", "probes", "reports", "tuner", "tftune"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    names.setdefault(node.name, []).append(path.relative_to(ROOT).as_posix())
    for name in ("Instability", "Knob", "Measurement", "MeasuredRate", "KnobChoices"):
        assert len(names.get(name, [])) == 1, (name, names.get(name))
    assert names["Instability"] == ["core/tuning_trials.py"]
