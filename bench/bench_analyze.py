"""Benchmark: tftune's trace analysis against XProf's input_pipeline_analyzer.

    python bench/bench_analyze.py [--trace FILE | --out DIR] [--repeats 3]

Without `--trace`, it first records an input-bound CPU trace of at least 40 MB: a
long profile of a `py_function` pipeline (many small elements, so many events) that a
trivial consumer waits on. Then, for each repeat, it runs both analyses of the same file
as fresh subprocesses, back to back (paired), and reports wall time and peak resident
memory (ru_maxrss of each child):

* tftune: the whole `tftune analyze FILE --json ... -o ...` process, the HTML report
  included (when that command exists, else load + steps + breakdown + timeline through
  `python -c`);
* XProf: `xspace_to_tool_data([file], "input_pipeline_analyzer", {})`.

The time ratio is the median of the paired runs' ratios (tftune / XProf of the same
pair), so that a load spike hits both sides of a pair; the peak is the largest of
tftune's runs, over the trace's size.

Both run with their modules' bytecode cached, as installed packages do: the children
write it under `--out` (PYTHONPYCACHEPREFIX), and one untimed run of each warms it. An
editable checkout run with PYTHONDONTWRITEBYTECODE=1 recompiles tftune's modules at
every start (0.3-0.6 s here); `--cold` measures that way, with the environment as is.

Targets (bench/README.md, issue 39): tftune time <= 0.25 x XProf's, peak memory <= 3 x
file size. This is a benchmark to run by hand, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

MIN_TRACE_BYTES = 40 * 1024 * 1024
TIME_TARGET = 0.25
MEMORY_TARGET = 3.0

RECORD = textwrap.dedent(
    """
    import os, sys, time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    def _work(x):
        return x + 1

    ds = tf.data.Dataset.range(10**9)
    ds = ds.map(lambda x: tf.py_function(_work, [x], tf.int64), num_parallel_calls=2)
    ds = ds.batch(4).prefetch(1)
    it = iter(ds)
    for _ in range(20):
        next(it)
    tf.profiler.experimental.start(sys.argv[1])
    end = time.monotonic() + float(sys.argv[2])
    step = 0
    while time.monotonic() < end:
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            next(it)
        step += 1
    tf.profiler.experimental.stop()
    print(step)
    """
)

OURS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from tftune.probes.traces import breakdown, steps, trace_file
    host = trace_file.load_host(Path(sys.argv[1]))
    st = steps.detect_steps(host)
    bd = breakdown.compute_breakdown(host, st)
    tl = breakdown.extract_timeline(host, st)
    out = {"steps": st.summary(), "detection": st.detection, "breakdown": bd.fractions(),
           "input_share": bd.input_share, "per_step": bd.per_step(),
           "timeline": tl.to_json() if tl else None}
    json.dump(out, open(sys.argv[2], "w"))
    """
)

XPROF = textwrap.dedent(
    """
    import sys
    from xprof.convert import raw_to_tool_data as r
    data, _ = r.xspace_to_tool_data([sys.argv[1]], "input_pipeline_analyzer", {})
    open(sys.argv[2], "wb").write(data if isinstance(data, bytes) else data.encode())
    """
)


def record_trace(out: Path, seconds: float) -> Path:
    """Record the benchmark trace; lengthen the profile until it reaches 40 MB."""
    while True:
        logdir = out / f"logdir_{int(seconds)}s"
        files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
        if not files:
            script = out / "record_bench.py"
            script.write_text(RECORD)
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
            print(f"recording a {seconds:.0f} s profile into {logdir} ...", flush=True)
            subprocess.run(
                [sys.executable, str(script), str(logdir), str(seconds)],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
            )
            files = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
        size = files[-1].stat().st_size
        if size >= MIN_TRACE_BYTES:
            return files[-1]
        seconds *= 1.3 * MIN_TRACE_BYTES / max(size, 1)
        print(f"trace is {size / 2**20:.1f} MB, under 40 MB: recording {seconds:.0f} s")


