"""Live trials: real TensorFlow in real subprocesses, checked by ranges, never exact times."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import requires_tf
from repo_paths import ROOT

from tftune.core.errors import ScriptError
from tftune.core.failures import FailureKind
from tftune.core.vocabulary import TrialState
from tftune.tuner.option_defaults import EXTRA_WINDOWS
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig, save_config
from tftune.tuner.trial import MeasureSpec, discover, run_script, run_trial

EXAMPLES = ROOT / "examples"
QUICK = MeasureSpec(warmup_steps=3, warmup_s=0.3, window_s=0.6, repeats=2, stall_s=30)

pytestmark = requires_tf


def _live_children() -> set[int]:
    """Processes whose parent is this test process, zombies excluded."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] != "Z" and int(fields[1]) == me:
            out.add(int(entry.name))
    return out


@pytest.fixture(autouse=True)
def _no_child_survives() -> Iterator[None]:
    before = _live_children()
    yield
    deadline = time.monotonic() + 5
    while (_live_children() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (_live_children() - before), "a child process outlived its test"


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie is dead, only not yet reaped


def _line_of(path: Path, needle: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


PIPELINE = """
import sys, time
import tensorflow as tf
ds = tf.data.Dataset.range(10**9).map(lambda x: x * 2).batch(4)
w = tf.Variable(0.0)  # trained by a raw update: the loop is training
for step, batch in enumerate(ds):
    time.sleep(0.002)
    w.assign_sub(1e-9 * tf.cast(tf.reduce_sum(batch), tf.float32))
    if step == 20:
        {action}
"""


def test_discovery_finds_call_sites_with_values_as_written() -> None:
    found = discover(EXAMPLES / "eager_for.py", ["--steps", "5"], cwd=EXAMPLES)
    by_op = {s.op: s for s in found.sites}
    assert set(by_op) == {"map", "batch", "prefetch"}
    assert by_op["map"].site == f"eager_for.py:{_line_of(EXAMPLES / 'eager_for.py', '.map(')}"
    assert by_op["map"].as_written == SiteConfig(num_parallel_calls=2)
    assert by_op["map"].function == "make_example"
    assert by_op["batch"].as_written == SiteConfig(batch_size=32)
    assert by_op["prefetch"].as_written == SiteConfig(buffer_size=2)
    batch_site = f"eager_for.py:{_line_of(EXAMPLES / 'eager_for.py', '.batch(')}"
    assert by_op["batch"].site == by_op["prefetch"].site == batch_site
    (pipeline,) = found.pipelines
    assert pipeline.final_prefetch and pipeline.batched and pipeline.site == batch_site


def test_discovery_stops_once_the_loop_trains(tmp_path: Path) -> None:
    # The loop would run for an hour; discovery returns as soon as it is seen training.
    script = _script(tmp_path, PIPELINE.format(action="time.sleep(3600)"))
    started = time.monotonic()
    found = discover(script)
    assert time.monotonic() - started < 60
    assert [(s.site, s.op) for s in found.sites] == [("train.py:4", "map"), ("train.py:4", "batch")]
    assert found.sites[0].as_written == SiteConfig()  # map without num_parallel_calls
    assert found.training is not None and found.training.place == "train.py:6"
    assert not found.busiest_loop


CONSUMER = """
import time
import tensorflow as tf
count = sum(1 for _ in tf.data.Dataset.range(50))  # a counting loop first
ds = tf.data.Dataset.range(10**9).map(lambda x: x * 2).batch(4)
for batch in ds:  # consumes, updates nothing: a pipeline benchmark
    time.sleep(0.002)
"""


def test_a_loop_that_updates_nothing_is_measured_as_the_busiest_loop(tmp_path: Path) -> None:
    from tftune.tuner.trial.watch import KNOWN_BUSIEST_S

    script = _script(tmp_path, CONSUMER)
    found = discover(script)
    # Its code names nothing that trains: the short wait, not FALLBACK_S.
    assert found.fallback_s == KNOWN_BUSIEST_S
    assert found.busiest_loop and found.training is not None
    assert found.training.site == "train.py:5" and found.training.place == "train.py:6"
    assert "the busiest loop" in found.training.role
    counting = next(s for s in found.streams if s.place == "train.py:4")
    assert counting.elements == 50 and not counting.training
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.5, repeats=1, busiest_loop=True)
    result = run_trial(script, (), None, spec)
    assert result.ok, (result.reason, result.stderr_tail)
    assert result.measured and result.examples == 4 * result.steps


@pytest.mark.slow
def test_without_the_busiest_loop_a_loop_that_updates_nothing_is_not_training(
    tmp_path: Path,
) -> None:
    script = _script(tmp_path, CONSUMER)
    # 30 s: the child must import TensorFlow and iterate within it, and a 2-core machine
    # at load 6 took more than 15 s to get there ("no dataset was iterated").
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.2, window_s=0.5, repeats=1, step_timeout_s=30)
    result = run_trial(script, (), None, spec)
    assert result.failure is FailureKind.STALL, result
    assert result.reason is not None and "no dataset fed an optimizer update" in result.reason
    assert "built at train.py:5, iterated at train.py:6" in result.reason


