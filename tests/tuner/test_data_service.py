"""The tf.data service: `tftune data-service` (a dispatcher and two worker processes on
localhost), distribute() at the searched cut point (tuner/child/service_read.py), the config
and the emitted diff (tuner/searchspace/service.py, tuner/output/emit.py), a killed worker during a
measured trial, and the sizing arithmetic against measured per-core rates
(probes/advice/service_sizing.py).

On two cores, remote workers add no CPU: these tests assert behaviour (where the cut
is, each example once, the element count per epoch), never a speed-up. Every server
process is started here in its own session and killed in the fixture's finalizer.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES, ROOT

from tftune._data_service_cli import READY
from tftune.probes.advice.service_sizing import (
    CpuMeter,
    CpuUsage,
    size_service,
    sizing_from_trace,
)
from tftune.tuner.searchspace.config import Config, config_from_json, load_config, save_config
from tftune.tuner.searchspace.service import (
    DISTRIBUTED_EPOCH,
    PARALLEL_EPOCHS,
    ServiceConfig,
    check_address,
)

pytest.importorskip("tensorflow")

START_TIMEOUT_S = 90.0
N = 48  # examples per epoch of the test pipeline

# A CPU-heavy map (a matrix product per example) whose value is the example's index,
# so the sum over an epoch says whether each example arrived once.
SCRIPT = textwrap.dedent(
    f"""\
    import tensorflow as tf

    def heavy(i):
        x = tf.random.stateless_normal([64, 64], seed=tf.stack([i, i]))
        return tf.reduce_sum(tf.matmul(x, x)) * 0.0 + tf.cast(i, tf.float32)

    ds = tf.data.Dataset.range({N})
    ds = ds.map(heavy, num_parallel_calls=2)
    ds = ds.batch(8)
    ds = ds.prefetch(2)
    for epoch in range(2):
        count, total = 0, 0.0
        for batch in ds:
            count += int(batch.shape[0])
            total += float(tf.reduce_sum(batch))
        print("EPOCH", epoch, count, total, flush=True)
    """
)
CUT_LINE = 8  # ds = ds.map(heavy, ...)


def _start(args: list[str]) -> tuple[subprocess.Popen[bytes], list[str]]:
    """`tftune data-service ARGS` in its own session; its lines up to READY."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tftune", "data-service", "--host", "localhost", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    assert proc.stdout is not None
    fd = proc.stdout.fileno()  # raw reads: a buffered reader hides lines from select
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        *done, buf = buf.split(b"\n")
        lines += [ln.decode().strip() for ln in done]
        if any("ready" in ln for ln in lines):
            return proc, lines
    _kill(proc)
    raise AssertionError(f"tftune data-service did not start: {lines}")


def _kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop the server's whole session; SIGKILL after a grace period."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """A dispatcher and two worker processes on localhost (free ports); the address."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        disp, lines = _start(["--dispatcher", "--port", "0", "--worker-timeout", "2"])
        procs.append(disp)
        address = next(ln.split()[-1] for ln in lines if "dispatcher grpc://" in ln)
        address = check_address(address.replace("grpc://localhost", "grpc://127.0.0.1"))
        procs.append(_start(["--dispatcher-address", address])[0])
        quiet, said = _start(["--dispatcher-address", address, "-q"])
        procs.append(quiet)
        assert said == [READY], said  # --quiet: only the line scripts wait for
        yield address
    finally:
        for p in procs:  # all at once: each takes a moment to stop its servers
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            _kill(p)
        assert all(p.poll() is not None for p in procs)


def _tag(ds: Any, site: str) -> Any:
    ds._tftune_site = site
    return ds


def _pipeline() -> Any:
    import tensorflow as tf

    def heavy(i: Any) -> Any:
        x = tf.random.stateless_normal([64, 64], seed=tf.stack([i, i]))
        return tf.reduce_sum(tf.matmul(x, x)) * 0.0 + tf.cast(i, tf.float32)

    ds = _tag(tf.data.Dataset.range(N).map(heavy), "t.py:1")
    ds = _tag(ds.batch(8), "t.py:2")
    return _tag(ds.prefetch(2), "t.py:3")


def _values(ds: Any) -> list[float]:
    return sorted(float(v) for b in ds for v in b.numpy().ravel())


