"""Benchmark: how long `tftune optimize` takes with its default options, before and after
a change, and what its winner is worth, measured side by side in one run.

    python bench/bench_tuning_time.py --before /tmp/venv_before/bin/tftune \
        --cases latency_io,cpu_heavy_map,compute_bound --out results.json

Per case (`bench/cases/*.py`, run unmodified with ``--steps 100000000``):

1. ``tftune optimize CASE`` with the default options, once with the `--before` install
   (say, a venv of today's main) and once with this checkout's, alternating which goes
   first from case to case; each is timed end to end (discovery, bounds, profile,
   study, final round: what the user waits for);
2. a final round with this checkout's trial runner: the script as written, AUTOTUNE
   everywhere, the before winner, the after winner and the after run's guided guess,
   re-measured ``--final-repeats`` times, interleaved, so that load on a shared machine
   hits all alike. The ratios are the medians of that round.

It prints the tuning wall times and their ratio (after / before), the winners against
each other and against AUTOTUNE and as written, and the guided trial's share of the
after winner. Not a test: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = Path(__file__).resolve().parent / "cases"
FOREVER = ["--steps", "100000000"]
AFTER = [sys.executable, "-m", "tftune"]


def tune(cmd: list[str], case: Path, out: Path) -> tuple[float, dict[str, Any]]:
    """One default `tftune optimize` of `case`: its wall time and its tuning JSON."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [*cmd, "optimize", str(case), "--json", "t.json", "--", *FOREVER]
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (out / "stdout.txt").write_text(done.stdout)
    return wall, json.loads((out / "t.json").read_text())


def final_round(
    case: Path, found: Any, configs: dict[str, Any], repeats: int
) -> dict[str, list[float]]:
    from tftune.tuner.study import ScriptRunner
    from tftune.tuner.trial import MeasureSpec

    # As `tftune optimize` measures: the training loop discovery found, or the busiest
    # loop of a script that updates nothing (the bench cases are pipeline benchmarks).
    trains = found.training
    spec = MeasureSpec(
        busiest_loop=found.busiest_loop,
        training_at=(trains.site, trains.place) if trains is not None else None,
    )
    runner = ScriptRunner(case, FOREVER, spec=spec)
    distinct: dict[str, str] = {}
    for key, config in configs.items():
        distinct[key] = next(k for k, c in configs.items() if c == config)
    samples: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(repeats):
        for key, config in configs.items():
            if distinct[key] == key:
                samples[key].append(runner.measure(config).examples_per_s or 0.0)
    for key, same in distinct.items():
        samples[key] = samples[same]
    return samples


def autotune_config(found: Any) -> Any:
    """AUTOTUNE everywhere, as `tftune optimize` builds it for this case."""
    from tftune.tuner.space import build_space
    from tftune.tuner.study import Role, baseline_params

    space = build_space(found.sites, cores=os.cpu_count() or 1)
    return space.config(baseline_params(space, Role.AUTOTUNE, space.cores))


def guided_share(data: dict[str, Any]) -> float | None:
    guided = (data["baselines"].get("guided") or {}).get("examples_per_s")
    best = data["best"].get("examples_per_s")
    return round(guided / best, 3) if guided and best else None


def run_case(
    name: str, before_cmd: list[str], index: int, repeats: int, keep: Path | None
) -> dict[str, Any]:
    from tftune.tuner.config import Config, config_from_json

    case = CASES_DIR / f"{name}.py"
    with tempfile.TemporaryDirectory() as tmp:
        order = [("before", before_cmd), ("after", AFTER)]
        if index % 2:
            order.reverse()
        where = keep / name if keep is not None else Path(tmp)
        runs = {who: tune(cmd, case, where / who) for who, cmd in order}
    (wall_b, before), (wall_a, after) = runs["before"], runs["after"]
    from tftune.tuner.trial import discover

    found = discover(case, FOREVER)
    configs = {
        "as_written": Config(),
        "autotune": autotune_config(found),
        "before": config_from_json(before["best"]["config"]),
        "after": config_from_json(after["best"]["config"]),
    }
    samples = final_round(case, found, configs, repeats)
    med = {k: statistics.median(v) for k, v in samples.items()}

    def ratio(a: str, b: str) -> float:
        return round(med[a] / med[b], 3) if med[b] else float("nan")

    result = {
        "case": name,
        "tuning_s": {"before": round(wall_b, 1), "after": round(wall_a, 1)},
        "tuning_ratio_after_over_before": round(wall_a / wall_b, 3),
        "trials": {"before": before["trials"], "after": after["trials"]},
        "stop_reason": after.get("stop_reason"),
        "winners": {"before": before["best"]["description"], "after": after["best"]["description"]},
        "examples_per_s": {k: round(v, 1) for k, v in med.items()},
        "samples": {k: [round(x, 1) for x in v] for k, v in samples.items()},
        "after_vs_before_winner": ratio("after", "before"),
        "after_vs_autotune": ratio("after", "autotune"),
        "after_vs_as_written": ratio("after", "as_written"),
        # Both figures from the after run's own study (the guided trial is not re-measured).
        "guided_share_of_after": guided_share(after),
        "break_even": after.get("break_even"),
    }
    print(json.dumps(result, indent=1), flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="the `tftune` executable to compare with")
    p.add_argument("--cases", default=",".join(sorted(c.stem for c in CASES_DIR.glob("*.py"))))
    p.add_argument("--final-repeats", type=int, default=3)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--keep", type=Path, help="keep each tuning run's output in this folder")
    args = p.parse_args()
    results = [
        run_case(name, [args.before], i, args.final_repeats, args.keep)
        for i, name in enumerate(args.cases.split(","))
    ]
    head = ["case", "tuning before", "after", "after/before", "after winner vs before"]
    print("\n" + " | ".join([*head, "vs AUTOTUNE", "guided share"]))
    for r in results:
        t = r["tuning_s"]
        print(
            f"{r['case']} | {t['before']:.0f} s | {t['after']:.0f} s | "
            f"{r['tuning_ratio_after_over_before']:.2f} | {r['after_vs_before_winner']:.2f} | "
            f"{r['after_vs_autotune']:.2f} | {r['guided_share_of_after']}"
        )
    if args.out:
        from tftune.core.userfiles import write_text_atomic

        write_text_atomic(args.out, json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
