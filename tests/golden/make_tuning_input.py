"""Make tests/fixtures/tuning_gpu_both.json: the second tuning JSON the golden tests render.

    python tests/golden/make_tuning_input.py

It is the tuning JSON `tftune optimize` writes (`tuner.output.assemble.tuning_document`, written as
`write_json_atomic` writes it) for a handwritten GPU study, so every figure is fixed: a
Keras script on a GPU host, tuned for ``--objective both`` with NVML utilization, with the
four baselines and a guided trial, a mixed-precision winner re-measured in a final round,
a pruned trial, a native crash and a model-bound ceiling. The tuning_latency.json
fixture is the other case: CPU only, duty cycle, throughput. Only `platform` (this
machine's Python and core count) is pinned afterwards. Run it again only to change that
input on purpose; then regenerate the golden files (tests/golden/README.md).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tftune.core.failures import FailureKind
from tftune.core.vocabulary import TrialState
from tftune.tuner.output.assemble import tuning_document, write_json_atomic
from tftune.tuner.output.emit import globals_snippet, source_diff
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import AUTOTUNE, SiteConfig
from tftune.tuner.searchspace.space import config_from_values
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import Objective, Role, StudyOutcome, TrialRecord
from tftune.tuner.trial.crashes import crash_summary
from tftune.tuner.trial.discovery import CallSite

TARGET = Path(__file__).resolve().parents[1] / "fixtures" / "tuning_gpu_both.json"
SCRIPT = "train.py"
MAP, BATCH, PREFETCH = "train.py:41", "train.py:44", "train.py:45"
PIPELINE = (
    "ds = ds.map(decode_and_augment)",
    "# the batch, then the prefetch",
    "",
    "ds = ds.batch(128)",
    "ds = ds.prefetch(1)",
    "model.fit(ds, epochs=3)",
)
SOURCE = "\n".join([*(f"# line {n}" for n in range(1, 41)), *PIPELINE]) + "\n"
SITES = [
    CallSite(MAP, "map", ("num_parallel_calls",), SiteConfig(), "decode_and_augment", 1),
    CallSite(BATCH, "batch", ("batch_size",), SiteConfig(batch_size=128), None, 1),
    CallSite(PREFETCH, "prefetch", ("buffer_size",), SiteConfig(buffer_size=1), None, 1),
]
SPACE = build_space(SITES, cores=16, gpu_visible=True, uses_keras=True)
CRASH = crash_summary(
    FailureKind.NATIVE,
    signal="SIGABRT",
    returncode=-6,
    fatal_error="Fatal Python error: Aborted",
    native_message="Check failed: allocation of 9437184000 bytes exceeds the GPU's 40 GiB",
    stack=("train.py:48 in <module>", "keras/src/utils/traceback_utils.py:117 in error_handler"),
)


def params(npc: Any, batch: int, buffer: Any, pool: int | None, mp: str | None) -> dict[str, Any]:
    return {
        f"{MAP}/num_parallel_calls": npc,
        f"{BATCH}/batch_size": batch,
        f"{PREFETCH}/buffer_size": buffer,
        "threadpool_size": pool,
        "mixed_precision": mp,
    }


def trial(n: int, role: Role, p: dict[str, Any], *figures: float, **kw: Any) -> TrialRecord:
    """A trial; `figures` are examples/s, utilization, spread and input-wait share."""
    eps, util, spread, wait = figures if figures else (None, None, None, None)
    repeats = () if eps is None else (round(eps * (1 - spread / 2), 2), eps, eps)
    return TrialRecord(
        n,
        role,
        kw.pop("state", TrialState.COMPLETE),
        p,
        SPACE.describe(p),
        eps,
        util,
        spread,
        wait,
        repeats,
        wall_s=kw.pop("wall_s", 95.0),
        feasible=eps is not None,
        **kw,
    )


def outcome() -> StudyOutcome:
    aw = trial(0, Role.AS_WRITTEN, params(None, 128, 1, None, None), 410.0, 0.38, 0.04, 0.55)
    at = trial(1, Role.AUTOTUNE, params(AUTOTUNE, 128, AUTOTUNE, None, None), 980, 0.71, 0.03, 0.22)
    he = trial(2, Role.HEURISTIC, params(16, 128, AUTOTUNE, None, None), 1010.0, 0.73, 0.03, 0.2)
    gu = trial(3, Role.GUIDED, params(16, 128, 4, 32, None), 1180.0, 0.83, 0.03, 0.09)
    best = trial(4, Role.SEARCH, params(32, 256, 8, 32, "mixed_float16"), 1890, 0.91, 0.02, 0.04)
    pruned = trial(
        5,
        Role.SEARCH,
        params(8, 64, 2, 8, None),
        540.0,
        0.41,
        0.05,
        0.5,
        state=TrialState.PRUNED,
        wall_s=31.0,
        reason="540.0 examples/s after one window, below the median of completed trials (1,010.0)",
    )
    failed = trial(
        6,
        Role.SEARCH,
        params(64, 512, 16, 64, "mixed_float16"),
        state=TrialState.FAILED,
        wall_s=48.0,
        reason="killed by signal 6 (SIGABRT)",
        crash=CRASH,
        stderr_tail="Fatal Python error: Aborted\n\nCurrent thread 0x7f (most recent call first):",
    )
    util = trial(
        7, Role.SEARCH, params(AUTOTUNE, 256, AUTOTUNE, 16, "mixed_float16"), 1840, 0.95, 0.02, 0.03
    )
    plain = trial(8, Role.SEARCH, params(32, 256, 8, 32, None), 1320.0, 0.88, 0.03, 0.05)
    final = (
        TrialRecord(
            4,
            Role.CONFIRM,
            TrialState.COMPLETE,
            best.params,
            best.description,
            1850.0,
            0.9,
            0.03,
            0.05,
            (1822.25, 1850.0, 1850.0),
            wall_s=96.0,
            feasible=True,
        ),
        TrialRecord(
            0,
            Role.CONFIRM,
            TrialState.COMPLETE,
            aw.params,
            aw.description,
            405.0,
            0.37,
            0.04,
            0.56,
            (396.9, 405.0, 405.0),
            wall_s=96.0,
            feasible=True,
        ),
    )
    return StudyOutcome(
        study_name="tftune-train-py",
        storage="tftune-study.db",
        objective=Objective.BOTH,
        utilization_kind="nvml",
        records=(aw, at, he, gu, best, pruned, failed, util, plain),
        baselines={Role.AS_WRITTEN: aw, Role.AUTOTUNE: at, Role.HEURISTIC: he, Role.GUIDED: gu},
        best=best,
        best_config=SPACE.config(best.params, apply_fixed=True),
        confirm=final[0],
        final=final,
        pareto=(best, util),
        importances={"mixed_precision": 0.41, f"{BATCH}/batch_size": 0.27, "threadpool_size": 0.18},
        wall_s=1325.4,
        ran_this_session=9,
        notes=("guided guess from a profile of the script as written: the map at train.py:41",),
        stop_reason="stopped: 4 trials in a row without a gain beyond the noise (--trials auto)",
    )


def main() -> int:
    out = outcome()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / SCRIPT
        script.write_text(SOURCE)
        diff = source_diff(script, out.best_config)
    data = tuning_document(
        script=SCRIPT,
        outcome=out,
        space=SPACE,
        ceiling=Ceiling(4200.0, 1950.0),
        device="GPU",
        config_file="tftune-best.json",
        command="tftune run --config tftune-best.json train.py -- --epochs 3",
        diff=diff,
        snippet=globals_snippet(config_from_values(out.best.params)),
        seed=0,
    ).to_json()
    data["platform"] = {"python": "3.11.7", "cores": 16}  # this machine's: pinned
    write_json_atomic(data, TARGET)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
