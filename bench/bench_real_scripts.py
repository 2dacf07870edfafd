"""Benchmark: tftune's figures on the user-style scripts against each script's own counter.

    python bench/bench_real_scripts.py --quick --scripts long_preamble_fit,eager_tape_loop \
        --out results.json --keep runs/

Per script (`tests/realscripts/*.py`, with the data `makedata.py` writes, and
`examples/latency_bound.py`), in one run of this bench:

1. ``tftune optimize SCRIPT`` with its default options (``--json``, ``--best`` and a
   fresh journal in the script's folder), timed end to end; the training loop it names
   is read from its output ("training loop: the dataset ..., iterated at FILE:LINE");
2. the script run plainly and under ``tftune run --config BEST``, alternately: plain,
   tuned, plain, tuned, plain (``--quick``: plain, tuned, plain), each long enough for a
   steady figure. The plain runs are the script as written by its own counter: the
   ``training rate R ex/s over S steps`` and ``preamble X s`` lines the scripts print
   (`examples/latency_bound.py` prints only ``N examples/s`` over its whole loop, which
   is taken as its own rate, scaled by the config's batch size over its own 8, since it
   counts from ``--batch-size``; it has no preamble line). The tuned runs are skipped
   where tftune recommended no change.

It prints one row per script and writes ``--out``: the loop tftune measured (and its
line), the preamble by the script's own clock, the spread of the script as written
((max - min) / median) across tftune's runs of it (its as-written trial and its
final-round re-measure; the trial's windows where it ran once) and across the plain
runs, tftune's as-written figure against the script's own, and the tuned config against
the script as written by the script's own counter. Then the goals, each ok or MISSED:
as-written repeats within 10% of each other (tftune's and the plain runs'); tftune's
as-written figure within 15% of the script's own; tuned above as written by the
script's own counter where tftune recommended a change. Not a test: it measures and
prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REALSCRIPTS = ROOT / "tests" / "realscripts"
TFTUNE = [sys.executable, "-m", "tftune"]
# Wide consoles, so that rich does not wrap the lines this bench reads.
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", COLUMNS="400")
RUN_TIMEOUT_S = 900
OPTIMIZE_TIMEOUT_S = 3600

# The goals.
MAX_SPREAD = 0.10  # as-written repeats within 10% of each other
MAX_OFF = 0.15  # tftune's as-written figure within 15% of the script's own

OWN_RATE = re.compile(r"training rate ([\d.]+) ex/s over (\d+) steps")
PREAMBLE = re.compile(r"preamble ([\d.]+) s")
EXAMPLES_PER_S = re.compile(r"^([\d,.]+) examples/s$", re.MULTILINE)
LOOP = re.compile(
    r"(?<!not )\btraining(?: loop)?: the dataset (?:built at \S+|built in a library), "
    r"iterated at (\S+?):(\d+)"
)
BUSIEST = re.compile(
    r"measuring the dataset loop that delivers the most \(.*?iterated at (\S+?):(\d+)"
)


@dataclass(frozen=True, slots=True)
class Script:
    """A script of the bench: where it is, the arguments `tftune optimize` gets (it runs
    until tftune stops it), and those of a plain or tuned run (long enough for a steady
    figure; ``quick`` for ``--quick``)."""

    name: str
    path: Path
    optimize: tuple[str, ...]
    run: tuple[str, ...]
    quick: tuple[str, ...]
    needs_data: bool = True
    # A script that prints its rate from its own `--batch-size` (latency_bound: 8), not
    # from the batches: a config's batch size scales its figure.
    printed_batch: int | None = None


def _real(name: str, run: tuple[str, ...], quick: tuple[str, ...]) -> Script:
    return Script(name, REALSCRIPTS / f"{name}.py", ("--epochs", "100000"), run, quick)


SCRIPTS = {
    s.name: s
    for s in (
        _real("long_preamble_fit", ("--epochs", "4"), ("--epochs", "3")),
        _real("fit_validation_epochs", ("--epochs", "6"), ("--epochs", "4")),
        _real("shuffle_after_pyfunc", ("--epochs", "12"), ("--epochs", "8")),
        _real("eager_tape_loop", ("--epochs", "6"), ("--epochs", "4")),
        _real("mirrored_custom_loop", ("--epochs", "6"), ("--epochs", "4")),
        _real("keras_sequence", ("--epochs", "14"), ("--epochs", "10")),
        _real("validate_every_epoch", ("--epochs", "40"), ("--epochs", "25")),
        Script(
            "latency_bound",
            ROOT / "examples" / "latency_bound.py",
            ("--steps", "100000000"),
            ("--steps", "1000"),
            ("--steps", "500"),
            needs_data=False,
            printed_batch=8,
        ),
    )
}
DEFAULT = list(SCRIPTS)


# --- running things -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Own:
    """One run of the script by its own counter."""

    rate: float
    steps: int | None
    preamble_s: float | None
    wall_s: float


def _run(
    argv: list[str], cwd: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - t0


def _fail(what: str, done: subprocess.CompletedProcess[str]) -> SystemExit:
    return SystemExit(
        f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def own_figures(stdout: str, wall_s: float) -> Own:
    """The script's own rate: its `training rate` line, else (latency_bound) its
    `N examples/s` line."""
    found = OWN_RATE.findall(stdout)
    if found:
        rate, steps = found[-1]
        pre = PREAMBLE.findall(stdout)
        return Own(float(rate), int(steps), float(pre[-1]) if pre else None, wall_s)
    plain = EXAMPLES_PER_S.findall(stdout)
    if not plain:
        raise SystemExit(f"no training rate in the script's output:\n{stdout[-2000:]}")
    return Own(float(plain[-1].replace(",", "")), None, None, wall_s)


def script_args(script: Script, data: Path | None, length: tuple[str, ...]) -> list[str]:
    return [*(["--data", str(data)] if script.needs_data else []), *length]


def run_once(script: Script, args: list[str], cwd: Path, config: Path | None) -> Own:
    """One run, plain (``config`` None) or under ``tftune run --config``."""
    if config is None:
        argv = [sys.executable, str(script.path), *args]
    else:
        argv = [*TFTUNE, "run", "--config", str(config), str(script.path), "--", *args]
    done, wall = _run(argv, cwd, RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise _fail(" ".join(argv), done)
    own = own_figures(done.stdout, wall)
    factor = batch_factor(script, config)
    return own if factor == 1.0 else replace(own, rate=own.rate * factor)


def batch_factor(script: Script, config: Path | None) -> float:
    """How far a config's batch size is from the one a script prints its rate with
    (`Script.printed_batch`); 1.0 for the scripts that count their batches."""
    if script.printed_batch is None or config is None:
        return 1.0
    sites = json.loads(config.read_text()).get("sites") or {}
    batches = [knobs["batch_size"] for knobs in sites.values() if "batch_size" in knobs]
    return batches[0] / script.printed_batch if batches else 1.0


def optimize(script: Script, data: Path | None, cwd: Path) -> tuple[float, str, dict[str, Any]]:
    """A default `tftune optimize`: its wall time, its output and its tuning JSON."""
    argv = [
        *TFTUNE, "optimize", str(script.path), "--json", "tuning.json", "--best", "best.json",
        "--storage", "study.journal", "-o", "tuning.html",
        "--", *script_args(script, data, script.optimize),
    ]  # fmt: skip
    done, wall = _run(argv, cwd, OPTIMIZE_TIMEOUT_S)
    (cwd / "optimize.stdout.txt").write_text(done.stdout)
    (cwd / "optimize.stderr.txt").write_text(done.stderr)
    if done.returncode != 0:
        raise _fail(" ".join(argv), done)
    return wall, done.stdout, json.loads((cwd / "tuning.json").read_text())


# --- reading tftune's figures -------------------------------------------------------------


def measured_loop(script: Script, stdout: str) -> dict[str, Any]:
    """The loop tftune named as training (or, where it found no update, the busiest one),
    with the text of its line."""
    flat = " ".join(stdout.split())
    found, fallback = LOOP.findall(flat), False
    if not found:
        found, fallback = BUSIEST.findall(flat), True
    if not found:
        return {"where": None, "text": None, "busiest_fallback": False}
    where, line = found[0]
    text = None
    if Path(where).name == script.path.name:
        lines = script.path.read_text().splitlines()
        text = lines[int(line) - 1].strip() if int(line) <= len(lines) else None
    return {"where": f"{Path(where).name}:{line}", "text": text, "busiest_fallback": fallback}


def as_written_samples(tuning: dict[str, Any]) -> tuple[list[float], list[float]]:
    """tftune's runs of the script as written, and the as-written trial's windows.

    The runs: every complete trial with the as-written trial's params (the guided guess
    and AUTOTUNE everywhere are the same config where the script already is what they
    set), and each one's final-round re-measure; a twin (a config sampled again, whose
    measurement is reused: the same params and the very same figure) counts once."""
    base = tuning["baselines"].get("as_written") or {}
    trials = tuning.get("trials_detail") or []
    params = next((t["params"] for t in trials if t["number"] == base.get("trial")), None)
    confirmed = {
        b["trial"]: b["confirmed"]["examples_per_s"]
        for b in tuning["baselines"].values()
        if b and b.get("confirmed") and b["confirmed"].get("examples_per_s")
    }
    runs: list[float] = []
    seen: set[float] = set()
    for t in trials:
        rate = t.get("examples_per_s")
        if t["params"] != params or t["state"] != "complete" or not rate or rate in seen:
            continue
        seen.add(rate)
        runs.append(rate)
        if t["number"] in confirmed:
            runs.append(confirmed[t["number"]])
    return runs, [float(x) for x in base.get("repeats") or []]


def spread(xs: list[float]) -> float | None:
    """(max - min) / median; None with fewer than two samples."""
    if len(xs) < 2:
        return None
    return (max(xs) - min(xs)) / statistics.median(xs)


def changed(tuning: dict[str, Any]) -> bool:
    """Whether tftune recommended a change to the script as written."""
    return (tuning.get("best") or {}).get("role") not in (None, "as_written")


# --- one script ---------------------------------------------------------------------------


def bench_script(script: Script, data: Path | None, work: Path, quick: bool) -> dict[str, Any]:
    cwd = work / script.name
    cwd.mkdir(parents=True, exist_ok=True)
    print(f"[{script.name}] tftune optimize ...", flush=True)
    tuning_s, stdout, tuning = optimize(script, data, cwd)
    best = cwd / "best.json"
    tuned = changed(tuning) and best.exists()
    args = script_args(script, data, script.quick if quick else script.run)
    plain: list[Own] = []
    under: list[Own] = []
    for i in range(1 if quick else 2):
        plain.append(run_once(script, args, cwd, None))
        print(f"[{script.name}] plain {i + 1}: {plain[-1].rate:,.1f} ex/s", flush=True)
        if tuned:
            under.append(run_once(script, args, cwd, best))
            print(f"[{script.name}] tuned {i + 1}: {under[-1].rate:,.1f} ex/s", flush=True)
    plain.append(run_once(script, args, cwd, None))
    print(f"[{script.name}] plain {len(plain)}: {plain[-1].rate:,.1f} ex/s", flush=True)
    return summarize(script, stdout, tuning, tuning_s, plain, under)


def summarize(
    script: Script,
    stdout: str,
    tuning: dict[str, Any],
    tuning_s: float,
    plain: list[Own],
    under: list[Own],
) -> dict[str, Any]:
    """The row of one script, every ratio from figures measured in this run."""
    runs, windows = as_written_samples(tuning)
    own = statistics.median(o.rate for o in plain)
    theirs = statistics.median(runs) if runs else None
    preambles = [o.preamble_s for o in plain if o.preamble_s is not None]
    tuned = statistics.median(o.rate for o in under) if under else None
    aw_trial = next(
        (t for t in tuning.get("trials_detail") or [] if t["role"] == "as_written"), None
    )
    return {
        "script": script.name,
        "loop": measured_loop(script, stdout),
        "preamble_s": statistics.median(preambles) if preambles else None,
        "tftune_as_written_runs": runs,
        "tftune_as_written_windows": windows,
        "tftune_spread_runs": spread(runs),
        "tftune_spread_windows": spread(windows),
        "own_as_written": [o.rate for o in plain],
        "own_spread": spread([o.rate for o in plain]),
        "own_steps": [o.steps for o in plain],
        "tftune_as_written": theirs,
        "own_as_written_median": own,
        "tftune_vs_own": theirs / own if theirs and own else None,
        "changed": bool(under),
        "best": (tuning.get("best") or {}).get("description"),
        "tftune_speedup": (tuning.get("best") or {}).get("speedup_vs_as_written"),
        "own_tuned": [o.rate for o in under],
        "own_tuned_vs_as_written": tuned / own if tuned and own else None,
        "tuning_s": tuning_s,
        "trials": tuning.get("trials"),
        "tftune_training": (aw_trial or {}).get("training"),
        "notes": tuning.get("notes") or [],
    }


# --- the table and the goals --------------------------------------------------------------


def goals(row: dict[str, Any]) -> dict[str, str]:
    """Each goal ok or MISSED (n/a where it does not apply or was not measured)."""

    def within(x: float | None, limit: float) -> str:
        return "n/a" if x is None else ("ok" if x <= limit else "MISSED")

    t_spread = row["tftune_spread_runs"]
    if t_spread is None:
        t_spread = row["tftune_spread_windows"]
    ratio = row["tftune_vs_own"]
    gain = row["own_tuned_vs_as_written"]
    return {
        "tftune repeats within 10%": within(t_spread, MAX_SPREAD),
        "own repeats within 10%": within(row["own_spread"], MAX_SPREAD),
        "tftune within 15% of own": within(None if ratio is None else abs(ratio - 1), MAX_OFF),
        "tuned > as written (own)": (
            "n/a (no change)" if not row["changed"] else ("ok" if (gain or 0) > 1 else "MISSED")
        ),
    }


def _f(x: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


COLUMNS = (
    ("script", 22), ("loop measured", 28), ("preamble", 9), ("spread tftune", 14),
    ("spread own", 11), ("tftune ex/s", 12), ("own ex/s", 10), ("tftune/own", 11),
    ("tuned/aw own", 13), ("tftune says", 12), ("tuning s", 9),
)  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    head = " ".join(name.ljust(w) for name, w in COLUMNS)
    lines = [head, "-" * len(head)]
    failed = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    for r in rows:
        loop = r["loop"]["where"] or "(none named)"
        if r["loop"]["busiest_fallback"]:
            loop += " (busiest)"
        t_spread = (
            _pct(r["tftune_spread_runs"])
            if r["tftune_spread_runs"] is not None
            else f"{_pct(r['tftune_spread_windows'])} (win)"
        )
        cells = (
            r["script"], loop, _f(r["preamble_s"], "{:.1f} s"), t_spread, _pct(r["own_spread"]),
            _f(r["tftune_as_written"]), _f(r["own_as_written_median"]),
            _f(r["tftune_vs_own"], "{:.2f}x"), _f(r["own_tuned_vs_as_written"], "{:.2f}x"),
            _f(r["tftune_speedup"], "{:.2f}x"), _f(r["tuning_s"], "{:.0f}"),
        )  # fmt: skip
        lines.append(" ".join(str(c).ljust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True)))
    lines.append("")
    for r in rows:
        lines.append(f"{r['script']}: loop line: {r['loop']['text'] or '-'}; best: {r['best']}")
        lines.append("  " + "; ".join(f"{name}: {verdict}" for name, verdict in r["goals"].items()))
    for r in failed:
        lines.append(f"{r['script']}: FAILED, every goal MISSED: {r['error'].splitlines()[0]}")
    return "\n".join(lines)


def make_data(work: Path) -> Path:
    data = work / "data"
    if not (data / "speech").is_dir():
        done, _ = _run([sys.executable, str(REALSCRIPTS / "makedata.py"), str(data)], work, 300)
        if done.returncode != 0:
            raise _fail("makedata.py", done)
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", default=",".join(DEFAULT), help="comma-separated names")
    parser.add_argument("--out", type=Path, help="write the results JSON here")
    parser.add_argument("--keep", type=Path, help="keep the runs' folders here")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter runs")
    opts = parser.parse_args()
    names = [n.strip() for n in opts.scripts.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCRIPTS]
    if unknown:
        parser.error(f"unknown scripts {unknown}; known: {', '.join(SCRIPTS)}")
    work = opts.keep or Path(tempfile.mkdtemp(prefix="bench-real-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        data = make_data(work) if any(SCRIPTS[n].needs_data for n in names) else None
        rows = []
        for name in names:
            try:
                row = bench_script(SCRIPTS[name], data, work, opts.quick)
            except (SystemExit, subprocess.TimeoutExpired) as exc:
                # A script or tftune that fails is a result: the other scripts still run.
                print(f"[{name}] FAILED: {exc}", flush=True)
                rows.append({"script": name, "error": str(exc)[-4000:]})
                continue
            row["goals"] = goals(row)
            rows.append(row)
    finally:
        if opts.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    if opts.out:
        result = {
            "bench": "bench_real_scripts",
            "quick": opts.quick,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "commit": _git("rev-parse", "HEAD").strip() or None,
            # Files other sessions had changed and not committed while this ran.
            "uncommitted": _git("diff", "--name-only", "HEAD").split(),
            "cores": os.cpu_count(),
            "wall_s": round(time.monotonic() - started, 1),
            "rows": rows,
        }
        opts.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {opts.out}")
    return 0


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())
