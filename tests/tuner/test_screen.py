"""The pipeline screen: many pipeline configs ranked in one run of a real script
(a real TensorFlow child: the dataset rebuilt under each candidate and drained alone)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tftune.tuner.searchspace.config import AUTOTUNE, SiteConfig
from tftune.tuner.searchspace.screen import (
    MAX_CANDIDATES,
    NOT_SCREENED,
    Screen,
    ScreenEntry,
    candidates,
    run_screen,
)
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import StudySettings
from tftune.tuner.trial import discover
from tftune.tuner.trial.discovery import CallSite

# A user's script: one epoch's data comes through shuffle and a map applied inside
# `ds.apply(...)`, each element waits ~3 ms in Python (a remote read), an eager loop
# trains a one-variable model on it epoch after epoch, and a validation set with a map
# of its own is read after each epoch.
SCRIPT = textwrap.dedent(
    """
    import time
    import tensorflow as tf

    def read(i):
        def slow(x):
            time.sleep(0.003)
            return float(x)
        y = tf.py_function(slow, [i], tf.float32)
        y.set_shape([])
        return y

    ds = tf.data.Dataset.range(2000).shuffle(64, seed=1)
    ds = ds.apply(lambda d: d.map(read))
    ds = ds.batch(8)
    val = tf.data.Dataset.range(64).map(lambda i: tf.cast(i, tf.float32) * 2.0).batch(8)
    w = tf.Variable(0.0)
    opt = tf.keras.optimizers.SGD(1e-9)
    for epoch in range(1000):
        for batch in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(batch * w)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
        for batch in val:
            tf.reduce_mean(batch * w)
    """
)
_TRAIN_MAP = "ds = ds.apply(lambda d: d.map(read))"
# The same pipeline, iterated inside a tf.function: it cannot be drained from Python.
IN_FUNCTION = textwrap.dedent(
    """
    import tensorflow as tf

    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.cast(i, tf.float32)).batch(8)
    w = tf.Variable(0.0)
    opt = tf.keras.optimizers.SGD(1e-9)

    @tf.function
    def train():
        for batch in ds:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(batch * w)
            opt.apply_gradients([(tape.gradient(loss, w), w)])

    train()
    """
)


def test_candidates_keep_the_model_side_and_size_the_pool_with_the_parallelism() -> None:
    sites = [
        CallSite("train.py:10", "map", (), SiteConfig(), None, 1),
        CallSite("train.py:11", "batch", (), SiteConfig(batch_size=32), None, 1),
    ]
    space = build_space(sites, cores=2)
    got = candidates(space)
    assert got[0] == space.as_written_params()
    assert got[1]["train.py:10/num_parallel_calls"] == AUTOTUNE
    # AUTOTUNE again with the largest pool: it never goes past the pool it is given.
    assert got[2]["train.py:10/num_parallel_calls"] == AUTOTUNE
    assert (got[1]["threadpool_size"], got[2]["threadpool_size"]) == (None, 64)
    assert len(got) <= MAX_CANDIDATES and len({repr(sorted(p.items())) for p in got}) == len(got)
    for params in got:
        assert params["train.py:11/batch_size"] == 32  # the model's side stays as written
        par = params["train.py:10/num_parallel_calls"]
        if isinstance(par, int) and par > 2:
            assert params["threadpool_size"] == par  # AUTOTUNE never goes past the pool
    assert {16, 64} <= {p["train.py:10/num_parallel_calls"] for p in got}


def test_the_search_starts_from_the_screens_best_then_the_same_with_a_larger_batch() -> None:
    from tftune.tuner.searchspace.screen import search_seeds

    sites = [
        CallSite("train.py:10", "map", (), SiteConfig(), None, 1),
        CallSite("train.py:11", "batch", (), SiteConfig(batch_size=32), None, 1),
    ]
    space = build_space(sites, cores=2)
    best = space.params_for({"num_parallel_calls": 16, "threadpool_size": 16})
    second = space.params_for({"num_parallel_calls": 8, "threadpool_size": 8})
    entries = (
        ScreenEntry(space.as_written_params(), "as written", 100.0),
        ScreenEntry(best, "best", 900.0),
        ScreenEntry(second, "second", 700.0),
    )
    seeds = search_seeds(space, Screen(entries, 3.0))
    assert seeds == [best, {**best, "train.py:11/batch_size": 64}, second]
    fixed = build_space(sites[:1], cores=2)  # no batch knob: nothing to double
    assert search_seeds(fixed, Screen(entries, 3.0)) == [best, second]
    assert search_seeds(space, None) == []


def test_seeds_are_the_best_ranked_and_never_a_partly_rebuilt_candidate() -> None:
    entries = (
        ScreenEntry({"p": 1}, "as written", 100.0),
        ScreenEntry({"p": 2}, "a", 900.0, missing=("x.py:3",)),  # not rebuilt at x.py:3
        ScreenEntry({"p": 3}, "b", 500.0),
        ScreenEntry({"p": 4}, "c", None, error="InvalidArgumentError: ..."),
        ScreenEntry({"p": 5}, "d", 700.0),
    )
    screen = Screen(entries, 3.0)
    assert screen.seeds(2) == [{"p": 5}, {"p": 3}]
    assert "best 700.0 ex/s (d), as written 100.0" in screen.summary()
    assert StudySettings(seeds=tuple(screen.seeds())).seeds[0] == {"p": 5}


@pytest.fixture(scope="module")
def screened(tmp_path_factory: pytest.TempPathFactory) -> tuple[Screen, list[str]]:
    screen, space = _screen_script(tmp_path_factory.mktemp("screen"), seconds=0.4)
    return screen, [k.site or "" for k in space.knobs if k.field == "num_parallel_calls"]


def _screen_script(
    folder: Path, seconds: float, stop_above: float | None = None
) -> tuple[Screen, SearchSpace]:
    """SCRIPT discovered and screened, as `tftune optimize` does it."""
    script = folder / "train.py"
    script.write_text(SCRIPT)
    found = discover(script)
    space = build_space(found.sites, cores=2)
    trains = found.training
    assert trains is not None
    where = (trains.site, trains.place)
    return run_screen(script, [], space, where, seconds=seconds, stop_above=stop_above), space


@pytest.mark.slow
def test_every_candidate_is_rebuilt_and_drained_in_one_run(
    screened: tuple[Screen, list[str]],
) -> None:
    screen, _sites = screened
    assert screen.reason is None
    for e in screen.entries:
        assert e.error is None and e.missing == () and (e.examples_per_s or 0) > 0, e
        assert e.busy_cores is not None and e.busy_cores > 0
    assert screen.entries[0].description == "as written"


@pytest.mark.slow
def test_the_screen_ranks_a_latency_bound_map_by_its_parallelism(
    screened: tuple[Screen, list[str]],
) -> None:
    """Each element waits 3 ms in Python: 16 calls in flight (with the pool to run them)
    deliver several times what one does, whatever the load on the machine."""
    screen, sites = screened
    lines = SCRIPT.splitlines()
    (site,) = [s for s in sites if s == f"train.py:{lines.index(_TRAIN_MAP) + 1}"]
    written = screen.entries[0].examples_per_s or 0.0
    par16 = next(e for e in screen.entries if e.params.get(f"{site}/num_parallel_calls") == 16)
    assert (par16.examples_per_s or 0.0) > 3 * written
    best = screen.best_first()[0]
    assert best.params[f"{site}/num_parallel_calls"] not in (None, 1, 2)


@pytest.mark.slow
def test_a_dataset_iterated_in_a_tf_function_is_not_screened(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(IN_FUNCTION)
    found = discover(script)
    space = build_space(found.sites, cores=2)
    screen = run_screen(script, [], space, None, seconds=0.2)
    assert screen.best_first() == [] and screen.seeds() == []
    why = "the training dataset is iterated inside a tf.function"
    assert screen.reason == f"no candidate could be screened: {why}"
    assert all(e.error == why for e in screen.entries)


DISTRIBUTED = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
ds = tf.data.Dataset.range(10**9).map(lambda x: tf.cast(x % 7, tf.float32)).batch(64)
with strategy.scope():
    w = tf.Variable(1.0)

def fn(x):
    w.assign_sub(1e-6 * tf.reduce_mean(x))

for element in strategy.experimental_distribute_dataset(ds):
    strategy.run(fn, args=(element,))
"""


