"""What a tuning run does not spend (issue 20): the short busiest-loop wait for a script
that names nothing that trains, the bound analysis' single window and no model half for
a script without a model, no guided profile where it tells nothing, and a final round
that does not re-measure what the leader beats beyond any noise."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from studykit import settings

from tftune.core.training import StreamSeen
from tftune.core.vocabulary import FALLBACK_HOW, TrialState
from tftune.testing import FakeRunner
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig
from tftune.tuner.searchspace.guided import NO_MODEL, measure_ceiling, profile_skipped
from tftune.tuner.searchspace.screen import Screen, ScreenEntry
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import (
    Mode,
    Role,
    StudyOutcome,
    run_study,
)
from tftune.tuner.study.baselines import baseline_roles
from tftune.tuner.study.contract import TrialRecord
from tftune.tuner.study.round_plan import DECISIVE_LEAD, still_open
from tftune.tuner.trial.discovery import CallSite, Discovery
from tftune.tuner.trial.script_text import (
    fallback_s,
    may_train,
    parse_module,
    shows_training,
)
from tftune.tuner.trial.watch import FALLBACK_S, KNOWN_BUSIEST_S

MAP = "train.py:10"
SITES = [CallSite(MAP, "map", (), SiteConfig(), None, 1)]


def _write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path


# --- may_train: read from the script's text ---------------------------------------------


BENCHMARK = """
    import tensorflow as tf
    # we never train here; "train" in a comment or a string does not count
    split = "train"
    ds = tf.data.Dataset.range(10**9).map(lambda x: x * 2).batch(4)
    for batch in ds:
        tf.reduce_mean(batch)
