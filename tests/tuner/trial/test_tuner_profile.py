"""`tftune profile`: a TensorBoard trace of an unmodified script, with step markers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import requires_tf
from repo_paths import ROOT

pytestmark = requires_tf


def _train_markers(logdir: Path) -> list[tuple[int, int]]:
    """(step_num, _r) of every ``train`` event in the one trace under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    (path,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    found = []
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name != "train":
                    continue
                stats = {
                    plane.stat_metadata[s.metadata_id].name: s.int64_value or s.uint64_value
                    for s in event.stats
                }
                found.append((int(stats["step_num"]), int(stats["_r"])))
    return sorted(found)


@pytest.mark.slow
def test_profile_writes_trace_with_step_markers(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    logdir = tmp_path / "logdir"
    script = ROOT / "examples" / "iter_next.py"
    out = run_cli(
        "profile", str(script), "--steps", "3:8", "-o", str(logdir), "--", "--steps", "200"
    )
    assert out.returncode == 0, out.stderr
    assert "steps 3-7" in out.stdout and "tftune analyze" in out.stdout
    # It ends by saying how to open the trace in TensorBoard's profile plugin (or XProf).
    assert f"tensorboard --logdir {logdir}" in out.stdout and "Profile tab" in out.stdout
    assert f"xprof server --logdir {logdir}" in out.stdout.splitlines()[-1]
    assert _train_markers(logdir) == [(n, 1) for n in range(3, 8)]


def test_profile_of_a_script_that_ends_early_keeps_what_ran(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    logdir = tmp_path / "logdir"
    script = ROOT / "examples" / "tf_function_loop.py"
    out = run_cli(
        "profile", str(script), "--steps", "2:500", "-o", str(logdir), "--", "--steps", "20"
    )
    assert out.returncode == 0, out.stderr
    assert "the script ended first" in out.stdout
    markers = _train_markers(logdir)
    assert markers and markers[0] == (2, 1) and all(r == 1 for _, r in markers)
    assert [n for n, _ in markers] == list(range(2, 2 + len(markers)))


def test_profile_of_a_failing_script_is_one_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('no data here')\n")
    out = run_cli("profile", str(script), "-o", str(tmp_path / "logdir"))
    assert out.returncode == 1
    assert "no profile captured" in out.stderr and "no data here" in out.stderr
    assert "Traceback" not in out.stderr


SLOW_SECOND_MAP = """\
import time
import tensorflow as tf
def cheap(i):
    return i * 2
def slow_read(i):
    def _read(x):
        time.sleep(0.02)
        return x
    y = tf.py_function(_read, [i], tf.int64)
    y.set_shape([])
    return y
ds = tf.data.Dataset.range(10**9).map(cheap)
ds = ds.map(slow_read).batch(2)
for step, b in enumerate(ds):
    tf.reduce_sum(b)
"""


def test_analyze_names_the_line_of_a_stage_from_the_profiles_call_sites(
    tmp_path: Path, run_cli
) -> None:  # type: ignore[no-untyped-def]
    """TF's trace names the stage, not the line. `tftune profile` records the call sites
    in the run's folder, and `tftune analyze` names the slow map's line and function
    (the second of two maps: matched by position from the source)."""
    from tftune.probes.advice.analysis import analyze
    from tftune.probes.traces.callsites import SITES_FILE

    script = tmp_path / "train.py"
    script.write_text(SLOW_SECOND_MAP)
    logdir = tmp_path / "logdir"
    out = run_cli("profile", str(script), "--steps", "3:8", "-o", str(logdir))
    assert out.returncode == 0, out.stderr
    (record,) = logdir.glob(f"plugins/profile/*/{SITES_FILE}")
    assert '"train.py:13"' in record.read_text()
    analysis = analyze(logdir)
    top = analysis.findings.bottlenecks[0]
    assert top.call_site == "train.py:13", (top.stage, top.call_site)
    assert top.functions[0] == "slow_read"
    assert top.evidence["call_site_from"] == "the call sites tftune profile recorded"
    fix = top.recommendation
    assert fix is not None and fix.code.startswith("# train.py:13\n"), fix
    assert "ds.map(slow_read" in fix.code  # the user's function, not a placeholder
    import tensorflow as tf

    # The trace does not say which TensorFlow took it; the record beside it does.
    assert analysis.document().metadata.tf_version == tf.__version__


PY_DATASET = """\
import time
import numpy as np
import tensorflow as tf


class Shards(tf.keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(0.05)
        return np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)


model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(Shards(), epochs=1, verbose=0)
"""


def test_analyze_names_a_keras_py_dataset_and_its_workers(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Keras reads a PyDataset through `from_generator`: the trace shows a Generator
    stage. From the profile's call sites, analyze names the class and its
    ``super().__init__`` line, and the fix is the PyDataset's own workers, not a
    rewrite of from_generator."""
    from tftune.probes.advice.analysis import analyze

    script = tmp_path / "train.py"
    script.write_text(PY_DATASET)
    logdir = tmp_path / "logdir"
    out = run_cli("profile", str(script), "--steps", "5:15", "-o", str(logdir))
    assert out.returncode == 0, out.stderr
    top = analyze(logdir).findings.bottlenecks[0]
    assert top.category == "python" and top.call_site == "train.py:8", top
    assert top.functions[0] == "Shards"
    fix = top.recommendation
    assert fix is not None and fix.code.startswith("# train.py:8\nsuper().__init__(workers="), fix
    assert "Shards" in fix.summary and "from_generator" not in fix.summary


def test_the_guided_profile_names_the_bottleneck_call_site_once(tmp_path: Path) -> None:
    """`tftune optimize`'s guided guess: its short profile names the slow map's site,
    each site once, so the guess raises parallelism where the time goes."""
    from tftune.tuner.optimize import profile_hint

    script = tmp_path / "train.py"
    script.write_text(SLOW_SECOND_MAP)
    notes: list[str] = []
    hint = profile_hint(script, [], notes.append)
    assert hint is not None and hint.bottleneck_sites == ("train.py:13",), notes
    assert hint.input_share is not None and hint.input_share > 0.5
    (said,) = [n for n in notes if "profile of the script as written" in n]
    assert said.endswith("bottleneck at train.py:13")


EPOCHS_SCRIPT = """\
import sys
import time

import numpy as np
import tensorflow as tf

PER_EPOCH = int(sys.argv[1])


def slow(x):
    time.sleep(0.002)
    return x


def load(x):
    y = tf.py_function(slow, [x], tf.float32)
    y.set_shape([])
    return y


ds = tf.data.Dataset.from_tensor_slices(np.arange(PER_EPOCH * 8, dtype="float32"))
ds = ds.map(load).shuffle(200).batch(8)
w = tf.Variable(0.0)
opt = tf.keras.optimizers.SGD(0.01)
for epoch in range(1000):
    for b in ds:
        with tf.GradientTape() as tape:
            loss = (w - tf.reduce_mean(b)) ** 2
        opt.apply_gradients([(tape.gradient(loss, w), w)])
"""


@pytest.mark.slow
def test_a_profile_goes_on_to_the_second_epoch_start_where_it_is_near(tmp_path: Path) -> None:
    """The trace ends inside the first epoch: the step clock goes on to the next epoch's
    start (40 steps), so the stall is priced from an epoch start that is no first step;
    an epoch too long to wait for is said, not waited for."""
    from tftune.tuner.trial import profile_script

    script = tmp_path / "train.py"
    script.write_text(EPOCHS_SCRIPT)
    short = profile_script(script, ["40"], 3, 8, tmp_path / "short", timeout_s=240)
    assert short.captured and short.note is None
    assert short.training is not None and short.training.epochs_seen >= 2
    assert short.training.steps_per_epoch == 40
    long = profile_script(script, ["200000"], 3, 8, tmp_path / "long", timeout_s=240)
    assert long.captured and long.training is not None and long.training.epochs_seen == 1
    assert long.note is not None and "too long to wait for" in long.note