def test_discovery_of_interleave_kin_and_padded_batch(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import tensorflow as tf
        from tensorflow.data.experimental import parallel_interleave
        files = tf.data.Dataset.range(8)
        a = files.interleave(lambda i: tf.data.Dataset.range(i), cycle_length=3,
                             num_parallel_calls=tf.data.AUTOTUNE)
        b = files.apply(parallel_interleave(lambda i: tf.data.Dataset.range(i), 2))
        c = a.concatenate(b).map(lambda x: tf.fill([x], x)).padded_batch(5)
        next(iter(c))
        """,
    )
    found = {(s.site, s.op): s.as_written for s in discover(script).sites}
    assert found == {
        ("train.py:5", "interleave"): SiteConfig(num_parallel_calls=AUTOTUNE, cycle_length=3),
        ("train.py:7", "parallel_interleave"): SiteConfig(cycle_length=2),
        ("train.py:8", "map"): SiteConfig(),
        ("train.py:8", "padded_batch"): SiteConfig(batch_size=5),
    }


READERS = """
import os
import tensorflow as tf
files = []
for i in range(4):
    files.append(os.path.abspath(f"part-{i}.tfrecord"))
    with tf.io.TFRecordWriter(files[-1]) as w:
        for j in range(3):
            w.write(f"{i}".encode())
ds = tf.data.TFRecordDataset(files)
each = tf.data.Dataset.from_tensor_slices(files).interleave(
    lambda f: tf.data.TFRecordDataset(f), cycle_length=2)
print("ORDER", "".join(r.decode() for r in ds.take(4).as_numpy_iterator()))
next(iter(each))
"""


def test_file_readers_are_call_sites_of_their_parallel_reads(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """`TFRecordDataset(files)` reads one file after another unless told to read several
    at once: a call site whose knob is `num_parallel_reads`. A reader of one file (the
    body of an interleave) is not one. The config reaches the reader, and the diff names
    the reader's own keyword."""
    from tftune.tuner.output.emit import source_diff

    script = _script(tmp_path, READERS)
    found = {(s.site, s.op): s.as_written for s in discover(script, cwd=tmp_path).sites}
    assert found == {
        ("train.py:10", "TFRecordDataset"): SiteConfig(),
        ("train.py:11", "interleave"): SiteConfig(cycle_length=2),
    }
    plain = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "ORDER 0001" in plain.stdout, plain.stderr  # file 0's three records, then file 1
    config = Config(sites={"train.py:10": SiteConfig(num_parallel_calls=4)})
    tuned = run_cli("run", "--config", str(save_config(config, tmp_path / "c.json")), "train.py")
    assert tuned.returncode == 0, tuned.stderr
    assert "ORDER 0123" in tuned.stdout  # four files read at once, interleaved
    assert "+ds = tf.data.TFRecordDataset(files, num_parallel_reads=4)" in source_diff(
        script, config
    )


PY_DATASET = """
import time
import numpy as np
import tensorflow as tf


class Slow(tf.keras.utils.PyDataset):
    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.01)  # a read from slow storage
        return np.ones((8, 4), np.float32), np.ones((8, 1), np.float32)


model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(Slow(10**6), epochs=1, verbose=0)
"""


def test_a_keras_py_dataset_is_a_call_site_of_its_workers(tmp_path: Path) -> None:
    """A PyDataset's `workers`, `use_multiprocessing` and `max_queue_size` are its
    knobs: discovery records the subclass's ``super().__init__`` line with Keras'
    defaults, a config of 8 worker threads runs 8 slow reads at once, and the diff
    passes them in that call."""
    from tftune.tuner.output.emit import source_diff

    script = _script(tmp_path, PY_DATASET)
    found = discover(script, cwd=tmp_path)
    assert [(s.site, s.op, s.as_written) for s in found.sites] == [
        (
            "train.py:9",
            "PyDataset",
            SiteConfig(num_parallel_calls=1, buffer_size=10, use_multiprocessing=False),
        )
    ]
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.5, window_s=1.0, repeats=2, stall_s=30)
    as_written = run_trial(script, (), None, spec)
    tuned_config = Config(sites={"train.py:9": SiteConfig(num_parallel_calls=8, buffer_size=32)})
    tuned = run_trial(script, (), tuned_config, spec)
    assert as_written.measured, (as_written.reason, as_written.stderr_tail)
    assert tuned.measured, (tuned.reason, tuned.stderr_tail)
    # One read of 10 ms per batch of 8: at most 800 examples/s one after another.
    assert as_written.examples_per_s < 850
    assert as_written.examples == 8 * as_written.steps
    # Workers not applied would read ~1x; a loaded 2-core host (load 5-6) read 2.2x.
    assert tuned.examples_per_s > 1.8 * as_written.examples_per_s
    diff = source_diff(script, tuned_config)
    assert "+        super().__init__(**kwargs, workers=8, max_queue_size=32)" in diff, diff


