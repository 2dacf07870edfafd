"""tftune in a notebook: the namespace is the public API, results print one short line
and show their report inline, and `tftune.report` returns or writes the page for any of
them. In-process, on a convention-exact trace and a study run on the fake runner."""

from __future__ import annotations

import html
import re
from pathlib import Path

import golden_traces
import pytest
from studykit import latency_bound, outcome_document, settings, space

import tftune
from tftune._notebook import inline
from tftune.testing import FakeRunner
from tftune.tuner.optimize import OptimizeResult
from tftune.tuner.study import run_study

RUN = "2026_01_01_00_00_00"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    golden_traces.cpu_pyfunc().write(root / "plugins" / "profile" / RUN, host="vm")
    return root


def test_the_namespace_is_the_public_api() -> None:
    names = dir(tftune)
    assert names == sorted(tftune.__all__)
    assert not {"os", "sys", "Path", "Callable", "annotations"} & set(names)
    assert "report" in names and callable(tftune.report)


def test_an_analysis_is_one_short_line_and_its_report_inline(
    logdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    a = tftune.analyze(logdir)
    line = repr(a)
    assert len(line) < 300 and "\n" not in line
    assert "input-bound" in line and "ms/step" in line and RUN in line
    cell = a._repr_html_()
    assert cell is not None and cell.startswith("<iframe srcdoc=")
    page = html.unescape(re.search(r'srcdoc="([^"]*)"', cell).group(1))  # type: ignore[union-attr]
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    # The notebook's page is the report's page, byte for byte (one timestamp).
    assert page == tftune.report(a)


def test_an_analysis_made_below_the_front_door_prints_its_line_only(logdir: Path) -> None:
    from tftune.probes.advice.analysis import analyze

    a = analyze(logdir)
    assert a._repr_html_() is None and repr(a).startswith("<tftune Analysis")


def test_report_writes_or_returns_the_page_for_each_kind(logdir: Path, tmp_path: Path) -> None:
    a = tftune.analyze(logdir)
    saved = tmp_path / "a.json"
    saved.write_text(__import__("json").dumps(a.to_json()))
    for obj in (a, a.to_json(), saved, str(saved)):
        text = tftune.report(obj)
        assert isinstance(text, str) and text.startswith("<!DOCTYPE html>")
    out = tftune.report(saved, tmp_path / "a.html")
    assert out == tmp_path / "a.html" and out.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(TypeError, match="not int"):
        tftune.report(42)
    with pytest.raises(tftune.UserError, match="no such file"):
        tftune.report(tmp_path / "missing.json")
    with pytest.raises(tftune.UserError, match="no such directory"):
        tftune.report(a, tmp_path / "nowhere" / "a.html")


def test_a_tuning_result_is_one_short_line_and_its_report_inline(tmp_path: Path) -> None:
    out = run_study(space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=8))
    result = OptimizeResult(
        out,
        space(),
        None,
        tmp_path / "tftune-best.json",
        None,
        None,
        "tftune run --config tftune-best.json t.py",
        "",
        "",
        outcome_document(out),
        inline=inline,
    )
    line = repr(result)
    assert len(line) < 300 and "winner trial" in line and "x the script as written" in line
    cell = result._repr_html_()
    assert cell is not None and "Tuned (tftune)" in html.unescape(cell)
    assert tftune.report(result).startswith("<!DOCTYPE html>")


def test_a_tuning_result_holds_its_document_and_renders_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`OptimizeResult.document` is the typed tuning document (`report` its JSON); the
    notebook draws the document it holds, the same page as `tftune report` of its JSON."""
    from tftune._notebook import document_of
    from tftune.core.tuning_document import TuningDocument

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    out = run_study(space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=6))
    doc = outcome_document(out)
    result = OptimizeResult(out, space(), None, tmp_path / "b.json", None, None, "c", "", "", doc)
    assert isinstance(result.document, TuningDocument) and result.report == doc.to_json()
    assert TuningDocument.from_json(result.report) == doc
    assert document_of(result) == (doc, None, "t.py")  # the document itself, no JSON
    assert tftune.report(result) == tftune.report(result.report)
