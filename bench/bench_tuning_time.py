"""Benchmark: how long `tftune optimize` takes with its default options, before and after
a change, and what its winner is worth against a grid measured in the same run.

    python bench/bench_tuning_time.py --before /tmp/venv_before/bin/tftune \
        --cases latency_io,cpu_heavy_map,compute_bound --out results.json

Per case (`bench/cases/*.py`, run unmodified with ``--steps 100000000``; or a user-style
script of `tests/realscripts/` by its name, with the data `makedata.py` writes and
``--epochs 100000``: ``--cases image_folders``):

1. ``tftune optimize CASE`` with the default options, once with the `--before` install
   (say, a venv of today's main) and once with this checkout's, alternating which goes
   first from case to case; each is timed end to end (discovery, bounds, profile,
   study, final round: what the user waits for);
2. the focused grid (`focused_grid`: at most ~16 points), each point one full
   measurement with the same trial runner and `MeasureSpec` as the final round;
   ``--no-grid`` skips it;
3. a final round with this checkout's trial runner: the script as written, AUTOTUNE
   everywhere, the before winner, the after winner, the after run's guided trial and the
   grid's best, re-measured ``--final-repeats`` times, interleaved, so that load on a
   shared machine hits all alike. Every ratio is of the medians of that round.

It prints, per case, the tuning wall times and their ratio (after / before), both
winners against the grid's best, the after winner against AUTOTUNE and as written, and
the guided trial against the grid's best; then the issue's targets, each "ok",
"noise" (the medians miss, the final-round samples overlap) or "MISSED" (every sample of
one is below every sample of the other). Not a test: it measures and prints.
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
REALSCRIPTS = Path(__file__).resolve().parent.parent / "tests" / "realscripts"
# Where the user-style scripts' data is written once (without --keep).
DATA_HOME = os.path.join(tempfile.gettempdir(), "tftune-bench-realscripts")
AFTER = [sys.executable, "-m", "tftune"]
AS_WRITTEN = "as written"
# The grid's parallelism values (`focused_grid`); "cores" is os.cpu_count().
GRID_PARALLELISM: tuple[str | int, ...] = (AS_WRITTEN, "AUTOTUNE", "cores", 8, 16, 32, 64)
PARALLEL_FIELDS = ("num_parallel_calls", "cycle_length")
BUFFER_FIELDS = ("buffer_size", "final_prefetch")
# The targets.
MAX_TUNING_S = 120.0
GRID_SHARE = 0.95  # the after winner, of the grid's best
GUIDED_SHARE = 0.8  # the guided trial, of the grid's best


def target(name: str, work: Path) -> tuple[Path, list[str]]:
    """A case's script and the arguments that keep it running until tftune stops it."""
    case = CASES_DIR / f"{name}.py"
    if case.exists():
        return case, FOREVER
    script = REALSCRIPTS / f"{name}.py"
    if not script.exists():
        raise SystemExit(f"{name}: no such case in bench/cases or tests/realscripts")
    data = work / "data"
    if not (data / "speech").is_dir():
        subprocess.run([sys.executable, str(REALSCRIPTS / "makedata.py"), str(data)], check=True)
    return script, ["--data", str(data), "--epochs", "100000"]