def test_a_config_never_asks_an_interleave_for_more_calls_than_its_cycle(
    tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    """A config file may say 8 parallel calls for an interleave written with
    `cycle_length=2`, or with TF's default cycle length (AUTOTUNE: the core count); TF
    would refuse either when the pipeline starts. The run caps them (2, and the cores)."""
    script = _script(
        tmp_path,
        """
        import tensorflow as tf
        ds = tf.data.Dataset.range(4).interleave(
            lambda i: tf.data.Dataset.range(3), cycle_length=2)
        ds = ds.interleave(lambda i: tf.data.Dataset.range(2))
        print("SUM", int(ds.reduce(tf.constant(0, tf.int64), lambda a, b: a + b)))
        """,
    )
    fixed, default = discover(script, cwd=tmp_path).sites
    assert fixed.as_written == SiteConfig(cycle_length=2)
    assert default.as_written == SiteConfig()
    eight = SiteConfig(num_parallel_calls=8)
    config = Config(sites={fixed.site: eight, default.site: eight})
    out = run_cli("run", "--config", str(save_config(config, tmp_path / "c.json")), "train.py")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SUM 12" in out.stdout


def test_discovery_of_a_script_without_pipeline(tmp_path: Path) -> None:
    found = discover(_script(tmp_path, "print('hello')\n"))
    assert not found.found and found.returncode == 0


RAISES_MID_EPOCH = """
import time
import numpy as np
import tensorflow as tf
def words(text):
    time.sleep(0.001)
    return np.array([len(w) for w in text.numpy().decode().split()], np.int64)
def load(text):
    ids = tf.py_function(words, [text], tf.int64)
    ids.set_shape([4])  # wrong: every line has five words
    return ids
ds = tf.data.Dataset.from_tensor_slices([f"line {i} of five words" for i in range(320)])
for ids in ds.map(load).shuffle(200).batch(16):
    pass
"""


def test_a_script_that_raises_mid_epoch_ends_discovery_with_its_error(tmp_path: Path) -> None:
    # The iterator dies with a py_function map in flight: TF's teardown would wait for
    # the GIL its prefetching thread needs, and discovery for its whole step timeout.
    found = discover(_script(tmp_path, RAISES_MID_EPOCH), timeout_s=120)
    assert not found.timed_out and found.returncode == 1
    message = found.no_training()
    assert "exited with code 1" in message and "Incompatible shapes" in message


@pytest.mark.slow
def test_config_turns_latency_bound_map_parallel() -> None:
    args = ["--steps", "100000", "--latency-ms", "4"]
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.5, window_s=1.0, repeats=2)
    as_written = run_trial(EXAMPLES / "latency_bound.py", args, Config(), spec)
    site = next(
        s.site for s in discover(EXAMPLES / "latency_bound.py", args).sites if s.op == "map"
    )
    tuned_config = Config(
        sites={site: SiteConfig(num_parallel_calls=32)}, threadpool_size=32, final_prefetch=AUTOTUNE
    )
    tuned = run_trial(EXAMPLES / "latency_bound.py", args, tuned_config, spec)
    assert as_written.ok and tuned.ok, (as_written.reason, tuned.reason)
    assert as_written.measured and tuned.measured
    # Sequential: one element per ~4 ms, at most 250/s, and the consumer waits nearly always.
    assert 60 < as_written.examples_per_s < 260
    assert as_written.input_wait_share > 0.8
    assert tuned.examples_per_s > 4 * as_written.examples_per_s
    assert tuned.utilization_kind == "duty_cycle"
    assert tuned.utilization == pytest.approx(1 - tuned.input_wait_share)
    assert 2 <= len(tuned.repeats) <= 2 + EXTRA_WINDOWS and tuned.spread >= 0


