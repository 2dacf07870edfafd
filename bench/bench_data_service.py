"""When one host is not enough: the service sizing figures on a bench case.

Runs the two halves of the bound analysis on one script (default:
bench/cases/cpu_heavy_map.py), as `tftune optimize` does: the pipeline alone (its child
measures its process CPU time against the elements it delivers: the per-core rate) and
the model alone. Then profiles a few steps of the script as written and sizes it from
the trace (tf.data threads' busy time against the step time). Prints both sizings, as
`probes/advice/service_sizing.py` computes them, and the figures they come from, as JSON.

    python bench/bench_data_service.py [--case bench/cases/cpu_heavy_map.py] [-- ARGS]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tftune.probes.advice.analysis import analyze
from tftune.probes.live.environment import usable_cores
from tftune.tuner.searchspace import bounds
from tftune.tuner.searchspace.config import Config
from tftune.tuner.trial import MeasureSpec, profile_script, run_trial

HERE = Path(__file__).resolve().parent


def _bounds(script: Path, args: list[str]) -> dict[str, Any]:
    spec = MeasureSpec(window_s=3.0, repeats=2, busiest_loop=True)
    pipe = run_trial(script, args, bounds.with_bound_mode(Config(), bounds.PIPELINE_ONLY), spec)
    model = run_trial(script, args, bounds.with_bound_mode(Config(), bounds.MODEL_ONLY), spec)
    sizing = bounds.pipeline_sizing(pipe.cpu, pipe.examples, pipe.steps, model.examples_per_s)
    return {
        "pipeline_only_examples_per_s": pipe.examples_per_s,
        "model_only_examples_per_s": model.examples_per_s,
        "pipeline_cpu": pipe.cpu.to_json() if pipe.cpu is not None else None,
        "examples_per_element": pipe.examples / pipe.steps if pipe.steps else None,
        "sizing": sizing.to_json() if sizing is not None else None,
    }


def _trace(script: Path, args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tftune-bench-svc-") as logdir:
        prof = profile_script(script, args, 10, 30, logdir, timeout_s=180)
        if not prof.captured:
            return {"error": prof.reason}
        data = analyze(Path(logdir)).to_json()
    return {
        "steps": data["steps"],
        "input_share": data.get("input_share"),
        "cores": data["metadata"].get("cores"),
        "sizing": data.get("service_sizing"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default=str(HERE / "cases" / "cpu_heavy_map.py"))
    parser.add_argument("args", nargs="*", help="the script's arguments (after --)")
    ns = parser.parse_args()
    script = Path(ns.case).resolve()
    out = {
        "case": script.name,
        "host_cores": usable_cores(),
        "bound_analysis": _bounds(script, ns.args),
        "trace": _trace(script, ns.args),
    }
    print(json.dumps(out, indent=2))
    for side in ("bound_analysis", "trace"):
        sizing = out[side].get("sizing")  # type: ignore[attr-defined]
        print(f"{side}: {sizing['sentence'] if sizing else 'no sizing'}")


if __name__ == "__main__":
    main()