def tune(
    cmd: list[str], case: Path, out: Path, args: list[str] = FOREVER
) -> tuple[float, dict[str, Any]]:
    """One default `tftune optimize` of `case`: its wall time and its tuning JSON."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [*cmd, "optimize", str(case), "--json", "t.json", "--", *args]
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (out / "stdout.txt").write_text(done.stdout)
    return wall, json.loads((out / "t.json").read_text())


# --- the focused grid ---------------------------------------------------------------------


def focused_grid(space: Any) -> list[dict[str, Any]]:
    """The grid's points: parameter dicts of `space` (valid through `space.params_for` /
    `space.nearest`), in this order, identical configs kept once:

    1. the script as written;
    2. every parallelism-like knob (``num_parallel_calls`` at every site, map, interleave
       and file readers alike, and interleave ``cycle_length``) set together to one value
       of `GRID_PARALLELISM`: as written (each knob its own value), AUTOTUNE, the core
       count, 8, 16, 32, 64 (the nearest choice where a knob lacks it); every buffer
       (prefetch ``buffer_size`` at its sites, ``final_prefetch`` where the space has it)
       AUTOTUNE. Each value with the private thread pool at default and, where the space
       has a ``threadpool_size`` knob, at max(value, cores) (for AUTOTUNE, whose
       parallelism the pool caps: the largest pool choice; for as written, the largest
       value written, 1 where none is): left out where that equals the core count (the
       default pool's size);
    3. where the space has a mixed-precision and/or a batch-size knob: {as written, the
       16-bit policy} x {every batch as written, every batch x2 (the nearest choice)},
       with AUTOTUNE everywhere as in point 2 and the default pool.

    On 2 cores, for a script that writes no parallelism: 1 + 11 points, plus up to 3 for
    precision and batch (the fourth, as written with AUTOTUNE, is point 2's AUTOTUNE)."""
    from tftune.tuner.searchspace.config import AUTOTUNE

    cores = space.cores
    fields = {k.field for k in space.knobs}
    written = [
        k.as_written
        for k in space.knobs
        if k.field in PARALLEL_FIELDS and isinstance(k.as_written, int) and k.as_written > 0
    ]
    buffers = {f: AUTOTUNE for f in BUFFER_FIELDS}
    points: list[dict[str, Any]] = [space.as_written_params()]
    for value in GRID_PARALLELISM:
        if value == AS_WRITTEN:
            want: dict[str, Any] = dict(buffers)
            size = max([1, *written])
        else:
            par = AUTOTUNE if value == "AUTOTUNE" else cores if value == "cores" else value
            want = {**buffers, **dict.fromkeys(PARALLEL_FIELDS, par)}
            size = 64 if par == AUTOTUNE else max(int(par), cores)
        points.append(space.params_for(want))
        if "threadpool_size" in fields and max(size, cores) != cores:
            points.append(space.params_for({**want, "threadpool_size": max(size, cores)}))
    autotune = {**buffers, **dict.fromkeys(PARALLEL_FIELDS, AUTOTUNE)}
    precisions: list[Any] = [None]
    if "mixed_precision" in fields:
        k = space.knob("mixed_precision")
        precisions += [c for c in k.choices if c is not None][:1]
    for policy in precisions:
        for factor in (1, 2) if "batch_size" in fields else (1,):
            params = space.params_for(autotune)
            for k in space.knobs:
                if k.field == "mixed_precision":
                    params[k.name] = policy
                elif k.field == "batch_size" and isinstance(k.as_written, int):
                    params[k.name] = space.nearest(k, k.as_written * factor)
            points.append(params)
    seen: set[str] = set()
    out = []
    for params in points:
        key = config_key(space.config(params))
        if key not in seen:
            seen.add(key)
            out.append(params)
    return out


def config_key(config: Any) -> str:
    return json.dumps(config.to_json(), sort_keys=True)


def measure_grid(
    runner: Any, space: Any, points: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], float]:
    """Each point measured once: its description, examples/s (0 when it failed) and
    why it failed; and the grid's wall time."""
    from tftune.core.vocabulary import TrialState

    t0 = time.monotonic()
    rows = []
    for i, params in enumerate(points, 1):
        m = runner.measure(space.config(params))
        ok = m.state is TrialState.COMPLETE and m.examples_per_s
        eps = float(m.examples_per_s) if ok else 0.0
        row: dict[str, Any] = {"description": space.describe(params)}
        row["examples_per_s"] = round(eps, 1)
        row["params"], row["reason"] = params, None if ok else (m.reason or m.state.value)
        rows.append(row)
        print(f"   grid {i:>2}/{len(points)} {eps:>10.1f}  {row['description']}", flush=True)
    return rows, time.monotonic() - t0


# --- the final round ------------------------------------------------------------------------


def final_round(runner: Any, configs: dict[str, Any], repeats: int) -> dict[str, list[float]]:
    """Every contender `repeats` times, interleaved; contenders with one config are one
    measurement (a winner often *is* the grid's best: two runs of one config would turn
    their noise into a ratio)."""
    distinct: dict[str, str] = {}
    for key, config in configs.items():
        distinct[key] = next(k for k, c in configs.items() if c == config)
    samples: dict[str, list[float]] = {k: [] for k in configs}
    for r in range(repeats):
        for key, config in configs.items():
            if distinct[key] == key:
                samples[key].append(runner.measure(config).examples_per_s or 0.0)
                print(f"   final {r + 1}/{repeats} {key:<11} {samples[key][-1]:>10.1f}", flush=True)
    for key, same in distinct.items():
        samples[key] = samples[same]
    return samples


def guided_config(space: Any, data: dict[str, Any]) -> tuple[Any, str | None]:
    """The after run's guided trial (``trials_detail``, role "guided") as a `Config` of
    `space`, and its description; (None, why) when there is none or a value does not map
    back onto a choice of `space`."""
    from tftune.tuner.searchspace.space import format_value

    row = next((t for t in data.get("trials_detail") or [] if t.get("role") == "guided"), None)
    if row is None:
        return None, "no guided trial in the after run"
    params: dict[str, Any] = {}
    for name, text in row["params"].items():
        try:
            knob = space.knob(name)
        except KeyError:
            return None, f"guided knob {name} is not in this space"
        hits = [c for c in knob.choices if format_value(c) == text]
        if not hits:
            return None, f"guided {name}={text} is not a choice of this space"
        params[name] = hits[0]
    return space.config(params), row.get("description")


def below(samples: dict[str, list[float]], a: str, b: str, factor: float = 1.0) -> str:
    """`a` against `factor` x `b` on the final round: "ok" (the medians meet it), "noise"
    (they do not, but the samples overlap once scaled) or "MISSED" (every sample of `a`
    is under every scaled sample of `b`); "n/a" when either was not measured."""
    if not samples.get(a) or not samples.get(b):
        return "n/a"
    if statistics.median(samples[a]) >= factor * statistics.median(samples[b]):
        return "ok"
    return "noise" if max(samples[a]) >= factor * min(samples[b]) else "MISSED"


# --- one case -------------------------------------------------------------------------------


def setup(case: Path, args: list[str] = FOREVER) -> tuple[Any, Any, Any]:
    """Discovery, the space as `tftune optimize` builds it (`space_build.build_search_space`:
    platform flags, Keras, batch) and the runner with the spec its trials use."""
    from tftune.probes.live.nvml import gpu_visible
    from tftune.tuner.searchspace.space_build import build_search_space
    from tftune.tuner.study import ScriptRunner
    from tftune.tuner.trial import MeasureSpec, discover

    found = discover(case, args)
    gpu = gpu_visible()
    space = build_search_space(case, case, found, gpu, None, None, lambda _s: None)
    # As `tftune optimize` measures: the training loop discovery found, or the busiest
    # loop of a script that updates nothing (the bench cases are pipeline benchmarks).
    trains = found.training
    spec = MeasureSpec(
        busiest_loop=found.busiest_loop,
        training_at=(trains.site, trains.place) if trains is not None else None,
    )
    return space, ScriptRunner(case, args, spec=spec, gpu_visible=gpu), found


def run_case(name: str, before_cmd: list[str], index: int, args: argparse.Namespace) -> Any:
    from tftune.tuner.searchspace.config import Config, config_from_json
    from tftune.tuner.study import Role, baseline_params

    print(f"\n== {name}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        case, script_args = target(name, args.keep or Path(DATA_HOME))
        order = [("before", before_cmd), ("after", AFTER)]
        if index % 2:
            order.reverse()
        where = args.keep / name if args.keep is not None else Path(tmp)
        runs = {who: tune(cmd, case, where / who, script_args) for who, cmd in order}
    (wall_b, before), (wall_a, after) = runs["before"], runs["after"]
    print(f"   tuning: before {wall_b:.0f} s, after {wall_a:.0f} s", flush=True)
    space, runner, _found = setup(case, script_args)
    configs = {
        "as_written": Config(),
        "autotune": space.config(baseline_params(space, Role.AUTOTUNE, space.cores)),
        "before": config_from_json(before["best"]["config"]),
        "after": config_from_json(after["best"]["config"]),
    }
    guided, guided_why = guided_config(space, after)
    if guided is not None:
        configs["guided"] = guided
    grid: list[dict[str, Any]] = []
    grid_s = 0.0
    if not args.no_grid:
        points = focused_grid(space)
        print(f"   focused grid: {len(points)} points", flush=True)
        grid, grid_s = measure_grid(runner, space, points[: args.max_grid])
        best = max(grid, key=lambda g: g["examples_per_s"])
        configs["grid_best"] = space.config(best["params"])
    samples = final_round(runner, configs, args.final_repeats)
    med = {k: statistics.median(v) for k, v in samples.items()}

    def ratio(a: str, b: str) -> float | None:
        return round(med[a] / med[b], 3) if med.get(a) and med.get(b) else None

    result = {
        "case": name,
        "tuning_s": {"before": round(wall_b, 1), "after": round(wall_a, 1)},
        "tuning_ratio_after_over_before": round(wall_a / wall_b, 3),
        "trials": {"before": before["trials"], "after": after["trials"]},
        "stop_reason": after.get("stop_reason"),
        "winners": {"before": before["best"]["description"], "after": after["best"]["description"]},
        "guided_trial": guided_why,
        "grid_points": len(grid),
        "grid_wall_s": round(grid_s, 1),
        "grid_best": max(grid, key=lambda g: g["examples_per_s"])["description"] if grid else None,
        "grid": [{k: v for k, v in g.items() if k != "params"} for g in grid],
        "examples_per_s": {k: round(v, 1) for k, v in med.items()},
        "samples": {k: [round(x, 1) for x in v] for k, v in samples.items()},
        "same_config": sorted(
            k for k in configs if next(j for j in configs if configs[j] == configs[k]) != k
        ),
        "after_vs_grid_best": ratio("after", "grid_best"),
        "before_vs_grid_best": ratio("before", "grid_best"),
        "guided_vs_grid_best": ratio("guided", "grid_best"),
        "after_vs_before_winner": ratio("after", "before"),
        "after_vs_autotune": ratio("after", "autotune"),
        "after_vs_as_written": ratio("after", "as_written"),
        "targets": {
            f"tuning <= {MAX_TUNING_S:.0f} s": "ok" if wall_a <= MAX_TUNING_S else "MISSED",
            f"after >= {GRID_SHARE}x grid best": below(samples, "after", "grid_best", GRID_SHARE),
            "after >= AUTOTUNE": below(samples, "after", "autotune"),
            "after >= as written": below(samples, "after", "as_written"),
            f"guided >= {GUIDED_SHARE}x grid best": below(
                samples, "guided", "grid_best", GUIDED_SHARE
            ),
        },
        "break_even": after.get("break_even"),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "grid"}, indent=1), flush=True)
    return result