@pytest.mark.slow
@pytest.mark.parametrize("example", ["keras_fit", "eager_for", "iter_next", "tf_function_loop"])
def test_each_loop_style_is_measured(example: str) -> None:
    result = run_trial(EXAMPLES / f"{example}.py", ["--steps", "3000"], None, QUICK)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    m = result
    assert m.measured and not m.truncated
    assert m.examples == 32 * m.steps  # batches of 32 counted as 32 examples each
    assert m.examples_per_s > 100 and m.steps_per_s > 3
    assert 0 < m.step_p50_ms <= m.step_p90_ms
    assert 0.0 <= m.input_wait_share <= 1.0


def test_a_dataset_rebuilt_every_epoch_is_one_training_stream(tmp_path: Path) -> None:
    """An eager loop that builds a fresh dataset every epoch (and runs a validation loop
    of its own after each) is measured across epochs: the rebuilt datasets are one
    stream (built at one site, iterated at one place); validation is not training."""
    script = _script(
        tmp_path,
        """
        import tensorflow as tf

        def make(n):
            return tf.data.Dataset.range(n).map(lambda i: tf.cast(i, tf.float32)).batch(4)

        val = tf.data.Dataset.range(8).batch(2)
        w = tf.Variable(0.0)
        for epoch in range(10**6):
            for x in make(64):
                w.assign_sub(1e-9 * tf.reduce_sum(x))
            for v in val:
                tf.reduce_sum(v)
        """,
    )
    result = run_trial(script, [], None, QUICK)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    m = result
    assert m.measured and not m.truncated
    assert m.steps > 3 * 16  # the windows span several epochs of 16 steps
    assert m.examples == 4 * m.steps  # no validation batch (of 2) among them


HELPER_TRAIN_VAL = {
    "eager": """
        import tensorflow as tf

        def make(n, batch):
            return tf.data.Dataset.range(n).map(lambda i: tf.cast(i, tf.float32)).batch(batch)

        w = tf.Variable(0.0)

        def run(ds, learn):
            for x in ds:
                loss = tf.reduce_sum(x)
                if learn:
                    w.assign_sub(1e-9 * loss)

        train, val = make(64, 4), make(8, 2)
        for epoch in range(10**6):
            run(train, True)
            run(val, False)
        """,
    "keras_fit": """
        import numpy as np
        import tensorflow as tf

        x = np.zeros((4096, 8), np.float32)
        y = np.zeros((4096, 1), np.float32)

        def make(n, batch):
            return tf.data.Dataset.from_tensor_slices((x[:n], y[:n])).batch(batch)

        model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(make(256, 4), validation_data=make(64, 2), epochs=10**6, verbose=0)
        """,
}


@pytest.mark.parametrize("loop", sorted(HELPER_TRAIN_VAL))
def test_train_and_validation_from_one_helper_are_two_streams(tmp_path: Path, loop: str) -> None:
    """Training and validation datasets built by one helper line and iterated at one
    place (a helper's loop, or Keras `fit` with `validation_data`) are both alive: they
    are two streams, and only training is measured. (A dataset rebuilt every epoch, whose
    predecessor is gone, stays one stream: the test above.)"""
    script = _script(tmp_path, HELPER_TRAIN_VAL[loop])
    result = run_trial(script, [], None, QUICK)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    m = result
    assert m.measured and not m.truncated
    assert m.steps > 2 * 16  # the windows span epochs
    assert m.examples == 4 * m.steps  # no validation batch (of 2) among them


