"""Emitting the winner: the diff against the user's lines, the snippet, the files, and the
tuning JSON that the terminal's table and trial lines are drawn from."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from studykit import ceiling_sentence, outcome_json, render_table, table_rows, trial_line

from tftune.core.tuning_document import TuningDocument
from tftune.core.vocabulary import TrialState
from tftune.reports.tuning_comparison import comparison
from tftune.tuner.output.assemble import (
    best_config_with_metrics,
    tuning_document,
    write_json_atomic,
)
from tftune.tuner.output.emit import globals_snippet, rewrite_sources, run_command, source_diff
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig, load_config, save_config
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import Objective, Role, StudyOutcome, TrialRecord
from tftune.tuner.trial.discovery import CallSite

SCRIPT = """\
import tensorflow as tf2

ds = tf2.data.Dataset.range(10)
ds = ds.map(lambda x: x)
ds = ds.interleave(lambda x: tf2.data.Dataset.range(x), 2)
ds = ds.map(lambda x: x,
            num_parallel_calls=1)
ds = ds.batch(32).prefetch(2)
"""


def _apply(diff: str, tmp_path: Path) -> str:
    if shutil.which("patch") is not None:  # the diff applies as a user would apply it
        out = subprocess.run(
            ["patch", "-p1", "-s"], input=diff, text=True, cwd=tmp_path, capture_output=True
        )
        assert out.returncode == 0, out.stderr
    else:
        (tmp_path / "train.py").write_text(
            rewrite_sources(tmp_path / "train.py", CONFIG)["train.py"][1]
        )
    return (tmp_path / "train.py").read_text()


CONFIG = Config(
    sites={
        "train.py:4": SiteConfig(num_parallel_calls=32),  # missing: added
        "train.py:5": SiteConfig(cycle_length=8, num_parallel_calls=AUTOTUNE),  # positional
        "train.py:6": SiteConfig(num_parallel_calls=16),  # keyword on a continuation line
        "train.py:8": SiteConfig(batch_size=64, buffer_size=AUTOTUNE),  # chained
    }
)


def test_diff_rewrites_the_users_own_lines(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    config = CONFIG
    diff = source_diff(script, config)
    assert diff.startswith("--- a/train.py\n+++ b/train.py\n")
    new = _apply(diff, tmp_path)
    ast.parse(new)
    assert "ds = ds.map(lambda x: x, num_parallel_calls=32)" in new
    assert (
        "ds.interleave(lambda x: tf2.data.Dataset.range(x), 8, "
        "num_parallel_calls=tf2.data.AUTOTUNE)" in new
    )
    assert "num_parallel_calls=16)" in new
    assert "ds = ds.batch(64).prefetch(tf2.data.AUTOTUNE)" in new


def test_diff_edits_every_call_a_chained_line_config_changes(tmp_path: Path) -> None:
    # One line, one key: the patcher gives num_parallel_calls to each map on it (batch
    # takes no parallelism from tftune), so the diff must edit both maps and not batch.
    script = tmp_path / "train.py"
    script.write_text(
        "import tensorflow as tf\n"
        "ds = tf.data.Dataset.range(8)\n"
        "ds = ds.map(f).shuffle(256).batch(64).map(g, num_parallel_calls=2).prefetch(1)\n"
    )
    config = Config(sites={"train.py:3": SiteConfig(num_parallel_calls=16, batch_size=128)})
    new = _apply(source_diff(script, config), tmp_path)
    assert new.splitlines()[2] == (
        "ds = ds.map(f, num_parallel_calls=16).shuffle(256).batch(128)"
        ".map(g, num_parallel_calls=16).prefetch(1)"
    )


def test_diff_is_empty_for_as_written_and_skips_unreadable_files(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert source_diff(script, Config()) == ""
    gone = Config(sites={"lib/gone.py:3": SiteConfig(num_parallel_calls=4)})
    assert source_diff(script, gone) == ""


def test_globals_snippet() -> None:
    snip = globals_snippet(
        Config(threadpool_size=32, final_prefetch=AUTOTUNE, mixed_precision="mixed_bfloat16")
    )
    assert "options.threading.private_threadpool_size = 32" in snip
    assert "ds.prefetch(tf.data.AUTOTUNE)" in snip
    assert 'set_global_policy("mixed_bfloat16")' in snip
    ast.parse(snip)
    assert globals_snippet(Config()) == ""


def test_run_command_quotes_and_passes_arguments() -> None:
    cmd = run_command("my train.py", ["--steps", "10"], "best.json")
    assert cmd == "tftune run --config best.json 'my train.py' -- --steps 10"


def _rec(n: int, role: Role, eps: float, state: TrialState = TrialState.COMPLETE) -> TrialRecord:
    return TrialRecord(n, role, state, {}, role.value, eps, 0.5, 0.04, 0.5, (eps, eps))


def _outcome() -> StudyOutcome:
    aw = _rec(0, Role.AS_WRITTEN, 200.0)
    at = _rec(1, Role.AUTOTUNE, 400.0)
    he = _rec(2, Role.HEURISTIC, 410.0)
    best = _rec(3, Role.SEARCH, 4000.0)
    pruned = TrialRecord(4, Role.SEARCH, TrialState.PRUNED, {}, "x", 100.0, reason="pruned")
    return StudyOutcome(
        study_name="s",
        storage="s.journal",
        objective=Objective.THROUGHPUT,
        utilization_kind="duty_cycle",
        records=(aw, at, he, best, pruned),
        baselines={Role.AS_WRITTEN: aw, Role.AUTOTUNE: at, Role.HEURISTIC: he},
        best=best,
        best_config=Config(sites={"t.py:3": SiteConfig(num_parallel_calls=32)}, threadpool_size=32),
        confirm=None,
        pareto=(best,),
        importances={"threadpool_size": 0.6},
        wall_s=12.0,
        ran_this_session=5,
    )


def test_tuning_json_has_the_contract_fields(tmp_path: Path) -> None:
    out = _outcome()
    space = build_space([CallSite("t.py:3", "map", (), SiteConfig(), None, 1)], cores=2)
    data = tuning_document(
        script="t.py",
        outcome=out,
        space=space,
        ceiling=Ceiling(300.0, 9000.0),
        device="CPU_ONLY",
        config_file="tftune-best.json",
        command="tftune run --config tftune-best.json t.py",
        diff="",
        snippet="",
        seed=0,
    ).to_json()
    required = (
        "schema script objective utilization_kind device trials wall_s ceiling baselines "
        "best trials_detail importances command diff"
    )
    for key in required.split(" "):
        assert key in data, key
    assert data["trials"] == {"complete": 4, "pruned": 1, "failed": 0}
    assert set(data["baselines"]) >= {"as_written", "autotune", "heuristic"}
    assert data["best"]["speedup_vs_as_written"] == 20.0
    assert data["best"]["config"]["threadpool_size"] == 32
    assert data["ceiling"]["ceiling_examples_per_s"] == 300.0
    assert data["ceiling"]["limited_by"] == "pipeline"
    assert data["trials_detail"][4]["state"] == "pruned"
    path = write_json_atomic(data, tmp_path / "t.json")
    assert json.loads(path.read_text())["schema"] == 1
    assert not list(tmp_path.glob(".*tmp"))


def _final(r: TrialRecord, eps: float, state: TrialState = TrialState.COMPLETE) -> TrialRecord:
    return replace(r, role=Role.CONFIRM, state=state, examples_per_s=eps)


@pytest.mark.parametrize(
    "case", ["search figures", "final round", "a failed re-measure", "as written kept"]
)
def test_the_tables_tuned_speedup_is_the_tuners_own(case: str) -> None:
    # One rule: the tuned row's speed-up, read back from the JSON by both renderers
    # (`tuning_comparison.comparison`), is the figure the tuner wrote.
    out = _outcome()
    aw, best = out.baselines[Role.AS_WRITTEN], out.best
    if case == "final round":
        out = replace(out, final=(_final(aw, 250.0), _final(best, 3000.0)))
        out = replace(out, confirm=out.final[1])
    elif case == "a failed re-measure":
        out = replace(out, final=(_final(aw, 0.0, TrialState.FAILED), _final(best, 3000.0)))
        out = replace(out, confirm=out.final[1])
    elif case == "as written kept":
        out = replace(out, best=aw, final=(_final(aw, 230.0),), confirm=None)
    data = outcome_json(out)
    tuned = comparison(TuningDocument.from_json(data))[-1]
    assert tuned.key == "tuned" and tuned.speedup is not None
    assert tuned.speedup == pytest.approx(data["best"]["speedup_vs_as_written"], abs=5e-4)
    expected = {"search figures": 20.0, "final round": 12.0, "a failed re-measure": 15.0}
    assert tuned.speedup == pytest.approx(expected.get(case, 1.0), abs=5e-4)


def test_best_file_carries_metrics_and_still_loads(tmp_path: Path) -> None:
    cfg = best_config_with_metrics(_outcome(), "tftune run --config b.json t.py")
    save_config(cfg, tmp_path / "b.json")
    back = load_config(tmp_path / "b.json")
    assert back.threadpool_size == 32
    assert back.meta["measured"]["examples_per_s"] == 4000.0
    assert back.meta["measured"]["spread"] == 0.04
    assert back.meta["speedup_vs_as_written"] == 20.0


def test_table_has_four_rows_with_speedups() -> None:
    rows = table_rows(_outcome())
    assert [r[0] for r in rows] == [
        "as written",
        "AUTOTUNE everywhere",
        "#cores heuristic",
        "tuned",
    ]
    assert rows[0][4] == "1.00x" and rows[3][4] == "20.00x"
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(render_table(_outcome(), Ceiling(300.0, 9000.0)))
    text = console.export_text()
    assert "4,000.0" in text and "model alone on cached data 9,000.0" in text


@pytest.mark.parametrize(
    ("state", "needle"), [(TrialState.PRUNED, "pruned"), (TrialState.FAILED, "failed: boom")]
)
def test_trial_line_says_why(state: TrialState, needle: str) -> None:
    r = TrialRecord(7, Role.SEARCH, state, {}, "t.py/par=4", 10.0, reason="boom")
    line = trial_line(r, None)
    assert needle in line and "t.py/par=4" in line and "\n" not in line


def _with_tuned(out: StudyOutcome, eps: float, wait: float) -> StudyOutcome:
    best = replace(out.best, examples_per_s=eps, input_wait_share=wait)
    return replace(out, best=best, records=(*out.records[:3], best))


def test_globals_snippet_without_a_pipeline_of_the_scripts_own() -> None:
    """Keras builds the dataset from a PyDataset: no `ds = ds.prefetch(...)` to paste, but
    how to apply the tf.data knobs; the mixed precision line stays."""
    config = Config(final_prefetch=2, threadpool_size=8, mixed_precision="mixed_bfloat16")
    own = globals_snippet(config)
    assert "ds = ds.prefetch(2)" in own and "private_threadpool_size = 8" in own
    keras_built = globals_snippet(config, own_pipeline=False, config_file="best.json")
    assert "ds = " not in keras_built and 'tftune.apply("best.json")' in keras_built
    assert 'set_global_policy("mixed_bfloat16")' in keras_built


def test_ceiling_sentence_places_the_remaining_gap() -> None:
    # Tuned 4000 ex/s (as written 200) against a 5000 ex/s ceiling set by the model.
    model_bound = Ceiling(20000.0, 5000.0)
    waits = ceiling_sentence(_with_tuned(_outcome(), 4000.0, 0.3), model_bound)
    assert "as written reaches 4% and tuned 80% of the ceiling (the model)" in waits
    assert "still waits for input 30%" in waits and "gap is in the input pipeline" in waits
    # Rarely waiting yet below both halves: they slow each other, the pipeline is not it.
    shared = ceiling_sentence(_with_tuned(_outcome(), 4000.0, 0.02), model_bound)
    assert "slowing each other down" in shared and "gap is in the input" not in shared
    assert ceiling_sentence(_with_tuned(_outcome(), 4800.0, 0.02), model_bound).endswith(
        "the model is now the limit"
    )
    pipeline_bound = ceiling_sentence(_with_tuned(_outcome(), 4800.0, 0.4), Ceiling(5000.0, 9e3))
    assert pipeline_bound.endswith("the input pipeline is now the limit")
    # Tuning lifted the pipeline past its as-written rate (200 -> 4000): the model alone
    # (5000 ex/s) is the ceiling left, not a "4000% of the ceiling".
    lifted = ceiling_sentence(_with_tuned(_outcome(), 4000.0, 0.02), Ceiling(250.0, 5000.0))
    assert (
        "as written reaches 80% of the pipeline alone; tuning lifted the pipeline past it "
        "(16.0x), and tuned reaches 80% of the model alone" in lifted
    )
    assert "slowing each other down" in lifted
    # Past the model alone as well (a larger batch): no verdict against a ceiling that
    # was measured with the script's own batch size.
    past = ceiling_sentence(_with_tuned(_outcome(), 4000.0, 0.02), Ceiling(1000.0, 1000.0))
    assert "tuned runs 4.0x past it" in past and "does not bound it" in past
    assert "is now the limit" not in past
    # Not measured: the rates alone, no verdict.
    assert ceiling_sentence(_outcome(), Ceiling(None, None)) == (
        "pipeline alone not measured, model alone on cached data not measured"
    )


def test_ceiling_is_the_lower_half_and_says_what_was_not_measured() -> None:
    c = Ceiling(300.0, 9000.0)
    assert c.examples_per_s == 300.0 and c.limited_by == "pipeline"
    assert Ceiling(9000.0, 300.0).limited_by == "model"
    half = Ceiling(None, 9000.0, pipeline_note="not measured (in a tf.function)")
    assert half.examples_per_s == 9000.0 and half.limited_by is None
    data = half.to_json()
    assert data["pipeline_only_examples_per_s"] is None  # never 0 for "not measured"
    assert data["notes"] == ["not measured (in a tf.function)"]
    assert Ceiling(None, None).examples_per_s is None


def test_what_the_whole_run_adds_is_part_of_the_one_document() -> None:
    """`tftune optimize`'s JSON is assembled in one step: the run's wall time replaces the
    study's, and the break-even, stop reason, training, record, findings, the precision
    advice (a note) and what the winner requires all sit in it."""
    from tftune.core.run_record import Environment, Record
    from tftune.core.training import TrainingFacts
    from tftune.tuner.output.assemble import RunFacts

    out = replace(_outcome(), stop_reason="ran the 5 trials asked for (--trials 5)")
    env = Environment(
        "2026-12-01", "3.11.7", "python", "Linux", None, 2, None, None, None, (), None, ()
    )
    record = Record("t.py", ("t.py",), "/w", "/w/t.py", (), "0" * 64, 0, env)
    run = RunFacts(
        wall_s=61.234,
        training=TrainingFacts(preamble_s=6.5),
        record=record,
        findings=("mixed precision: ...",),
        advice="keep the output layer in float32",
        requires="Dense(..., dtype='float32')",
    )
    plain, data = outcome_json(out), outcome_json(out, run=run)
    assert plain["wall_s"] == 12.0 and data["wall_s"] == 61.23
    assert data["break_even"]["tuning_s"] == 61.23
    assert data["break_even"]["tuned_examples_per_s"] == 4000.0
    assert data["stop_reason"] == out.stop_reason
    assert data["training"]["preamble_s"] == 6.5 and data["training"]["loop"] is None
    assert data["record"]["argv"] == ["t.py"] and data["record"]["environment"]["cores"] == 2
    assert data["findings"] == ["mixed precision: ..."]
    assert data["notes"][-1] == "keep the output layer in float32"
    assert data["best"]["requires"] == ["Dense(..., dtype='float32')"]
    assert list(data)[: len(plain)] == list(plain)  # the study's fields, then the run's
    assert "break_even" not in plain and "requires" not in plain["best"]


def test_a_replayed_tuning_run_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same study (seed, runner, clock) replayed from scratch in another folder
    writes a byte-identical tuning JSON: nothing in it depends on the dict order of a
    run, an address or the wall clock but what the run measured."""
    import itertools

    from studykit import latency_bound, settings, space

    from tftune.testing import FakeRunner
    from tftune.tuner.study import run_study

    def once(folder: Path) -> bytes:
        folder.mkdir()
        monkeypatch.chdir(folder)
        ticks = itertools.count()
        out = run_study(
            space(),
            FakeRunner(latency_bound),
            settings(folder, n_trials=10, storage="study.journal"),
            clock=lambda: float(next(ticks)),
            sleep=lambda _s: None,
        )
        return write_json_atomic(outcome_json(out), folder / "tuning.json").read_bytes()

    first, again = once(tmp_path / "a"), once(tmp_path / "b")
    assert first == again
    assert b'"examples_per_s"' in first and len(first) > 2000
