"""The progress plumbing of `tftune.optimize` and `tftune.profile` (no kernel, no
TensorFlow): the tuner's callbacks reach the caller's own and the progress, the notebook
display is drawn once and replaced in place, the plain fallback is one line per trial,
and other packages' warnings stay out; and `tftune.profile` on a real script (slow).
The kernel itself: test_notebook_kernel.py."""

from __future__ import annotations

import io
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf
from repo_paths import ROOT
from rich.console import Console
from studykit import latency_bound, settings, space

import tftune
from tftune._notebook_progress import (
    REDRAW_S,
    LineSink,
    LiveProgress,
    NotebookSink,
    choose_sink,
    shown,
)
from tftune.core.vocabulary import Phase, TrialState
from tftune.testing import FakeRunner
from tftune.tuner.study import Role, TrialRecord, run_parallel, run_study


def _record(number: int, eps: float) -> TrialRecord:
    return TrialRecord(
        number, Role.SEARCH, TrialState.COMPLETE, {}, f"config {number}", examples_per_s=eps
    )


def _text(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(renderable)
    return out.getvalue()


class _Display:
    """IPython's ``display`` as the sink calls it: once, for a handle whose `update`
    replaces what it shows. Each drawing is kept as text, drawn when it is shown, as
    IPython draws it; `last` is the newest object."""

    def __init__(self) -> None:
        self.calls = 0
        self.shown: list[str] = []
        self.last: Any = None

    def __call__(self, obj: Any, display_id: bool = False) -> _Display:
        assert display_id is True
        self.calls += 1
        self.update(obj)
        return self

    def update(self, obj: Any) -> None:
        self.shown.append(_text(obj))
        self.last = obj


def _a_run(view: LiveProgress) -> None:
    """What a short tuning run tells its progress, in order."""
    view.phase(Phase.DISCOVERY)
    view.note("training loop: train.py:30")
    view.phase(Phase.SCREEN)
    view.phase(Phase.SEARCH)
    view.start(0, 3)
    first, better = _record(0, 200.0), _record(1, 4210.3)
    view.trial(first, first)
    view.trial(better, better)
    view.trial(_record(2, 900.0), better)
    view.phase(Phase.FINAL_ROUND)
    view.note("final round: trial 1 again")


def test_the_notebook_display_is_drawn_once_and_replaced_with_each_change() -> None:
    display = _Display()
    view = LiveProgress("tftune optimize train.py", "trials", NotebookSink(display))
    _a_run(view)
    view.close("done")
    assert display.calls == 1 and len(display.shown) > 5
    last = display.shown[-1]
    assert "tftune optimize train.py" in last
    assert "phase: discovery › screen › search › final round › done" in last
    assert "3/3" in last and "best so far: 4,210.3 ex/s (trial 1)" in last
    assert "trial   2 search" in last and "final round: trial 1 again" in last
    # Rich draws it for the notebook: HTML and text, as the cell shows it.
    bundle = display.last._repr_mimebundle_([], [])
    assert "<pre" in bundle["text/html"] and "best so far" in bundle["text/html"]
    started = next(text for text in display.shown if "0/3" in text)
    rows = [row.rstrip() for row in started.splitlines()]
    assert "phase: discovery › screen › search" in rows and "best so far: -" in started


def test_a_step_count_redraws_at_most_every_redraw_s_a_trial_always() -> None:
    ticks = [0]  # the clock, in quarters of REDRAW_S (exact in binary)
    display = _Display()
    sink = NotebookSink(display, lambda: ticks[0] * REDRAW_S / 4)
    view = LiveProgress("tftune profile t.py", "steps", sink)
    view.start(0, 40)
    for done in range(1, 30):
        ticks[0] += 1
        view.step(done)
    assert len(display.shown) == 1 + 7  # the start, then steps 4, 8, ..., 28
    assert "28/40" in display.shown[-1]
    view.phase("analysis")  # a phase always redraws, with the newest count
    assert len(display.shown) == 9 and "29/40" in display.shown[-1]


def test_without_a_notebook_display_each_trial_is_one_plain_line() -> None:
    out = io.StringIO()
    view = LiveProgress("tftune optimize train.py", "trials", LineSink(out))
    _a_run(view)
    lines = out.getvalue().splitlines()
    assert all(line.startswith("tftune: ") for line in lines)
    trials = [line for line in lines if " search " in line and "ex/s" in line]
    assert len(trials) == 3
    assert trials[1].endswith("(2/3 trials, best so far: 4,210.3 ex/s (trial 1))")
    assert "*best*" in trials[1] and "*best*" not in trials[2]
    assert [line for line in lines if line.startswith("tftune: phase: ")] == [
        "tftune: phase: discovery",
        "tftune: phase: screen",
        "tftune: phase: search",
        "tftune: phase: final round",
    ]
    assert "tftune: 0/3 trials" in lines
    view.step(5)  # a step count is no line
    assert out.getvalue().splitlines() == lines


def test_the_sink_is_a_notebook_display_in_a_kernel_lines_in_ipython(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert choose_sink(None) is None  # plain Python, not asked: nothing shown
    assert choose_sink(False) is None
    assert isinstance(choose_sink(True), LineSink)
    ipython = pytest.importorskip("IPython")
    shell = types.SimpleNamespace(kernel=None)
    monkeypatch.setattr(ipython, "get_ipython", lambda: shell)
    assert isinstance(choose_sink(None), LineSink)  # IPython in a terminal
    assert choose_sink(False) is None
    shell.kernel = object()  # a Jupyter kernel
    assert isinstance(choose_sink(None), NotebookSink)


def test_other_packages_warnings_stay_out_while_a_call_shows_progress() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with shown("tftune optimize t.py", "trials", False):
            warnings.warn("IProgress not found", UserWarning, stacklevel=1)
        warnings.warn("the caller's own", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["the caller's own"]


def test_the_study_tells_when_its_final_round_begins(tmp_path: Path) -> None:
    phases: list[Phase] = []
    run_study(
        space(), FakeRunner(latency_bound), settings(tmp_path, n_trials=6), on_phase=phases.append
    )
    assert phases == [Phase.FINAL_ROUND]
    phases.clear()
    run_study(
        space(),
        FakeRunner(latency_bound),
        settings(tmp_path, n_trials=6, confirm=False, study_name="b"),
        on_phase=phases.append,
    )
    assert phases == []
    runners = [FakeRunner(latency_bound), FakeRunner(latency_bound)]
    run_parallel(
        space(), runners, settings(tmp_path, n_trials=6, study_name="c"), on_phase=phases.append
    )
    assert phases == [Phase.FINAL_ROUND]  # once, as the workers' trials are chosen from


def test_optimize_hands_the_tuner_the_callers_callbacks_and_its_progress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tftune.tuner.optimize as tuner_optimize

    def tuner(script: Any, args: Any, options: Any, hooks: Any) -> str:
        hooks.on_phase(Phase.SEARCH)
        hooks.on_start(0, 2)
        hooks.on_trial(_record(0, 300.0), _record(0, 300.0))
        hooks.on_note("a note")
        warnings.warn("IProgress not found", UserWarning, stacklevel=1)
        return "result"

    monkeypatch.setattr(tuner_optimize, "optimize", tuner)
    notes: list[str] = []
    phases: list[Phase] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = tftune.optimize(
            "t.py", trials=2, progress=True, on_note=notes.append, on_phase=phases.append
        )
    assert out == "result" and notes == ["a note"] and phases == [Phase.SEARCH]
    assert seen == []
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["tftune: phase: search", "tftune: 0/2 trials"]
    assert lines[2].endswith("(1/2 trials, best so far: 300.0 ex/s (trial 0))")
    assert lines[3:] == ["tftune: a note", "tftune: phase: done"]
    tftune.optimize("t.py", trials=2, progress=False)
    assert capsys.readouterr().out == ""


def test_profile_refuses_bad_steps_with_one_line() -> None:
    with pytest.raises(tftune.UserError) as err:
        tftune.profile("t.py", steps=(40, 20))
    assert str(err.value) == "steps=(40, 20): expected (START, STOP) with 0 <= START < STOP"


@pytest.mark.slow
@requires_tf
def test_profile_runs_the_script_analyzes_its_steps_and_says_each_phase(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    analysis = tftune.profile(
        ROOT / "examples" / "keras_fit.py",
        ["--steps", "60"],
        steps=(5, 15),
        logdir=tmp_path / "logs",
        timeout_s=300,
        progress=True,
    )
    assert repr(analysis).startswith("<tftune Analysis ")
    assert analysis._repr_html_() is not None  # the report inline, as `analyze` gives it
    assert list((tmp_path / "logs" / "plugins" / "profile").glob("*/*.xplane.pb"))
    lines = capsys.readouterr().out.splitlines()
    phases = [line for line in lines if line.startswith("tftune: phase: ")]
    assert phases == [
        "tftune: phase: run to step 5",
        "tftune: phase: trace steps 5-14",
        "tftune: phase: analysis",
        "tftune: phase: done",
    ]