@pytest.mark.parametrize(("input_ms", "step_ms"), [(30, 2), (2, 30)], ids=["input", "compute"])
def test_a_loop_inside_a_tf_function_is_timed_per_step(
    tmp_path: Path, input_ms: int, step_ms: int
) -> None:
    """`for x in ds` in a tf.function (no iterator): the clock around the loop body
    tells a slow input (the body waits) from a slow step (the input is ready)."""
    script = _script(
        tmp_path,
        f"""
        import time
        import numpy as np
        import tensorflow as tf

        def slow(i):
            time.sleep({input_ms} / 1000)
            return np.float32(i)

        def work(x):
            time.sleep({step_ms} / 1000)
            return x

        ds = tf.data.Dataset.range(10**9).map(
            lambda i: tf.numpy_function(slow, [i], tf.float32)).batch(2)

        w = tf.Variable(0.0)

        @tf.function
        def train(dataset):
            total = tf.constant(0.0)
            for x in dataset:
                total += tf.reduce_sum(tf.numpy_function(work, [x], tf.float32))
                w.assign_sub(1e-9 * total)
            return total

        train(ds)
        """,
    )
    result = run_trial(script, [], None, QUICK)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    m = result
    assert m.measured and m.examples == 2 * m.steps
    # a step takes at least its two inputs (sequential map) or its own work
    slowest_ms = max(2 * input_ms, step_ms)
    assert m.step_p50_ms >= 0.8 * slowest_ms
    if input_ms > step_ms:
        assert m.input_wait_share > 0.6
    else:
        assert m.input_wait_share < 0.4


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["keras_fit", "custom_loop", "eager_for", "for_in_function"])
def test_tf_distribute_loops_count_steps_not_replica_fetches(tmp_path: Path, loop: str) -> None:
    """MirroredStrategy over two logical CPUs: each step fetches one element per replica
    (32 examples each of the global 64). A step is one distributed fetch, with both
    replicas' examples: 64 examples per step. Keras also takes an element of another
    dataset before training."""
    common = """
        import numpy as np
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        two = [tf.config.LogicalDeviceConfiguration()] * 2
        tf.config.set_logical_device_configuration(cpu, two)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        x = np.random.default_rng(0).normal(size=(4096, 32)).astype("float32")
        ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)
        with strategy.scope():
            w = tf.Variable(tf.zeros([32, 1]))

        def fn(a, b):
            w.assign_sub(1e-3 * tf.matmul(a, a @ w - b, transpose_a=True))
    """
    body = {
        "keras_fit": """
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(1)])
            model.compile("sgd", "mse")
        model.fit(ds, steps_per_epoch=100000, epochs=1, verbose=0)
        """,
        "custom_loop": """
        @tf.function
        def step(it):
            strategy.run(fn, args=next(it))

        it = iter(strategy.experimental_distribute_dataset(ds))
        for _ in range(100000):
            step(it)
        """,
        "eager_for": """
        @tf.function
        def step(element):
            strategy.run(fn, args=element)

        for element in strategy.experimental_distribute_dataset(ds):
            step(element)
        """,
        "for_in_function": """
        dist = strategy.experimental_distribute_dataset(ds.take(300))

        @tf.function
        def epoch():
            for element in dist:
                strategy.run(fn, args=element)

        while True:
            epoch()
        """,
    }[loop]
    script = _script(tmp_path, common + body)
    result = run_trial(script, [], None, QUICK)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    m = result
    assert m.measured and m.steps > 10 and m.examples == 64 * m.steps


def test_script_that_ends_early_is_measured_over_what_it_ran() -> None:
    result = run_trial(EXAMPLES / "iter_next.py", ["--steps", "40"], None, MeasureSpec(window_s=30))
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    assert result.measured and result.truncated
    assert 0 < result.steps < 40  # every delivery is a step the loop consumed