"""


def test_a_pipeline_benchmark_names_nothing_that_trains(tmp_path: Path) -> None:
    assert not may_train(_write(tmp_path, "bench.py", BENCHMARK))


@pytest.mark.parametrize(
    "line",
    [
        "model.fit(ds, epochs=1)",
        "opt.apply_gradients(zip(g, v))",
        "with tf.GradientTape() as tape: pass",
        "def train_step(x): return x",
        "w.assign_sub(0.1 * g)",
        "run_training(ds)",
    ],
    ids=["fit", "apply_gradients", "tape", "train_step", "assign_sub", "run_training"],
)
def test_any_training_name_means_it_may_train(tmp_path: Path, line: str) -> None:
    # The benchmark's lines dedented first: an indented file would not parse, and an
    # unreadable file "may train" whatever it holds.
    script = _write(tmp_path, "s.py", textwrap.dedent(BENCHMARK) + line + "\n")
    assert parse_module(script) is not None
    assert may_train(script)


def test_training_in_a_local_module_counts(tmp_path: Path) -> None:
    _write(tmp_path, "helpers.py", "def step(opt, g, v):\n    opt.apply_gradients(zip(g, v))\n")
    pkg = tmp_path / "lib"
    pkg.mkdir()
    _write(pkg, "__init__.py", "")
    _write(pkg, "loop.py", "from .inner import go\n")
    _write(pkg, "inner.py", "def go(m, ds):\n    m.fit(ds)\n")
    assert may_train(_write(tmp_path, "a.py", "import helpers\n" + textwrap.dedent(BENCHMARK)))
    assert may_train(_write(tmp_path, "b.py", "from lib import loop\n"))
    _write(tmp_path, "quiet.py", "def noop():\n    return 1\n")
    assert not may_train(_write(tmp_path, "c.py", "import quiet, numpy\n"))


def test_an_unreadable_script_may_train(tmp_path: Path) -> None:
    assert may_train(_write(tmp_path, "broken.py", "def (:\n"))


@pytest.mark.parametrize(
    ("line", "wait"),
    [
        ("model.fit(ds, epochs=1)", None),
        ("opt.apply_gradients(zip(g, v))", None),
        ("with tf.GradientTape() as tape: pass", None),
        ("opt = tf.keras.optimizers.Adam()", None),
        ("def train_step(x): return x", FALLBACK_S),
        ("w.assign_sub(0.1 * g)", FALLBACK_S),
        ("", KNOWN_BUSIEST_S),
    ],
    ids=["fit", "apply_gradients", "tape", "optimizer", "train_step", "assign_sub", "nothing"],
)
def test_a_script_that_shows_training_waits_for_its_first_update(
    tmp_path: Path, line: str, wait: float | None
) -> None:
    """However long it counts, builds a vocabulary or calls adapt first: no busiest loop
    stands in for a script whose code calls what trains (a long preamble is no verdict)."""
    script = _write(tmp_path, "s.py", textwrap.dedent(BENCHMARK) + line + "\n")
    assert parse_module(script) is not None
    assert fallback_s(script) == wait
    assert shows_training(script) is (wait is None)


# --- the bound analysis -----------------------------------------------------------------


def runs(model: Callable[[Config], float]) -> FakeRunner:
    """The shared fake over `model`: three windows a run, the consumer waiting 90%."""
    return FakeRunner(model, input_wait_share=0.9)


def test_the_bound_analysis_measures_one_window_a_half() -> None:
    runner = runs(lambda _c: 500.0)
    c = measure_ceiling(runner)
    assert [(r.mode, r.windows) for r in runner.runs] == [
        (Mode.MODEL_ONLY, 1),
        (Mode.PIPELINE_ONLY, 1),
    ]
    assert c.model_only_examples_per_s == c.pipeline_only_examples_per_s == 500.0


def test_a_script_without_a_model_has_no_model_half() -> None:
    runner = runs(lambda _c: 500.0)
    notes: list[str] = []
    c = measure_ceiling(runner, notes.append, busiest_loop=True)
    assert [r.mode for r in runner.runs] == [Mode.PIPELINE_ONLY]
    assert c.model_only_examples_per_s is None and c.model_note == f"not measured ({NO_MODEL})"
    assert notes == [
        f"bound analysis: pipeline alone 500.0 ex/s, model alone not measured ({NO_MODEL})"
    ]


# --- the guided profile -----------------------------------------------------------------


def _found(busiest: bool) -> Discovery:
    how = FALLBACK_HOW if busiest else "fetched and updated in one tf.function"
    stream = StreamSeen(0, MAP, "train.py:12", 100, True, how)
    return Discovery("train.py", tuple(SITES), (), False, None, "", (stream,))


SCREENED = Screen((ScreenEntry({"p": 1}, "as written", 300.0), ScreenEntry({"p": 8}, "", 900.0)), 5)


def test_the_profile_is_skipped_only_where_the_screen_decides_the_guess() -> None:
    why = profile_skipped(_found(busiest=True), None, SCREENED)
    assert why is not None and "trains nothing" in why
    input_bound = Ceiling(300.0, 5000.0)  # the model alone 2x the pipeline alone or more
    why = profile_skipped(_found(busiest=False), input_bound, SCREENED)
    assert why is not None and "input-bound (pipeline alone 300.0 ex/s" in why
    # Compute-bound, close, or nothing screened: the profile is taken.
    assert profile_skipped(_found(busiest=False), Ceiling(5000.0, 300.0), SCREENED) is None
    assert profile_skipped(_found(busiest=False), Ceiling(400.0, 500.0), SCREENED) is None
    assert profile_skipped(_found(busiest=True), None, None) is None
    assert profile_skipped(_found(busiest=True), None, Screen((), 1.0, "no dataset")) is None


def test_the_heuristic_gets_no_trial_where_the_screen_drained_it() -> None:
    assert baseline_roles(screened=False) == (Role.AUTOTUNE, Role.HEURISTIC)
    assert baseline_roles(screened=True) == (Role.AUTOTUNE,)


# --- the final round --------------------------------------------------------------------


def space() -> SearchSpace:
    return build_space(SITES, cores=2)


def par_of(config: Config) -> int | None:
    return (config.sites.get(MAP) or SiteConfig()).num_parallel_calls


def far_ahead(config: Config) -> float:
    """Parallelism 16 or more is 20x the script as written; AUTOTUNE is 1.2x."""
    par = par_of(config)
    if par == AUTOTUNE:
        return 120.0
    return 2000.0 if par is not None and par >= 16 else 100.0


def final_runs(runner: FakeRunner, tmp_path: Path) -> tuple[StudyOutcome, list[Config], list[str]]:
    """The study's outcome, the configs its final round measured, and its notes."""
    start: list[int] = []
    notes: list[str] = []

    def note(line: str) -> None:
        if line.startswith("final round: re-measuring"):
            start.append(len(runner.runs))
        notes.append(line)

    out = run_study(space(), runner, settings(tmp_path, n_trials=6), on_note=note)
    return out, runner.configs[start[0] :], notes