@pytest.mark.slow
def test_distribute_at_the_cut_counts_each_example_once(service: str) -> None:
    from tftune.tuner.child.service_read import CUT_ATTR, distribute_at_cut

    local = _values(_pipeline())
    cfg = ServiceConfig(service, "t.py:1", DISTRIBUTED_EPOCH, job_name="tftune-test")
    ds = distribute_at_cut(_pipeline(), cfg, trial=True)
    # The tail after the cut is rebuilt on the trainer: prefetch ← batch ← distribute().
    names = []
    node = ds
    while getattr(node, CUT_ATTR, None) is None:
        names.append(type(node).__name__)
        node = node._inputs()[0]
    assert names == ["_PrefetchDataset", "_BatchDataset"]
    assert getattr(node, CUT_ATTR) == "t.py:1"
    # distributed_epoch: one epoch split among the workers, each example once.
    assert _values(ds) == local == [float(i) for i in range(N)]
    # parallel_epochs: each of the two workers produces a whole epoch.
    cfg2 = ServiceConfig(service, "t.py:2", PARALLEL_EPOCHS)
    both = _values(distribute_at_cut(_pipeline(), cfg2, trial=True))
    assert both == sorted(local * 2)


def test_a_cut_that_cannot_be_applied() -> None:
    import tensorflow as tf

    from tftune.tuner.child.service_read import ServiceCutError, distribute_at_cut

    ds = _tag(tf.data.Dataset.range(4).map(lambda x: x), "t.py:1")
    ds = ds.map(lambda x: x + 1)  # a stage after the cut that is not rebuilt
    cfg = ServiceConfig("grpc://127.0.0.1:1", "t.py:1")
    with pytest.raises(ServiceCutError, match="Map"):
        distribute_at_cut(ds, cfg, trial=True)
    other = tf.data.Dataset.range(3).batch(2)  # no stage built at the cut
    assert distribute_at_cut(other, cfg, trial=False) is other
    with pytest.raises(ServiceCutError, match="no stage built there"):
        distribute_at_cut(other, cfg, trial=True)


def test_space_config_file_and_diff(tmp_path: Path) -> None:
    from tftune.tuner.output.emit import source_diff
    from tftune.tuner.searchspace import service as svc
    from tftune.tuner.searchspace.space_build import build_space

    class Site:
        def __init__(self, site: str, op: str) -> None:
            from tftune.tuner.searchspace.config import SiteConfig

            self.site, self.op, self.as_written = site, op, SiteConfig(num_parallel_calls=2)

    sites = [
        Site("train.py:8", "map"),
        Site("train.py:9", "batch"),
        Site("train.py:10", "prefetch"),
    ]
    space = build_space(sites, cores=2, data_service="grpc://h:5050", job_name="tftune-train")
    assert space.knob(svc.CUT).choices == (None, "train.py:8", "train.py:9")
    assert space.config(space.as_written_params()) == Config()  # as written: local
    params = {**space.as_written_params(), svc.CUT: "train.py:8", svc.MODE: DISTRIBUTED_EPOCH}
    cfg = space.config(params)
    assert cfg.data_service == ServiceConfig(
        "grpc://h:5050", "train.py:8", DISTRIBUTED_EPOCH, job_name="tftune-train"
    )
    path = save_config(cfg, tmp_path / "best.json")
    assert load_config(path) == cfg
    with pytest.raises(Exception, match="processing_mode"):
        config_from_json(
            {"data_service": {"address": "h:1", "cut": "a.py:1", "processing_mode": "x"}}
        )
    (tmp_path / "train.py").write_text(SCRIPT)
    diff = source_diff(tmp_path / "train.py", cfg)
    added = [ln for ln in diff.splitlines() if ln.startswith("+ds")]
    assert added == [
        "+ds = ds.map(heavy, num_parallel_calls=2)"
        ".apply(tf.data.experimental.service.distribute("
        "processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC, "
        "service='grpc://h:5050', job_name='tftune-train'))"
    ]


