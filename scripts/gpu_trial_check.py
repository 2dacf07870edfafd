"""One short trial on a GPU machine: NVML sampling plus mixed precision, figures as JSON.

    python scripts/gpu_trial_check.py OUT_DIR

Runs `examples/keras_fit.py` twice (float32, then the GPU's 16-bit policy) through the
trial runner and writes ``OUT_DIR/gpu_trial.json``. On a machine without a GPU it still
runs (the policy becomes ``mixed_bfloat16``) and reports utilization as "not measured"
with NVML's reason, next to the CPU duty cycle: never a 0 that was not measured.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tftune.probes.live.nvml import NotMeasured, NvmlSampler
from tftune.tuner.measurement import Measurement
from tftune.tuner.searchspace.config import Config
from tftune.tuner.trial import MeasureSpec, run_trial

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "keras_fit.py"
ARGS = ["--steps", "100000", "--batch-size", "256"]
SPEC = MeasureSpec(warmup_steps=10, warmup_s=2.0, window_s=3.0, repeats=3, stall_s=120)


def _row(result: Measurement) -> dict[str, Any]:
    return {
        "state": result.state.value,
        "reason": result.reason,
        "wall_s": round(result.wall_s, 2),
        "metrics": result.metrics_json(),
        "notes": list(result.notes),
        "stderr_tail": result.stderr_tail[-1500:] if not result.ok else "",
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    probe = NvmlSampler.open()
    gpu = not isinstance(probe, NotMeasured)
    nvml_status = "available" if gpu else str(probe)
    if isinstance(probe, NvmlSampler):
        probe.stop()
    policy = "mixed_float16" if gpu else "mixed_bfloat16"
    started = time.monotonic()
    report: dict[str, Any] = {
        "device": "GPU" if gpu else "CPU_ONLY",
        "nvml": nvml_status,
        "script": str(SCRIPT.relative_to(ROOT)),
        "args": ARGS,
        "trials": {
            "float32": _row(run_trial(SCRIPT, ARGS, Config(mixed_precision="off"), SPEC)),
            policy: _row(run_trial(SCRIPT, ARGS, Config(mixed_precision=policy), SPEC)),
        },
    }
    report["wall_s"] = round(time.monotonic() - started, 1)
    text = json.dumps(report, indent=2)
    (out_dir / "gpu_trial.json").write_text(text + "\n")
    print(text)
    failed = [k for k, v in report["trials"].items() if v["state"] != "complete"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