@pytest.mark.parametrize(
    ("action", "kind", "words"),
    [
        ("raise ValueError('bad shard')", FailureKind.EXCEPTION, "bad shard"),
        ("sys.exit(3)", FailureKind.EXIT, "code 3"),
        (
            "raise tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating tensor')",
            FailureKind.OOM,
            "out of memory",
        ),
        ("__import__('numpy').ones((1 << 47,))", FailureKind.OOM, "memory"),
        ("time.sleep(600)", FailureKind.STALL, "stalled"),
    ],
    ids=["exception", "exit", "resource-exhausted", "memory-error", "stall"],
)
def test_failures_are_results_with_reasons(
    tmp_path: Path, action: str, kind: FailureKind, words: str
) -> None:
    script = _script(tmp_path, PIPELINE.format(action=action))
    spec = MeasureSpec(warmup_steps=2, warmup_s=0.1, window_s=30, repeats=1, stall_s=5)
    result = run_trial(script, (), None, spec)
    assert result.state is TrialState.FAILED
    assert result.failure is kind, (result.reason, result.stderr_tail)
    assert result.reason is not None and words in result.reason
    assert "\n" not in result.reason


def test_a_finite_script_with_a_py_function_exits_on_its_own(tmp_path: Path) -> None:
    """A script that ends with its iterator alive, over a map that runs a `py_function`:
    TF's teardown would hang (the iterator is destroyed holding the GIL while its
    prefetching thread waits for the GIL inside the function). The measured child leaves
    without the teardown, exit code 0, and the trial is measured over what ran."""
    script = _script(
        tmp_path,
        """
        import tensorflow as tf

        def tok(s):
            return tf.constant([len(s.numpy())] * 8, tf.int32)

        def encode(s):
            ids = tf.py_function(tok, [s], tf.int32)
            ids.set_shape([None])
            return ids

        lines = tf.data.Dataset.from_tensor_slices(["a b", "c d e"]).repeat()
        ds = lines.map(encode).ragged_batch(32).map(lambda r: r.to_tensor(shape=[32, 8]))
        it = iter(ds)
        w = tf.Variable(0.0)
        for _ in range(200):
            w.assign_add(1e-9 * tf.cast(tf.reduce_sum(next(it)), tf.float32))
        """,
    )
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.3, window_s=60, repeats=2, stall_s=60)
    result = run_trial(script, [], None, spec)
    assert result.state is TrialState.COMPLETE, (result.reason, result.stderr_tail)
    assert result.measured and result.truncated
    assert result.returncode == 0  # it left by itself: no teardown hang for tftune to stop


def test_nan_loss_fails_the_trial(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import numpy as np, tensorflow as tf
        x = np.ones((256, 4), "float32"); y = np.full((256, 1), np.nan, "float32")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(ds, steps_per_epoch=10_000, epochs=1, verbose=0)
        """,
    )
    result = run_trial(script, (), None, QUICK)
    assert result.failure is FailureKind.NAN, (result.reason, result.stderr_tail)
    assert result.reason is not None and "nan" in result.reason.lower()


CUSTOM_NAN = """
    import numpy as np, tensorflow as tf
    x = np.ones((256, 4), "float32"); y = np.full((256, 1), np.nan, "float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)

    def step(a, b):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(a) - b))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    {loop}