@pytest.mark.slow
def test_a_dataset_split_by_tf_distribute_is_not_screened_and_nothing_waits(
    tmp_path: Path,
) -> None:
    """Its per-device parts read from a multi-device iterator not yet running: drained
    alone they waited forever (the screen, then the bound analysis, each until its
    deadline). Both say why at once; the test set's batch is not searched."""
    from tftune.tuner.searchspace.bounds import DISTRIBUTED as WHY
    from tftune.tuner.study import Mode
    from tftune.tuner.study.script_runner import ScriptRunner
    from tftune.tuner.trial import MeasureSpec

    script = tmp_path / "train.py"
    script.write_text(DISTRIBUTED)
    found = discover(script)
    trains = found.training
    assert trains is not None and trains.site == "train.py:6", found.streams
    assert found.training_sites() == frozenset({"train.py:6"})
    space = build_space(found.sites, cores=2)
    screen = run_screen(script, [], space, (trains.site, trains.place), seconds=0.2)
    assert screen.reason == f"no candidate could be screened: {WHY}"
    spec = MeasureSpec(training_at=(trains.site, trains.place), step_timeout_s=60)
    runner = ScriptRunner(script, (), spec=spec)
    for mode in (Mode.PIPELINE_ONLY, Mode.MODEL_ONLY):
        m = runner.measure(space.config({}), mode=mode)
        assert m.examples_per_s is None and WHY in (m.reason or "") + m.stderr_tail, m