@pytest.mark.slow
def test_tftune_run_applies_the_config_and_trainers_share_one_job(
    service: str, tmp_path: Path
) -> None:
    """Two trainers of one run (one job name): each epoch split between them, each
    example once, every epoch (a job's repetitions), as the local pipeline's epoch."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    svc = ServiceConfig(service, f"train.py:{CUT_LINE}", DISTRIBUTED_EPOCH, job_name="tftune-run")
    cfg = save_config(Config(data_service=svc), tmp_path / "best.json")
    env = dict(os.environ, TFTUNE_SERVICE_JOB=f"test-{os.getpid()}-{time.time_ns()}")
    trainers = [
        subprocess.Popen(
            [sys.executable, "-m", "tftune", "run", "--config", str(cfg), str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [t.communicate(timeout=180) for t in trainers]
    assert [t.returncode for t in trainers] == [0, 0], [e[-2000:] for _, e in outs]
    rows = [ln.split() for out, _ in outs for ln in out.splitlines() if ln.startswith("EPOCH")]
    for epoch in ("0", "1"):
        mine = [r for r in rows if r[1] == epoch]
        assert len(mine) == 2
        assert sum(int(r[2]) for r in mine) == N  # the local pipeline's elements per epoch
        assert sum(float(r[3]) for r in mine) == N * (N - 1) / 2  # each example once


@pytest.mark.slow
def test_a_killed_worker_ends_the_trial_cleanly(service: str, tmp_path: Path) -> None:
    from tftune.core.vocabulary import TrialState
    from tftune.tuner.trial import MeasureSpec, run_trial

    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace(f"range({N})", "range(10**9)"))
    extra, _ = _start(["--dispatcher-address", service])  # the worker to kill
    killed: list[float] = []

    def kill_once(_repeat: int, _rate: float) -> bool:
        if not killed:
            os.killpg(extra.pid, signal.SIGKILL)
            killed.append(time.monotonic())
        return False

    svc = ServiceConfig(service, f"train.py:{CUT_LINE}", PARALLEL_EPOCHS)
    spec = MeasureSpec(
        warmup_steps=2, warmup_s=0.5, window_s=1.0, window_steps=2, repeats=3,
        busiest_loop=True, step_timeout_s=30.0, max_wall_s=150.0,
    )  # fmt: skip
    try:
        m = run_trial(script, config=Config(data_service=svc), spec=spec, on_report=kill_once)
    finally:
        _kill(extra)
    assert killed, m.reason  # the worker died mid-trial
    print("after the kill:", m.state.value, m.reason, m.examples_per_s)
    assert m.state in (TrialState.COMPLETE, TrialState.FAILED)
    if m.state is TrialState.FAILED:
        assert m.reason  # it ends with its reason
    else:
        assert m.examples_per_s and m.examples_per_s > 0  # it went on without the worker


# --- the sizing arithmetic ------------------------------------------------------------


def test_sizing_arithmetic() -> None:
    # 2 busy cores deliver 300 ex/s: 150 per core; the model takes 1,000 ex/s.
    s = size_service(pipeline_rate=300, busy_cores=2, model_rate=1000, host_cores=2, unit="ex")
    assert s is not None and s.saturated
    assert s.per_core_rate == 150 and s.cores_needed == round(1000 / 150, 3)  # as the JSON
    assert s.more_workers == 3  # 4 hosts of 2 cores: 8 >= 6.7 cores
    assert "about 3 more workers like this host (2 cores each)" in s.sentence
    # One busy core of four: the host's other cores reach the model's rate.
    one = size_service(pipeline_rate=300, busy_cores=1, model_rate=1000, host_cores=4, unit="ex")
    assert one is not None and one.enough and not one.saturated
    assert (
        size_service(pipeline_rate=0, busy_cores=1, model_rate=1, host_cores=1, unit="ex") is None
    )


def test_sizing_from_a_measured_per_core_rate() -> None:
    """The child's meter on a real CPU-heavy pipeline: its per-core rate, scaled."""
    reports: list[CpuUsage] = []
    ds = _pipeline().unbatch().repeat()
    meter = CpuMeter(reports.append)
    for _ in ds:
        meter.tick()
        if meter.reports >= 2:
            break
    assert len(reports) == 2
    busy, rate = reports[-1].busy_cores, reports[-1].elements_per_s
    assert 0 < busy <= (os.cpu_count() or 1) + 0.5 and rate > 0
    s = size_service(
        pipeline_rate=rate, busy_cores=busy, model_rate=10 * rate, host_cores=2, unit="ex"
    )
    assert s is not None  # its figures rounded as the JSON writes them (3 decimals)
    assert s.per_core_rate * busy == pytest.approx(rate, rel=1e-3)
    assert s.cores_needed == pytest.approx(10 * busy, abs=5e-4)
    hosts = 1 if s.host_best_rate >= 0.95 * s.model_rate else math.ceil(10 * busy / 2)
    assert s.more_workers == hosts - 1


def test_sizing_from_a_trace(trace_case: Any) -> None:
    from tftune.probes.advice.analysis import analyze

    a = analyze(trace_case("latency_py"))
    plane = a.host.host_plane
    assert plane is not None
    s = sizing_from_trace(
        lines=plane.lines,
        step_start_ps=a.steps.start_ps,
        step_end_ps=a.steps.end_ps,
        input_wait_share=a.breakdown.fractions().get("input_wait"),
        host_cores=2,
    )
    assert s is not None and s.unit == "steps" and s.busy_cores > 0
    span_s = (int(a.steps.end_ps.max()) - int(a.steps.start_ps.min())) / 1e12
    assert s.pipeline_rate == pytest.approx(len(a.steps) / span_s, abs=5e-4)
    assert s.per_core_rate * s.busy_cores == pytest.approx(s.pipeline_rate, rel=1e-3)
    assert s.model_rate >= s.pipeline_rate * 0.99  # the model waits for input here


