"""The analysis document: one type tree, written and read back the same.

`AnalysisDocument.to_json` is what `tftune analyze --json` writes; `from_json` reads it
back strictly. A document tftune wrote reads back equal, field for field and in order; an
older, hand-written one keeps every field it has; the producer's own document is what
its JSON reads back as; a malformed one is one line naming the file and the field.
"""

from __future__ import annotations

import ast
import copy
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import golden_traces
import pytest
from repo_paths import FIXTURES, ROOT, TESTS

from tftune.core.analysis_advice import Verdict
from tftune.core.analysis_document import AnalysisDocument
from tftune.core.errors import UserError
from tftune.core.userfiles import json_text
from tftune.core.vocabulary import Band
from tftune.probes.advice.analysis import analyze
from tftune.probes.live.training_record import write_clock_file
from tftune.probes.traces.callsites import write_sites

GOLDEN = sorted((TESTS / "golden").glob("*/analysis.json"))
OLDER = sorted(FIXTURES.glob("analysis_*.json"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.parent.name)
def test_what_tftune_wrote_reads_back_the_same(path: Path) -> None:
    data = load(path)
    doc = AnalysisDocument.from_json(data, source=path.name)
    assert doc.to_json() == data
    # ... in the same order: the same bytes as `tftune analyze --json` writes
    assert json.dumps(doc.to_json(), indent=1) + "\n" == path.read_text()
    assert json_text(doc.to_json()) == path.read_text()  # what the CLI writes
    assert AnalysisDocument.from_json(doc.to_json()) == doc


def _kept(older: Any, written: Any, where: str = "") -> list[str]:
    """Where `written` lost or changed a value that `older` holds."""
    if isinstance(older, dict):
        if not isinstance(written, dict):
            return [where]
        return [
            lost
            for k, v in older.items()
            for lost in (_kept(v, written[k], f"{where}.{k}") if k in written else [f"{where}.{k}"])
        ]
    if isinstance(older, list):
        if not isinstance(written, list) or len(written) != len(older):
            return [where]
        return [lost for i, v in enumerate(older) for lost in _kept(v, written[i], f"{where}[{i}]")]
    return [] if older == written else [where]


@pytest.mark.parametrize("path", OLDER, ids=lambda p: p.name)
def test_an_older_document_keeps_every_field_it_has(path: Path) -> None:
    data = load(path)
    doc = AnalysisDocument.from_json(data, source=path.name)
    written = doc.to_json()
    assert _kept(data, written) == []
    assert AnalysisDocument.from_json(written) == doc


def _analysis_logdir(tmp_path: Path, case: str) -> Path:
    run_dir = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    if case == "cpu_pyfunc":
        golden_traces.cpu_pyfunc().write(run_dir, host="vm")
        write_sites(run_dir, "train.py", golden_traces.CPU_PYFUNC_SITES)
    elif case == "cpu_epoch_stall":
        golden_traces.cpu_epoch_stall().write(run_dir, host="vm")
        write_clock_file(run_dir, golden_traces.EPOCH_STALL)
    else:
        getattr(golden_traces, case)().write(run_dir, host="gpuhost")
    return tmp_path


@pytest.mark.parametrize("case", ["cpu_pyfunc", "cpu_epoch_stall", "gpu_h2d", "gpu_compute"])
def test_the_producers_document_is_what_its_json_reads_back_as(tmp_path: Path, case: str) -> None:
    a = analyze(_analysis_logdir(tmp_path, case), tool_version="0+test")
    doc = a.document()
    data = a.to_json()
    assert data == doc.to_json()
    assert AnalysisDocument.from_json(json.loads(json.dumps(data))) == doc
    assert doc.verdict is a.findings.verdict and doc.timeline is a.timeline


def test_a_document_without_steps_reads_back_the_same(tmp_path: Path) -> None:
    run_dir = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    golden_traces.cpu_pyfunc(steps=0).write(run_dir, host="vm")
    doc = analyze(tmp_path).document()
    assert doc.steps.count == 0 and doc.verdict.level is None and doc.per_step == ()
    assert AnalysisDocument.from_json(json.loads(json.dumps(doc.to_json()))) == doc


def test_a_document_without_a_verdict_gets_the_one_its_share_says() -> None:
    data = load(GOLDEN[0])
    del data["verdict"]
    for bound, share, level in [(True, 0.62, Band.HIGH), (False, 0.01, Band.LOW)]:
        found = AnalysisDocument.from_json({**data, "input_bound": bound, "input_share": share})
        assert found.verdict == Verdict.derived(bound, share)
        assert found.verdict.level is level and f"{share * 100:.0f}%" in found.verdict.sentence
    # the analysis said input-bound, whatever the share: at least moderately
    said = AnalysisDocument.from_json({**data, "input_bound": True, "input_share": 0.01})
    assert said.verdict.level is Band.MODERATE
    unknown = AnalysisDocument.from_json({**data, "input_bound": None, "input_share": None})
    assert "not measured" in unknown.verdict.sentence


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("steps"), "'steps' is missing"),
        (lambda d: d["steps"].update(mean_ms="fast"), "'steps.mean_ms' must be a number"),
        (lambda d: d["steps"].update(count=None), "'steps.count' must be an integer"),
        (lambda d: d["bottlenecks"][0].pop("category"), "'bottlenecks[0].category' is missing"),
        (lambda d: d["bottlenecks"][0].update(share=1.7), "'bottlenecks[0].share'"),
        (lambda d: d.update(schema=2), "'schema' is 2"),
        (lambda d: d.update(input_bound="yes"), "'input_bound' must be true or false"),
        (lambda d: d["verdict"].update(level="severe"), "'verdict.level' must be one of"),
        (lambda d: d.update(stages={"a": 1}), "'stages' must be a list"),
        (lambda d: d["stages"][0].update(parallelism="1x"), "'stages[0].parallelism'"),
        (lambda d: d["stages"][0].update(depth=10**30), "'stages[0].depth' must be between"),
        (lambda d: d["stages"][0].update(top_ops=[["x"]]), "'stages[0].top_ops[0]' must be"),
        (lambda d: d["timeline"]["tracks"][0]["events"].append([1.0]), "'timeline.tracks[0]"),
        (lambda d: d["timeline"].update(end_ms=-5.0), "'timeline.end_ms' must not be before"),
        (
            lambda d: d["timeline"]["tracks"][1]["events"].append([float("nan"), 1.0, "x"]),
            "'timeline.tracks[1].events[",
        ),
        (lambda d: d["timeline"].update(steps=["a"]), "'timeline.steps[0]' must be an integer"),
        (lambda d: d["recommendations"][0].update(evidence=[1]), "'recommendations[0].evidence'"),
        (lambda d: d["next_moves"].append({"score": "high"}), "'next_moves[0].score'"),
        (lambda d: d["source"]["files"][0].update(bytes="big"), "'source.files[0].bytes'"),
        (lambda d: d["metadata"].update(devices="cpu"), "'metadata.devices' must be a list"),
        (lambda d: d["input_categories"].update(python=3), "'input_categories.python'"),
        (lambda d: d.update(training=[1]), "'training' must be an object"),
        (lambda d: d.update(service_sizing="big"), "'service_sizing' must be an object"),
        (lambda d: d.update(device=None), "'device' must be a string"),
    ],
)
def test_a_malformed_document_is_one_line_naming_file_and_field(mutate: Any, field: str) -> None:
    data = copy.deepcopy(load(GOLDEN[0]))
    mutate(data)
    with pytest.raises(UserError) as err:
        AnalysisDocument.from_json(data, source="run.json")
    message = str(err.value)
    assert message.startswith("run.json: field ") and field in message
    assert "\n" not in message


def test_not_an_object_is_one_line_too() -> None:
    with pytest.raises(UserError, match=r"^a\.json: expected a JSON object at the top level$"):
        AnalysisDocument.from_json([1], source="a.json")  # type: ignore[arg-type]


# The analysis document's types, each defined once in the code base.
DOCUMENT_TYPES = ("Bottleneck", "NextMove", "RunInfo", "Stage", "Timeline", "Track", "Verdict")


def test_each_document_type_is_defined_once() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for folder in ("core", "probes", "tuner", "reports", "tftune"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and node.name in DOCUMENT_TYPES:
                    where[node.name].append(str(path.relative_to(ROOT)))
    assert {k: v for k, v in where.items() if len(v) > 1} == {}
    assert where["Bottleneck"] == ["core/analysis_advice.py"]
    assert where["Timeline"] == ["core/analysis_trace.py"]