def test_one_host_sizing_uses_the_pipeline_at_its_best_screened_config() -> None:
    from tftune.probes.live.environment import usable_cores
    from tftune.tuner.searchspace.bounds import Ceiling
    from tftune.tuner.searchspace.screen import with_screen_sizing

    cores = usable_cores()
    entries = (
        ScreenEntry({"p": 1}, "as written", 1000.0, busy_cores=0.5),
        ScreenEntry({"p": 2}, "best", 4000.0, busy_cores=float(cores)),  # every core busy
    )
    ceiling = Ceiling(1000.0, 40_000.0)
    sized = with_screen_sizing(ceiling, Screen(entries, 2.0))
    assert sized is not None and sized.sizing is not None
    s = sized.sizing
    assert s.pipeline_rate == 4000.0 and s.saturated
    assert s.per_core_rate == pytest.approx(4000.0 / cores)
    assert s.cores_needed == pytest.approx(10.0 * cores)  # 40,000 at 4,000/cores per core
    assert s.more_workers == 10 - 1  # ten hosts in all, this one included
    assert with_screen_sizing(None, Screen(entries, 2.0)) is None
    assert with_screen_sizing(ceiling, None) is ceiling


@pytest.mark.slow
def test_the_screen_stops_after_the_script_as_written_when_the_model_is_the_limit(
    tmp_path: Path,
) -> None:
    """With the model alone measured first, a pipeline as written that already drains
    at twice the model's rate or more is not the limit: nothing else is screened."""
    screen, space = _screen_script(tmp_path, seconds=0.2, stop_above=1.0)
    assert screen.stopped and screen.seeds() == [] and screen.as_written() is not None
    assert all(e.error == NOT_SCREENED for e in screen.entries[1:])
    assert len(screen.entries) == len(candidates(space)) > 2
    assert "the pipeline is not the limit, so no other config was screened" in screen.summary()


ADAPT = """\
import numpy as np
import tensorflow as tf
from tensorflow import keras

x = np.random.rand(2048, 8).astype("float32")
y = x.sum(axis=1, keepdims=True)
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a * 2.0, b)).batch(32)
norm = keras.layers.Normalization()
norm.adapt(ds.take(2).map(lambda a, b: a))
model = keras.Sequential([keras.Input((8,)), norm, keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(ds.repeat(), steps_per_epoch=20, epochs=3, verbose=0)
"""


@pytest.mark.slow
def test_an_adapt_samples_own_map_is_no_knob_of_training(tmp_path: Path) -> None:
    """``norm.adapt(ds.take(2).map(f))`` before ``fit``: the sample's map feeds no
    update, so its parallelism is left out (said), and the training map's is searched."""
    from tftune.tuner.searchspace.space_build import NOT_TRAINING_SITE

    script = tmp_path / "train.py"
    script.write_text(ADAPT)
    found = discover(script)
    assert found.training is not None, found.streams
    assert found.elsewhere_sites() == frozenset({"train.py:9"}), found.pipelines
    training = found.training_sites() or frozenset()
    assert "train.py:7" in training
    space = build_space(
        found.sites,
        cores=2,
        training_sites=found.training_sites(),
        elsewhere_sites=found.elsewhere_sites(),
    )
    names = {k.name for k in space.knobs}
    assert "train.py:7/num_parallel_calls" in names
    assert "train.py:9/num_parallel_calls" not in names
    assert ("train.py:9/num_parallel_calls", NOT_TRAINING_SITE) in {
        (lo.name, lo.reason) for lo in space.left_out
    }