"""
CUSTOM_LOOPS = {
    "eager_for": "step = tf.function(step)\n    for a, b in ds:\n        step(a, b)",
    "loop_in_function": (
        "@tf.function\n    def train(d):\n        for a, b in d:\n            step(a, b)\n"
        "    train(ds)"
    ),
}


@pytest.mark.parametrize("loop", sorted(CUSTOM_LOOPS))
def test_nan_weights_of_a_custom_loop_fail_the_trial(tmp_path: Path, loop: str) -> None:
    """A GradientTape loop has no loss tftune can read: a Keras optimizer's trained
    weights turning NaN is the sign, eager step or whole loop in a tf.function."""
    script = _script(tmp_path, CUSTOM_NAN.format(loop=CUSTOM_LOOPS[loop]))
    spec = MeasureSpec(warmup_steps=3, warmup_s=0.3, window_s=30, repeats=1, stall_s=30)
    result = run_trial(script, (), None, spec)
    assert result.failure is FailureKind.NAN, (result.reason, result.stderr_tail)
    assert result.reason == "the trained weights became nan (NaN/inf)"


def test_no_child_survives_a_trial_even_a_forked_one(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = _script(
        tmp_path,
        f"""
        import os, signal, time
        import tensorflow as tf
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stubborn: only SIGKILL works
            while True:
                time.sleep(1)
        open({str(pid_file)!r}, "w").write(str(pid))
        w = tf.Variable(0.0)
        for batch in tf.data.Dataset.range(10**9).batch(8):
            time.sleep(0.005)
            w.assign_sub(1e-9)
        """,
    )
    result = run_trial(script, (), None, QUICK)
    assert result.ok, (result.reason, result.stderr_tail)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_child_sees_argv_cwd_and_path_as_if_run_directly(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "helper.py").write_text("VALUE = 'local import works'\n")
    out = tmp_path / "seen.txt"
    script = _script(
        tmp_path,
        f"""
        import os, sys, helper
        open({str(out)!r}, "w").write(repr((sys.argv, os.getcwd(), sys.path[0], __name__,
            helper.VALUE, "TFTUNE_CHILD_SPEC" in os.environ)))
        """,
    )
    assert run_script(script, ["--epochs", "3", "x"], Config(), cwd=work) == 0
    argv, cwd, path0, name, helper, leaked = eval(out.read_text())
    assert argv == [str(script), "--epochs", "3", "x"]
    assert cwd == str(work) and path0 == str(tmp_path) and name == "__main__"
    assert helper == "local import works" and not leaked


def test_missing_and_broken_scripts_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="no such script"):
        run_trial(tmp_path / "nope.py")
    broken = _script(tmp_path, "def f(:\n    pass\n")
    with pytest.raises(ScriptError, match=r"train.py:1: syntax error"):
        discover(broken)


BATCH_PROBE = """
{prelude}
import tensorflow as tf
ds = tf.data.Dataset.range(100).batch(10, drop_remainder=True)
print("BATCH", ds.element_spec.shape[0])
print("POLICY", tf.keras.mixed_precision.global_policy().name)
print("FIRST", next(iter(ds)).shape[0])
"""


def _batch_config(tmp_path: Path) -> Path:
    config = Config(
        sites={"train.py:4": SiteConfig(batch_size=7), "gone.py:9": SiteConfig(buffer_size=2)},
        mixed_precision="mixed_bfloat16",
    )
    return save_config(config, tmp_path / "best.json")


def test_tftune_run_applies_config(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    _script(tmp_path, BATCH_PROBE.format(prelude=""))
    cfg = _batch_config(tmp_path)
    plain = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "BATCH 10" in plain.stdout and "POLICY float32" in plain.stdout
    tuned = run_cli("run", "--config", str(cfg), "train.py", "--", "--unused")
    assert tuned.returncode == 0, tuned.stderr
    assert "BATCH 7" in tuned.stdout and "POLICY mixed_bfloat16" in tuned.stdout
    assert "FIRST 7" in tuned.stdout
    assert "call sites this script does not have: gone.py:9" in tuned.stderr
    failing = _script(tmp_path, "import sys; sys.exit(4)\n", "fail.py")
    assert run_cli("run", "--config", str(cfg), str(failing)).returncode == 4


def test_tftune_apply_in_process(tmp_path: Path) -> None:
    cfg = _batch_config(tmp_path)
    script = _script(
        tmp_path, BATCH_PROBE.format(prelude=f"import tftune; tftune.apply({str(cfg)!r})")
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "BATCH 7" in out.stdout and "POLICY mixed_bfloat16" in out.stdout
    assert "gone.py:9" in out.stderr


def test_run_cli_user_errors(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_text('{"threadpool_size": "lots"}')
    script = _script(tmp_path, "print(1)\n")
    for args, words in [
        (["run", "--config", str(bad), str(script)], "threadpool_size"),
        (["run", "--config", str(tmp_path / "none.json"), str(script)], "does not exist"),
        (["run", "--config", str(bad), "missing.py"], "bad.json"),
        (["profile", "missing.py"], "no such script"),
    ]:
        out = run_cli(*args)
        assert out.returncode == 1, out
        assert words in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == sorted(os.listdir(tmp_path))  # nothing odd written