# --- the summary ----------------------------------------------------------------------------


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def print_summary(results: list[dict[str, Any]]) -> None:
    head = ["case", "tuning before s", "after s", "after/before", "after winner vs grid best"]
    head += ["before winner vs grid best", "vs AUTOTUNE", "guided vs grid best", "grid points"]
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in results:
        t = r["tuning_s"]
        cells = [r["case"], f"{t['before']:.0f}", f"{t['after']:.0f}"]
        cells += [_x(r["tuning_ratio_after_over_before"]), _x(r["after_vs_grid_best"])]
        cells += [_x(r["before_vs_grid_best"]), _x(r["after_vs_autotune"])]
        cells += [_x(r["guided_vs_grid_best"]), str(r["grid_points"])]
        print("| " + " | ".join(cells) + " |")
    names = list(results[0]["targets"]) if results else []
    print("\n| case | " + " | ".join(names) + " |\n|" + "---|" * (len(names) + 1))
    for r in results:
        print(f"| {r['case']} | " + " | ".join(r["targets"][n] for n in names) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--before", required=True, help="the `tftune` executable to compare with")
    p.add_argument("--cases", default=",".join(sorted(c.stem for c in CASES_DIR.glob("*.py"))))
    p.add_argument("--final-repeats", type=int, default=3)
    p.add_argument("--no-grid", action="store_true", help="skip the grid (a quick run)")
    p.add_argument(
        "--max-grid", type=int, default=None, help="measure only the grid's first N points"
    )
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--keep", type=Path, help="keep each tuning run's output in this folder")
    args = p.parse_args()
    results = [
        run_case(name, [args.before], i, args) for i, name in enumerate(args.cases.split(","))
    ]
    print_summary(results)
    if args.out:
        from tftune.core.userfiles import write_text_atomic

        write_text_atomic(args.out, json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