def test_a_decisive_lead_skips_re_measuring_autotune_not_the_script_as_written(
    tmp_path: Path,
) -> None:
    runner = runs(far_ahead)
    out, final, notes = final_runs(runner, tmp_path)
    assert out.best.examples_per_s == 2000.0
    # The round measures the leader and the script as written (the floor), not AUTOTUNE.
    figures = sorted(far_ahead(c) for c in final)
    assert figures[0] == 100.0 and set(figures[1:]) == {2000.0}, final
    said = next(n for n in notes if "not re-measured" in n)
    assert "(autotune)" in said and "(as_written)" not in said
    assert f"by 16.67x or more, beyond any noise (from {DECISIVE_LEAD:.2f}x)" in said
    assert out.confirm is not None and out.confirm.examples_per_s == 2000.0


def _rec(number: int, role: Role, eps: float, spread: float) -> TrialRecord:
    return TrialRecord(number, role, TrialState.COMPLETE, {"k": number}, "", eps, None, spread)


def test_how_far_a_lead_must_be_follows_the_noise() -> None:
    from tftune.tuner.study.contract import Objective

    aw = _rec(0, Role.AS_WRITTEN, 100.0, 0.04)
    auto = _rec(1, Role.AUTOTUNE, 101.0, 0.04)
    top = _rec(2, Role.SEARCH, 200.0, 0.04)

    def left_out(again: TrialRecord) -> list[int]:
        measured, _notes = still_open([aw, auto, top], top, again, Objective.THROUGHPUT)
        return sorted({0, 1} - {r.number for r in measured})

    # Re-measured at 1.3x, over windows that agree within 4%: AUTOTUNE is beaten beyond
    # any noise; the script as written, the floor of every recommendation, is measured
    # again whatever the lead.
    assert left_out(_rec(2, Role.CONFIRM, 130.0, 0.04)) == [1]
    assert left_out(_rec(2, Role.CONFIRM, 152.0, 0.04)) == [1]
    assert left_out(_rec(2, Role.CONFIRM, 1520.0, 0.04)) == [1]
    # Just under the floor: both re-measured.
    assert left_out(_rec(2, Role.CONFIRM, 119.0, 0.04)) == []
    # The same 1.3x from windows that spread 40%: four times the noise asks 1.44x.
    assert left_out(_rec(2, Role.CONFIRM, 130.0, 0.4)) == []
    assert left_out(_rec(2, Role.CONFIRM, 146.0, 0.4)) == [1]


def test_the_script_as_written_is_measured_again_however_far_the_leader_leads() -> None:
    """Its windows agreed within 1% and the whole run was slow (a loaded host): the
    leader's 5x lead rests on that run, so the round measures it again; AUTOTUNE behind
    the same lead keeps its search figure."""
    from tftune.tuner.study.contract import Objective

    aw = _rec(0, Role.AS_WRITTEN, 95.0, 0.007)
    auto = _rec(1, Role.AUTOTUNE, 51.0, 0.04)
    top = _rec(2, Role.SEARCH, 484.0, 0.04)
    again = _rec(2, Role.CONFIRM, 480.0, 0.04)
    measured, notes = still_open([aw, auto, top], top, again, Objective.THROUGHPUT)
    assert measured == [aw]
    assert notes and "trial 1 (autotune)" in notes[0] and "as_written" not in notes[0]


def test_a_runner_up_below_the_leaders_re_measure_is_not_re_measured() -> None:
    from tftune.tuner.study.contract import Objective

    aw = _rec(0, Role.AS_WRITTEN, 100.0, 0.04)
    top, second = _rec(3, Role.SEARCH, 130.0, 0.04), _rec(4, Role.SEARCH, 124.0, 0.04)
    measured, notes = still_open(
        [aw, top, second], top, _rec(3, Role.CONFIRM, 126.0, 0.04), Objective.THROUGHPUT
    )
    assert measured == [aw]  # 1.26x: the script as written is measured
    assert notes == [
        "final round: trial 4 (search) not re-measured: its search figure is already below "
        "trial 3's re-measure (126.0 ex/s), and a figure picked as one of the best of many "
        "trials is biased upwards"
    ]
    # The leader fell below it: the runner-up may win, and is measured.
    measured, notes = still_open(
        [aw, top, second], top, _rec(3, Role.CONFIRM, 120.0, 0.04), Objective.THROUGHPUT
    )
    assert measured == [aw, second] and notes == []
    # The leader's re-measure failed: everything is measured.
    failed = TrialRecord(3, Role.CONFIRM, TrialState.FAILED, {}, "")
    assert still_open([aw, top, second], top, failed, Objective.THROUGHPUT) == ([aw, second], [])


