"""tftune on training scripts written the way people write them (tests/realscripts/).

Each script is an idiom seen in Keras examples, TensorFlow tutorials and public repos:
counting a dataset before training, peeking a batch, `repeat().take().enumerate()`,
`TextVectorization.adapt`, validation every epoch, `predict` inside a callback, a GAN
with two optimizers, a vocabulary counted in Python for longer than 20 s before `fit`,
`fit` with a validation pass as long as each short epoch, a shuffle buffer filled by a
`py_function` at every epoch's start, an eager GradientTape step, MirroredStrategy over
two logical CPUs, a Keras PyDataset. Datasets are iterated that are not the training
stream; tftune must clock, profile and tune the training stream only (the dataset whose
elements feed the optimizer updates), and must never break or hang the script.

Per script:
  a) it runs plainly and under `tftune run` with no config, to the same end;
  b) `tftune profile` ends by itself and `tftune analyze` sees training steps (as long as
     the script's own timing of its training iterations, not sub-millisecond counting,
     `adapt` or peek iterations), with the verdict a reader of the script would give
     where that is clear, and tftune names the training loop's line as the training
     stream;
  c) for the riskiest scripts, a one-trial `tftune optimize` ends by itself, its
     as-written baseline is the training loop's throughput (the training batch over the
     training iteration), not the counting loop's or validation's, and it names the
     training loop's line.

Each script prints `trained N steps, batch B, median step X ms`, its own wall time per
training iteration (input included), which is the reference for b) and c).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_tf
from repo_paths import REALSCRIPTS

from tftune.probes.live.epoch_stall import PYTHON_SOURCE

pytestmark = [pytest.mark.slow, requires_tf]

SCRIPTS = REALSCRIPTS
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

PLAIN_TIMEOUT_S = 120  # a short run takes ~5 s
PROFILE_TIMEOUT_S = 180  # a profile of 10 steps takes ~10 s
OPTIMIZE_TIMEOUT_S = 240  # discovery plus one trial of a 1 s window takes ~15 s
TERM_GRACE_S = 15.0

PROFILE_FROM, PROFILE_TO = 5, 15
# A profiled step is the whole training iteration under the profiler (slower, never
# faster than plain by much); counting/adapt/peek iterations are ~0.05-0.5 ms, 20-200x
# below these scripts' training iterations (10-50 ms here). The plain run is measured
# once per session, under whatever load the other test worker put on the machine then:
# audio_decode's plain median read 70 ms under -n 2 load, its profiled steps 27 ms
# (36 and 40 ms on a quiet machine), so the bar sits well below a training step and far
# above a counting iteration.
MIN_STEP_SHARE = 0.2
# The as-written throughput of one short trial (one 1 s window), as a share of the
# script's own batch / median-iteration rate, measured just before. Wide, because a 1 s
# window on a shared 2-core machine swings 2-4x (epoch ends, validation, other load); it
# is here to catch a step's examples miscounted, which is off by the batch size (16-128
# here). Which loop was measured is checked by its line (`_training_loop`).
MIN_RATE_SHARE, MAX_RATE_SHARE = 0.1, 3.0

SUMMARY = re.compile(r"trained (\d+) steps, batch (\d+), median step ([\d.]+) ms")
# What `tftune profile` ("training: the dataset ...") and `tftune optimize` ("training
# loop: the dataset ...") say they took for the training stream, and where it is iterated.
TRAINING_LOOP = re.compile(
    r"(?<!not )\btraining(?: loop)?: the dataset (?:built at \S+|built in a library), "
    r"iterated at (\S+):(\d+)"
)


@dataclass(frozen=True, slots=True)
class Case:
    script: str
    short: tuple[str, ...]  # a run of a few seconds
    long: tuple[str, ...]  # keeps training for many minutes: tftune must stop it
    batch: int
    loop: str  # the training loop's source line(s): a regex, matched from the first non-blank
    input_bound: bool | None = None  # the verdict a reader would give; None: not clear
    optimize: bool = False  # one of the riskiest: also run a one-trial optimize
    # The cause `analyze` names for the epoch-start stall of a profiled run (the step
    # clock's, `probes.live.epoch_stall`); None: not checked.
    stall_cause: str | None = None

    @property
    def id(self) -> str:
        return self.script.removesuffix(".py")

    def loop_lines(self) -> set[int]:
        lines = (SCRIPTS / self.script).read_text().splitlines()
        found = {n for n, text in enumerate(lines, 1) if re.match(self.loop, text.strip())}
        assert found, f"{self.script}: no line matches {self.loop!r}"
        return found


CASES = [
    # Counts 4000 CSV rows one by one and peeks a batch before a ~13 ms step.
    Case("count_then_train.py", ("--steps", "30"), ("--epochs", "100000"), 128,
         loop=r"batches = iter\(train_ds\)|x, y = next\(batches\)", optimize=True),
    # Peeks the test set, then repeat().take(N).enumerate(); two optimizers.
    Case("repeat_take_enumerate.py", ("--steps", "30"), ("--steps", "10000000"), 64,
         loop=r"for step, \(x, y\) in train_ds\.repeat\(\)", optimize=True),
    # cache + map(augment) + prefetch, fit with validation_data (9 steps an epoch).
    Case("image_folders.py", ("--epochs", "2"), ("--epochs", "100000"), 16,
         loop=r"history = model\.fit\("),
    # adapt() iterates the text first; the vectorized, cached dataset feeds fit.
    Case("text_adapt.py", ("--epochs", "1"), ("--epochs", "100000"), 32,
         loop=r"model\.fit\(", optimize=True),
    # A sequential map decodes WAVs into log-mel spectrograms for a tiny conv net.
    Case("audio_decode.py", ("--epochs", "3"), ("--epochs", "100000"), 32,
         loop=r"for spectrograms, labels in train_ds:", input_bound=True),
    # Numpy augmentation image by image between next() and the step.
    Case("python_preprocess_loop.py", ("--steps", "15"), ("--epochs", "100000"), 32,
         loop=r"for images, labels in ds:"),
    # 20 steps of batch 128, then the whole validation set (2000 rows, batch 500).
    Case("validate_every_epoch.py", ("--epochs", "2"), ("--epochs", "100000"), 128,
         loop=r"train_iter = iter\(train_ds\)|x, y = next\(train_iter\)", optimize=True),
    # predict() on 500 held-out images every 10 training batches.
    Case("predict_callback.py", ("--epochs", "1"), ("--epochs", "100000"), 64,
         loop=r"model\.fit\("),
    # ~50 ms compiled step over in-memory, prefetched real images.
    Case("gan.py", ("--steps", "15"), ("--epochs", "100000"), 64,
         loop=r"for image_batch in train_dataset:", input_bound=False, optimize=True),
    # An eager Python loop counts a vocabulary for ~25 s (its long run) before fit: no
    # optimizer update for longer than discovery's 20-s wait for one.
    Case("long_preamble_fit.py", ("--vocab-passes", "1", "--epochs", "1"),
         ("--vocab-passes", "20", "--epochs", "100000"), 32,
         loop=r"model\.fit\(train_ds", optimize=True),
    # 19 steps of ~50-100 ms, then a ~1-s validation pass over 600 clips, every epoch.
    Case("fit_validation_epochs.py", ("--epochs", "1"), ("--epochs", "100000"), 32,
         loop=r"history = model\.fit\(", optimize=True),
    # A sequential py_function tokenizer, then shuffle(1500): each epoch opens with the fill.
    Case("shuffle_after_pyfunc.py", ("--epochs", "2"), ("--epochs", "100000"), 32,
         loop=r"for ids, y in train_ds:", input_bound=True),
    # `# @tf.function`: every step of a small CNN runs eagerly (~80 ms), in-memory data.
    Case("eager_tape_loop.py", ("--steps", "30"), ("--epochs", "100000"), 64,
         loop=r"for x_batch_train, y_batch_train in train_dataset:", input_bound=False),
    # MirroredStrategy over two logical CPUs, a distributed dataset, a test loop per epoch.
    Case("mirrored_custom_loop.py", ("--epochs", "1"), ("--epochs", "100000"), 64,
         loop=r"for x in train_dist_dataset:", optimize=True),
    # A PyDataset decoding JPEGs in __getitem__, fed to fit with one worker.
    Case("keras_sequence.py", ("--epochs", "2"), ("--epochs", "100000"), 16,
         loop=r"model\.fit\(train_gen", stall_cause=PYTHON_SOURCE),
    # A sequential map decodes, resizes and edge-filters 180 JPEGs again every short epoch.
    Case("decode_every_epoch.py", ("--epochs", "2"), ("--epochs", "100000"), 32,
         loop=r"history = model\.fit\(", input_bound=True),
    # list_files then flat_map(TFRecordDataset): 40 shards read one after the other.
    Case("sharded_records.py", ("--epochs", "2"), ("--epochs", "100000"), 64,
         loop=r"for x, y in train_ds:"),
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def tail(self, n: int = 3000) -> str:
        return f"--- stdout ---\n{self.stdout[-n:]}\n--- stderr ---\n{self.stderr[-n:]}"


@dataclass(frozen=True, slots=True)
class Summary:
    steps: int
    batch: int
    median_ms: float


def _procs_in(folder: Path) -> list[int]:
    """Processes (other than us) whose working directory is inside `folder`: what a
    command run there left behind. The scripts and tftune's children inherit that cwd."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == folder or folder in cwd.parents:
            found.append(int(entry.name))
    return found