def fresh_copy(path: Path, work: Path, i: int) -> Path:
    """The trace alone in a new run folder: XProf saves its converted op stats next to
    the trace (`ALL_HOSTS.op_stats_v2.pb`) and reuses them, which would time a cache."""
    run = work / f"run_{i}" / "plugins" / "profile" / "bench"
    shutil.rmtree(run.parent.parent.parent, ignore_errors=True)
    run.mkdir(parents=True)
    target = run / path.name
    shutil.copyfile(path, target)
    return target


def run_child(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS bytes and CPU seconds (user + system) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{err[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, int(usage.ru_maxrss) * 1024, cpu  # Linux reports kilobytes


def has_analyze_cli() -> bool:
    proc = subprocess.run(
        [sys.executable, "-m", "tftune", "analyze", "--help"], capture_output=True, text=True
    )
    return proc.returncode == 0 and "--json" in proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help="an existing .xplane.pb to analyse")
    ap.add_argument("--out", type=Path, default=Path("/tmp/tftune-bench"))
    ap.add_argument("--seconds", type=float, default=25.0, help="profile length to record")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--cold", action="store_true", help="no bytecode cache, no warm-up (see the docstring)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.trace or record_trace(args.out, args.seconds)
    size = path.stat().st_size
    cli = has_analyze_cli()

    def ours_argv(f: Path) -> list[str]:
        if cli:
            return [
                *(sys.executable, "-m", "tftune", "analyze", str(f)),
                *("--json", str(f) + ".json", "-o", str(f) + ".html"),
            ]
        return [sys.executable, "-c", OURS, str(f), str(f) + ".ours.json"]

    def xprof_argv(f: Path) -> list[str]:
        return [sys.executable, "-c", XPROF, str(f), str(f) + ".xprof.json"]

    ours, theirs = [], []
    work = args.out / "runs"
    env = None
    if not args.cold:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(args.out / "pycache")
        for make in (ours_argv, xprof_argv):
            run_child(make(fresh_copy(path, work, 0)), env)
    for i in range(args.repeats):
        # Alternate which goes first, so cache warmth and machine load even out.
        pair = [("ours", ours_argv), ("xprof", xprof_argv)]
        for name, make in pair if i % 2 == 0 else pair[::-1]:
            f = fresh_copy(path, work, 0)
            (ours if name == "ours" else theirs).append(run_child(make(f), env))
    shutil.rmtree(work, ignore_errors=True)
    ratios = [o[0] / x[0] for o, x in zip(ours, theirs, strict=True)]
    ratio = statistics.median(ratios)
    cpu_ratios = [o[2] / x[2] for o, x in zip(ours, theirs, strict=True)]
    o_m = max(m for _, m, _ in ours)
    x_m = max(m for _, m, _ in theirs)
    result = {
        "trace": str(path),
        "trace_mb": round(size / 2**20, 1),
        "ours": "tftune analyze --json -o (HTML)" if cli else "python -c (load+steps+breakdown)",
        "repeats": args.repeats,
        "bytecode": "cold (environment as is)" if args.cold else "cached, warmed",
        "ours_s": [round(t, 3) for t, _, _ in ours],
        "xprof_s": [round(t, 3) for t, _, _ in theirs],
        "pair_ratios": [round(r, 3) for r in ratios],
        "time_ratio": round(ratio, 3),
        # CPU seconds move less than wall time with other tenants' load (not the target).
        "ours_cpu_s": [round(c, 3) for _, _, c in ours],
        "xprof_cpu_s": [round(c, 3) for _, _, c in theirs],
        "cpu_ratio": round(statistics.median(cpu_ratios), 3),
        "ours_peak_mb": round(o_m / 2**20, 1),
        "xprof_peak_mb": round(x_m / 2**20, 1),
        "ours_peak_over_file": round(o_m / size, 2),
        "time_target_met": ratio <= TIME_TARGET,
        "memory_target_met": o_m / size <= MEMORY_TARGET,
    }
    print(json.dumps(result, indent=2))
    print(
        f"tftune / XProf: {ratio:.2f}x (median of {len(ratios)} paired runs; target "
        f"<= {TIME_TARGET}x); tftune peak {o_m / 2**20:.0f} MiB = {o_m / size:.2f} x the "
        f"{size / 2**20:.1f} MiB trace (target <= {MEMORY_TARGET} x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
