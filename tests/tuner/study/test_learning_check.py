"""The learning check on a study: a winner whose larger batch reaches a higher loss in
equal training time is not recommended as is; the one with the learning rate scaled
that learns no worse is; where no scale helps, a config that changes neither batch nor
precision is; ``--objective throughput`` keeps the fastest. A model of the script
(`FakeRunner`) gives each run its examples/s and its loss curve."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from studykit import BATCH, MAP, outcome_json, settings, space

from tftune.core.learning import LossCurve, LossVerdict, OptimizerSeen, ScaleRule
from tftune.core.tuning_document import TuningDocument
from tftune.reports import render_report_json, tuning_terminal
from tftune.testing import FakeRunner, Figures
from tftune.tuner.searchspace.config import AUTOTUNE, Config
from tftune.tuner.searchspace.space import Knob
from tftune.tuner.study import run_study
from tftune.tuner.study.learning_check import learning_changes

ADAM = (OptimizerSeen("train.py:20", "Adam", 1e-3),)


def _batch(config: Config) -> int:
    site = config.sites.get(BATCH)
    return (site.batch_size if site is not None else None) or 32


def _throughput(config: Config) -> tuple[float, float]:
    """A parallel map gains 30%, a batch 4x as large 2x."""
    site = config.sites.get(MAP)
    par = (site.num_parallel_calls if site is not None else None) or 1
    eps = 1000.0 * (1.3 if par == AUTOTUNE or par >= 4 else 1.0) * (_batch(config) / 32) ** 0.5
    return eps, 0.5


def model(optimizers: tuple[OptimizerSeen, ...] = ADAM, lr_matters: bool = True):  # type: ignore[no-untyped-def]
    """Examples/s grow with the batch; what is learned per example shrinks with it,
    unless the learning rate is scaled by the batch ratio (the linear rule)."""

    def script(config: Config) -> Figures:
        eps, util = _throughput(config)
        batch = _batch(config)
        scale = config.learning_rate_scale or 1.0
        per_example = min(1.0, scale * 32 / batch) if lr_matters else 1.0
        rate = eps * per_example / 2000
        points = tuple((t / 10, 1.0 / (1.0 + rate * t / 10)) for t in range(1, 101))
        return Figures(eps, util, loss=LossCurve(points, "fit"), optimizers=optimizers)

    return script


def _study(tmp_path: Path, script, **kw: object):  # type: ignore[no-untyped-def]
    runner = FakeRunner(script, repeats=2)
    s = settings(tmp_path, n_trials=24, seed=3, **kw)
    return run_study(space(), runner, s), runner


def test_a_larger_batch_that_learns_worse_comes_with_the_scaled_learning_rate(
    tmp_path: Path,
) -> None:
    out, runner = _study(tmp_path, model())
    check = out.learning
    assert check is not None and check.verdict is LossVerdict.HIGHER
    assert _batch(out.best_config) > 32
    assert out.best_config.learning_rate_scale == pytest.approx(_batch(out.best_config) / 32)
    scales = {r.scale.rule for r in check.tried if r.scale is not None}
    assert scales == {ScaleRule.LINEAR, ScaleRule.SQRT}
    assert any(c.learning_rate_scale for c in runner.configs)
    assert check.as_written is not None and len(check.as_written.losses) >= 2
    assert any("learning rate x" in n for n in out.notes)


def test_without_an_optimizer_to_scale_it_falls_back_to_the_same_batch(tmp_path: Path) -> None:
    out, runner = _study(tmp_path, model(optimizers=()))
    check = out.learning
    assert check is not None and check.verdict is LossVerdict.HIGHER
    assert check.throughput_only is not None and check.tried == ()
    assert _batch(out.best_config) == 32 and not out.best_config.learning_rate_scale
    assert not any(c.learning_rate_scale for c in runner.configs)
    # What it recommends instead still gains: parallelism leaves learning alone.
    assert out.best.number != check.throughput_only


def test_a_batch_that_learns_no_worse_is_recommended_as_is(tmp_path: Path) -> None:
    out, runner = _study(tmp_path, model(lr_matters=False))
    check = out.learning
    assert check is not None and check.verdict is LossVerdict.LOWER
    assert _batch(out.best_config) > 32 and out.best_config.learning_rate_scale is None
    assert not any(c.learning_rate_scale for c in runner.configs)


def test_objective_throughput_skips_the_check(tmp_path: Path) -> None:
    out, _ = _study(tmp_path, model(), learning_check=False)
    assert out.learning is None and _batch(out.best_config) > 32


def test_an_unread_loss_is_said_not_checked(tmp_path: Path) -> None:
    def script(config: Config) -> Figures:
        return Figures(*_throughput(config))

    out, _ = _study(tmp_path, script)
    check = out.learning
    assert check is not None and check.verdict is LossVerdict.NOT_CHECKED
    assert check.reason and _batch(out.best_config) > 32
    assert math.isfinite(out.best.examples_per_s or math.nan)


def test_the_check_reaches_the_json_and_both_reports(tmp_path: Path) -> None:
    out, _ = _study(tmp_path, model(optimizers=()))
    data = outcome_json(out, searched=space())
    learning = data["learning"]
    assert learning["verdict"] == "higher" and learning["throughput_only"] is not None
    doc = TuningDocument.from_json(data, source="t.json")
    text = tuning_terminal.render(doc)
    assert "learning check (batch 32 -> 128): higher: learns worse" in text
    assert f"trial {learning['throughput_only']} was fastest but learns worse" in text
    page = render_report_json(data, generated_at="2026-12-05T00:00:00Z", source="t.json")
    assert 'id="learning"' in page and "Does it learn no worse?" in page
    assert doc.to_json()["learning"] == learning  # read back to the same JSON


def test_what_counts_as_a_change_to_learning() -> None:
    base = space()
    order = Knob("deterministic", "deterministic", None, (None, True, False), None)
    searched = replace(base, knobs=(*base.knobs, order))
    batch = next(k.name for k in base.knobs if k.field == "batch_size")
    par = next(k.name for k in base.knobs if k.field == "num_parallel_calls")
    assert learning_changes(searched, {par: 8, "deterministic": True}) == ()
    assert learning_changes(searched, {batch: 64, "deterministic": False}) == (
        "batch 32 -> 64",
        "elements in a nondeterministic order",
    )