# --- the reports and the command line --------------------------------------------------


def _with_sizing(name: str, where: str | None) -> tuple[dict[str, Any], str]:
    import json

    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    s = size_service(pipeline_rate=300, busy_cores=2, model_rate=1000, host_cores=2, unit="ex")
    assert s is not None
    target = data if where is None else data.setdefault(where, {})
    target["service_sizing"] = s.to_json()
    return data, s.sentence


def test_the_reports_say_when_one_host_is_not_enough() -> None:
    from tftune.core.analysis_document import AnalysisDocument
    from tftune.core.tuning_document import TuningDocument
    from tftune.reports import render_report_json
    from tftune.reports.analysis_terminal import render
    from tftune.reports.tuning_terminal import render_table

    data, sentence = _with_sizing("analysis_cpu_pyfunc.json", None)
    text = render(AnalysisDocument.from_json(data), width=400)
    assert "about 3 more workers" in " ".join(text.split())
    page = render_report_json(data, generated_at="x", source="a.json")
    assert "about 3 more workers like this host" in page
    tuning, _ = _with_sizing("tuning_latency.json", "ceiling")
    assert "about 3 more workers" in str(render_table(TuningDocument.from_json(tuning)).caption)
    assert 'id="service-sizing"' in render_report_json(tuning, generated_at="x", source="t")
    assert sentence.startswith("one host is not enough")


def test_bad_service_input_is_one_line() -> None:
    from click.testing import CliRunner

    from tftune.cli import main

    with pytest.raises(Exception, match=r"--data-service 'nohost': expected grpc://HOST:PORT"):
        check_address("nohost")
    out = CliRunner().invoke(main, ["data-service"])
    assert out.exit_code == 1
    assert "give --dispatcher, --dispatcher-address, or both" in out.output
    assert "Traceback" not in out.output


def test_the_slurm_example_uses_real_options() -> None:
    """examples/slurm/data-service.sbatch: every tftune option it passes exists, and its
    components are separated as sbatch expects (``#SBATCH hetjob``)."""
    from click.testing import CliRunner

    from tftune.cli import main

    text = (ROOT / "examples/slurm/data-service.sbatch").read_text()
    assert "#SBATCH hetjob" in text and "--het-group=1" in text
    for command in ("data-service", "optimize", "run"):
        help_text = CliRunner().invoke(main, [command, "--help"]).output
        known = {w.rstrip(",") for w in help_text.split() if w.startswith("-")}
        used = {
            w
            for part in text.split(f"tftune {command} ")[1:]
            for w in part.split('-- "$@"')[0].split("\n\n")[0].split()
            if w.startswith("--") and w != "--"
        }
        assert used and used <= known, (command, used - known)


PIPELINE_SCRIPT = """\
import tensorflow as tf

def heavy(i):
    x = tf.random.stateless_normal([96, 96], seed=tf.stack([i, i]))
    return tf.reduce_sum(tf.matmul(x, x)) * 0.0 + tf.cast(i, tf.float32)

ds = tf.data.Dataset.range(10**9).map(heavy).batch(8)
total = 0.0
for x in ds:
    total += float(tf.reduce_sum(x))
"""


@pytest.mark.slow
def test_a_pipeline_drained_alone_reports_its_cpu_as_a_typed_event(tmp_path: Path) -> None:
    """The bound analysis' pipeline-alone run: the child's meter reaches the parent as a
    `CpuUsage` (an event, not text to parse), and sizes the service against a model
    rate ten times the pipeline's."""
    from tftune.tuner.searchspace import bounds
    from tftune.tuner.trial import MeasureSpec, run_trial

    script = tmp_path / "t.py"
    script.write_text(PIPELINE_SCRIPT)
    spec = MeasureSpec(window_s=1.5, repeats=2, busiest_loop=True)
    config = bounds.with_bound_mode(Config(), bounds.PIPELINE_ONLY)
    pipe = run_trial(script, [], config, spec)
    assert pipe.examples_per_s, (pipe.reason, pipe.stderr_tail)
    assert isinstance(pipe.cpu, CpuUsage), pipe
    assert 0 < pipe.cpu.busy_cores <= (os.cpu_count() or 1) + 0.5
    assert pipe.cpu.elements_per_s > 0
    assert not any("cores busy" in n for n in pipe.notes)
    sizing = bounds.pipeline_sizing(pipe.cpu, pipe.examples, pipe.steps, 10 * pipe.examples_per_s)
    assert sizing is not None and sizing.model_rate == pytest.approx(10 * pipe.examples_per_s)