def _stop(proc: subprocess.Popen[str], cwd: Path) -> None:
    """SIGTERM the command's process group (tftune then stops its trial's own group),
    SIGKILL it after a grace period, then anything still running in `cwd`."""
    for sig, wait_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # A trial runs in its own session; it kills itself within ~0.5 s of its parent's
    # death, but do not rely on it.
    deadline = time.monotonic() + 5.0
    while (left := _procs_in(cwd)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _run(argv: Sequence[str], cwd: Path, timeout: float) -> Ran:
    """Run a command in its own process group; on timeout stop the whole group and fail."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc, cwd)
        out, err = proc.communicate()
        ran = Ran(-1, out, err, time.monotonic() - start)
        pytest.fail(f"did not end within {timeout:.0f} s: {' '.join(argv)}\n{ran.tail()}")
    return Ran(proc.returncode, out, err, time.monotonic() - start)


def _tftune(*args: str, cwd: Path, timeout: float) -> Ran:
    return _run([sys.executable, "-m", "tftune", *args], cwd, timeout)


def _summary(ran: Ran) -> Summary:
    found = SUMMARY.findall(ran.stdout)
    assert found, f"no training summary line\n{ran.tail()}"
    steps, batch, ms = found[-1]
    return Summary(int(steps), int(batch), float(ms))


def _training_loop(case: Case, ran: Ran) -> None:
    """tftune names the loop that trains as the training stream: not a counting loop,
    a peek, `adapt`, validation or `predict`."""
    flat = " ".join(ran.stdout.split())
    said = TRAINING_LOOP.findall(flat)
    assert said, f"tftune does not say which loop it measured as training\n{ran.tail()}"
    expected = case.loop_lines()
    for where, line in said:
        assert Path(where).name == case.script and int(line) in expected, (
            f"training stream taken at {where}:{line}; the training loop is at "
            f"{case.script}:{sorted(expected)}\n{ran.tail()}"
        )


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripts' data sets, written once per session by makedata.py."""
    out = tmp_path_factory.mktemp("realdata")
    ran = _run([sys.executable, str(SCRIPTS / "makedata.py"), str(out)], out, 120)
    assert ran.returncode == 0, ran.tail()
    return out


@pytest.fixture(scope="session")
def plain_run(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Case], tuple[Ran, Summary]]:
    """`python script.py --data D SHORT`, once per script per session."""
    cache: dict[str, tuple[Ran, Summary]] = {}

    def get(case: Case) -> tuple[Ran, Summary]:
        if case.id not in cache:
            cache[case.id] = _plain(case, data_dir, tmp_path_factory.mktemp(f"plain-{case.id}"))
        return cache[case.id]

    return get