def test_a_leader_that_falls_back_when_re_measured_gets_the_baselines_after_all(
    tmp_path: Path,
) -> None:
    seen: dict[str, int] = {}

    def fades(config: Config) -> float:  # 20x when first measured, 1.1x after
        seen[repr(config)] = seen.get(repr(config), 0) + 1
        fast = far_ahead(config)
        return 110.0 if fast == 2000.0 and seen[repr(config)] > 1 else fast

    out, final, notes = final_runs(runs(fades), tmp_path)
    assert Config() in final  # the script as written again, and AUTOTUNE
    assert any(par_of(c) == AUTOTUNE for c in final)
    # Both are measured again; a trial whose search figure is below the leader's
    # re-measure may still be left out.
    skipped = [n for n in notes if "not re-measured" in n]
    assert not any("(as_written)" in n or "(autotune)" in n for n in skipped), skipped
    assert out.best.role is Role.AUTOTUNE or out.best.role is Role.AS_WRITTEN


def test_a_pipeline_that_is_not_the_limit_is_searched_as_written_or_autotune() -> None:
    from tftune.tuner.searchspace.guided import narrow_if_not_the_limit
    from tftune.tuner.searchspace.screen import NOT_SCREENED

    batch = CallSite("train.py:11", "batch", (), SiteConfig(batch_size=32), None, 1)
    sp = build_space([*SITES, batch], cores=2)
    stopped = Screen(
        (ScreenEntry({}, "as written", 9000.0), ScreenEntry({}, "", None, NOT_SCREENED)), 3.0
    )
    notes: list[str] = []
    narrow = narrow_if_not_the_limit(sp, stopped, notes.append)
    assert narrow.knob(f"{MAP}/num_parallel_calls").choices == (1, AUTOTUNE)
    assert narrow.knob("threadpool_size").choices == (None,)
    assert (
        narrow.knob("train.py:11/batch_size").choices == sp.knob("train.py:11/batch_size").choices
    )
    assert notes == [
        "the input pipeline is not the limit: its knobs are searched between as written "
        "and AUTOTUNE only"
    ]
    assert any(o.name == f"{MAP}/num_parallel_calls" for o in narrow.left_out)
    # A screen that ranked configs, or none at all: the space as it was.
    assert narrow_if_not_the_limit(sp, SCREENED, notes.append) is sp
    assert narrow_if_not_the_limit(sp, None, notes.append) is sp


def test_autotune_not_behind_in_either_run_is_recommended_within_the_noise() -> None:
    """gil_tokenizer: nothing clears the noise, but AUTOTUNE everywhere was ahead of the
    script as written in the search (+14%) and in the round (+2.6%), +8% on the means of
    its two runs: tf.data's own advice is recommended rather than nothing. Behind in
    either run: the script stays."""
    from tftune.tuner.study.contract import Objective
    from tftune.tuner.study.winner import choose_final

    aw = _rec(0, Role.AS_WRITTEN, 253.3, 0.04)
    auto = _rec(2, Role.AUTOTUNE, 288.6, 0.01)
    guided = _rec(1, Role.GUIDED, 242.8, 0.01)
    final = [replace(aw, examples_per_s=260.6), replace(auto, examples_per_s=267.3)]
    best, confirm, note, close = choose_final(
        [aw, guided, auto], aw, auto, final, Objective.THROUGHPUT
    )
    assert best is auto and confirm is not None and confirm.examples_per_s == 267.3
    assert close is None and note is not None and "+8.2% on their mean: recommending" in note
    assert "no config beat the script as written by more than the noise" in note
    slower = replace(auto, examples_per_s=240.0)  # behind the script in its search run
    best, confirm, note, _ = choose_final(
        [aw, guided, slower], aw, slower, final, Objective.THROUGHPUT
    )
    assert best is aw and confirm is None and note is not None
    assert note.endswith("keeping the script as written")
    behind = [replace(aw, examples_per_s=260.6), replace(auto, examples_per_s=255.0)]
    best, _, _, _ = choose_final([aw, guided, auto], aw, auto, behind, Objective.THROUGHPUT)
    assert best is aw  # behind in the round
