"""tftune.tuner.trial: the parent side of one run of the user's unmodified script.

Public entry points:

- `discover(script, args)` → `Discovery`: the call sites and what the script passes.
- `run_trial(script, args, config, spec)` → `Measurement`: one measured trial. Failures
  (exception, non-zero exit, OOM, stall, NaN loss) are results, never raised.
- `run_script(script, args, config)` → exit code: ``tftune run`` (apply, no measurement).
- `profile_script(script, args, start, stop, logdir)` → `ProfileResult`: ``tftune profile``.
- `check_script(script)` → its absolute path, or `ScriptError`.

Every one of them goes through one launch → poll → stop loop (`launch.ChildRun`): the
child runs in its own session (process group), and whatever happens the whole group is
sent SIGTERM, then SIGKILL, before they return. Modules, by job:

- `launch`: the child's command line and environment, the injectable launcher
  (`RunnerDeps`), `stop_group`, the loop and its `Observer` contract, ``tftune run``;
- `run_trial`: one measured trial (`run_trial`), its child run and its `Measurement`;
- `windows`: `MeasureSpec` and the warm-up → windows state machine of a measured run;
- `discovery`: `Discovery`, `CallSite`, `IteratedPipeline` and parsing the child's rows;
- `profile`: ``tftune profile``;
- `watch`: the streams a child iterates, which train, and the step deadlines.
"""

from __future__ import annotations

from tftune.tuner.trial.discovery import Discovery, discover
from tftune.tuner.trial.launch import RunnerDeps, check_script, run_script
from tftune.tuner.trial.profile import ProfileResult, profile_script
from tftune.tuner.trial.run_trial import run_trial
from tftune.tuner.trial.windows import MeasureSpec

__all__ = [
    "Discovery",
    "MeasureSpec",
    "ProfileResult",
    "RunnerDeps",
    "check_script",
    "discover",
    "profile_script",
    "run_script",
    "run_trial",
]