def _plain(case: Case, data_dir: Path, cwd: Path) -> tuple[Ran, Summary]:
    argv = [sys.executable, str(SCRIPTS / case.script), "--data", str(data_dir), *case.short]
    ran = _run(argv, cwd, PLAIN_TIMEOUT_S)
    assert ran.returncode == 0, f"the script fails on its own\n{ran.tail()}"
    return ran, _summary(ran)


def _script_args(case: Case, data_dir: Path, long: bool) -> list[str]:
    return ["--data", str(data_dir), *(case.long if long else case.short)]


def test_every_script_is_covered_and_documented() -> None:
    scripts = {p.name for p in SCRIPTS.glob("*.py")} - {"makedata.py"}
    assert scripts == {c.script for c in CASES}
    readme = (SCRIPTS / "README.md").read_text()
    for name in scripts | {"makedata.py"}:
        assert name in readme, name
    assert not (SCRIPTS / "__init__.py").exists()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hooks_never_break_the_script(
    case: Case, data_dir: Path, plain_run: Callable[[Case], tuple[Ran, Summary]], tmp_path: Path
) -> None:
    plain, summary = plain_run(case)
    assert summary.batch == case.batch
    # No config: only tftune's hooks differ from the plain run.
    under = _tftune(
        "run", str(SCRIPTS / case.script), "--",
        *_script_args(case, data_dir, long=False),
        cwd=tmp_path, timeout=PLAIN_TIMEOUT_S,
    )  # fmt: skip
    assert under.returncode == plain.returncode == 0, under.tail()
    # The same training happened: same number of steps and batch.
    hooked = _summary(under)
    assert (hooked.steps, hooked.batch) == (summary.steps, summary.batch), under.tail()
    assert not _procs_in(tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_profile_captures_training_steps(
    case: Case, data_dir: Path, plain_run: Callable[[Case], tuple[Ran, Summary]], tmp_path: Path
) -> None:
    _, summary = plain_run(case)
    logdir = tmp_path / "logdir"
    prof = _tftune(
        "profile", str(SCRIPTS / case.script), "--steps", f"{PROFILE_FROM}:{PROFILE_TO}",
        "--logdir", str(logdir), "--", *_script_args(case, data_dir, long=True),
        cwd=tmp_path, timeout=PROFILE_TIMEOUT_S,
    )  # fmt: skip
    assert prof.returncode == 0, prof.tail()
    assert not _procs_in(tmp_path), "the profiled script was left running"
    analysis_json = tmp_path / "analysis.json"
    analyzed = _tftune(
        "analyze", str(logdir), "--json", str(analysis_json), cwd=tmp_path, timeout=120
    )
    assert analyzed.returncode == 0, analyzed.tail()
    analysis = json.loads(analysis_json.read_text())
    steps = analysis["steps"]
    context = f"plain median {summary.median_ms:.2f} ms; analysis steps {steps}"

    assert analysis["step_detection"] == "markers", context
    assert steps["count"] == PROFILE_TO - PROFILE_FROM, context
    # Training iterations, not the sub-millisecond counting/adapt/peek/validation ones.
    assert steps["p50_ms"] >= MIN_STEP_SHARE * summary.median_ms, context
    assert steps["mean_ms"] >= MIN_STEP_SHARE * summary.median_ms, context
    if case.input_bound is not None:
        assert analysis["input_bound"] is case.input_bound, (
            f"input share {analysis['input_share']}, breakdown {analysis['breakdown']}"
        )
    if case.stall_cause is not None:
        stall = (analysis.get("training") or {}).get("stall") or {}
        assert stall.get("cause") == case.stall_cause, analysis.get("training")
    _training_loop(case, prof)


OPTIMIZED = [c for c in CASES if c.optimize]


@pytest.mark.parametrize("case", OPTIMIZED, ids=[c.id for c in OPTIMIZED])
def test_optimize_measures_the_training_loop(case: Case, data_dir: Path, tmp_path: Path) -> None:
    # The reference rate, measured just before, under the same load as the trial. The
    # window is 2 s: a 1-s one caught a moment when the other test worker starved the
    # script (gan: 116 ex/s against its own 1,739, then 23 s and a pass alone).
    _, summary = _plain(case, data_dir, tmp_path)
    tuning_json = tmp_path / "tuning.json"
    opt = _tftune(
        "optimize", str(SCRIPTS / case.script), "--trials", "1", "--window", "2",
        "--repeats", "1", "--no-bounds", "--no-guided", "--json", str(tuning_json),
        "-o", str(tmp_path / "tuning.html"), "--best", str(tmp_path / "best.json"),
        "--storage", str(tmp_path / "study.journal"),
        "--", *_script_args(case, data_dir, long=True),
        cwd=tmp_path, timeout=OPTIMIZE_TIMEOUT_S,
    )  # fmt: skip
    assert opt.returncode == 0, opt.tail()
    assert not _procs_in(tmp_path), "a trial was left running"
    tuning = json.loads(tuning_json.read_text())
    as_written = tuning["baselines"]["as_written"]
    assert as_written is not None and as_written["state"] == "complete", as_written
    rate = as_written["examples_per_s"]
    trial = next(t for t in tuning["trials_detail"] if t["number"] == as_written["trial"])
    low, high, context = _rate_band(summary, trial, rate)
    if not low <= rate <= high:
        # A load spike from the other test worker can starve one short reference run (a
        # 30-step median at 1,355 ex/s, 8.9 ms a step alone, beside a trial at 4,086):
        # the script's own clock again, after the trial, and the band over both.
        _, again = _plain(case, data_dir, tmp_path)
        low2, high2, context2 = _rate_band(again, trial, rate)
        low, high, context = min(low, low2), max(high, high2), f"{context}; again: {context2}"
    assert low <= rate <= high, context
    if as_written.get("steps_per_s"):  # examples per step, where the JSON gives steps
        per_step = rate / as_written["steps_per_s"]
        assert per_step == pytest.approx(case.batch, rel=0.02), context
    _training_loop(case, opt)


def _rate_band(summary: Summary, trial: dict[str, Any], rate: float) -> tuple[float, float, str]:
    """The band tftune's as-written figure must fall in, from the script's own clock.

    The median step sees no epoch-start stall; tftune's figure includes it, so it may sit
    below the median rate by the stall's share. Where the trial named one (a
    MirroredStrategy iterator rebuilt each epoch took 2-36 s under the suite's load), the
    lower reference is an epoch of median steps plus that stall. The stall is a mean over
    the epochs seen, which one slow epoch start can lift above what the windows held
    (fit_validation_epochs: 2.0 s over 19 steps, the windows at 313 ex/s), so the upper
    reference stays the median rate: a stall only ever lowers the training rate."""
    median_rate = summary.batch * 1000.0 / summary.median_ms
    stall_s = (trial.get("training") or {}).get("epoch_stall_s") or 0.0
    per_epoch = (trial.get("training") or {}).get("steps_per_epoch")
    stalled_rate = median_rate
    if stall_s and per_epoch:
        epoch_s = per_epoch * summary.median_ms / 1000.0 + stall_s
        stalled_rate = summary.batch * per_epoch / epoch_s
    context = (
        f"as written {rate} ex/s; the script's own training rate {median_rate:.1f} ex/s by "
        f"its median step, {stalled_rate:.1f} with the epoch-start stall ({stall_s} s over "
        f"{per_epoch} steps)"
    )
    return MIN_RATE_SHARE * stalled_rate, MAX_RATE_SHARE * median_rate, context
