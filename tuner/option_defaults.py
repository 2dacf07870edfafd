"""What each option of a tuning run is when left out, defined once.

The values ``tftune optimize --help`` names (tuner/options.py formats its help texts
from them) and the modules that act on the options use: the trial count of ``--trials
auto``, the seed, the default files, what a trial measures and how long it waits, and
``tftune profile``'s defaults. Imports nothing, so any module may import it (the
command line without the tuner, the trial's own modules without an import cycle).
"""

from __future__ import annotations

from typing import Literal

# ``--trials auto`` (the default): the study stops once trials stop gaining
# (`tuner.study.contract.trial_budget`), at DEFAULT_TRIALS at the most.
AUTO_TRIALS: Literal["auto"] = "auto"
# ``--trials``: a number of finished trials, or "auto".
Trials = int | Literal["auto"]
DEFAULT_TRIALS = 20
DEFAULT_SEED = 0
DEFAULT_STORAGE_FILE = "tftune-study.journal"
DEFAULT_BEST_FILE = "tftune-best.json"
# ``-o``'s default on the command line; the API writes no page unless asked.
DEFAULT_HTML_FILE = "tftune-tuning.html"
# ``tftune profile``'s defaults: the training steps it profiles, and where the trace goes.
PROFILE_STEPS = "20:40"
PROFILE_LOGDIR = "tftune-profile"

# What a trial's options mean left out, as ``--help`` says it: ``--window`` (seconds of
# training per measured window; the first of several is FIRST_WINDOW_SHARE of that),
# ``--repeats`` (windows; up to EXTRA_WINDOWS more where their rates' spread is above
# AGREE_WITHIN): `tuner.trial.windows`. ``--step-timeout``: the first training step is
# due within FIRST_STEP_S, each one after it within STALL_FACTOR times the slowest step
# so far, at least STALL_FLOOR_S (`tuner.trial.watch`). ``--cache-budget``: this share
# of the memory available when the check runs (`tuner.fixes.rewrite_check`).
DEFAULT_WINDOW_S = 3.0
FIRST_WINDOW_SHARE = 0.5
DEFAULT_REPEATS = 2
EXTRA_WINDOWS = 2
AGREE_WITHIN = 0.10
FIRST_STEP_S = 300.0
STALL_FACTOR = 20.0
STALL_FLOOR_S = 60.0
CACHE_BUDGET_SHARE = 0.25
