"""The options of one tuning run: `OptimizeOptions`, built once at the front door.

``tftune optimize`` (its click command) and ``tftune.optimize(...)`` (the public API)
each build one `OptimizeOptions` and pass it down; `tuner.optimize.optimize` and its
phases read it. Each field knows its command-line flag, so the errors name the flag
users type, and the resume command printed on Ctrl-C (`resume_command`) is derived
from the fields rather than spelled again.

The option vocabulary lives here too (``--trials auto``, the default seed, the
objectives, the default storage file and study name): `tuner.study` re-exports it.
This module imports nothing of the tuner at module level, so the command line can
import it without importing the study (Optuna, numpy) or TensorFlow.

Values are checked once, in `OptimizeOptions.__post_init__` (a `ConfigError`, one line
that names the flag and the value). What needs the world (the script exists, the
storage opens, an output path can be written, a ``--space`` file parses, the machine has
the GPUs asked for) is checked by `tuner.optimize.check_inputs` before any trial runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tftune.core.errors import ConfigError

# ``--trials auto`` (the default): the study stops once trials stop gaining
# (`tuner.study.contract.trial_budget`).
AUTO_TRIALS: Literal["auto"] = "auto"
# ``--trials``: a number of finished trials, or "auto".
Trials = int | Literal["auto"]
DEFAULT_SEED = 0
DEFAULT_STORAGE_FILE = "tftune-study.journal"
DEFAULT_BEST_FILE = "tftune-best.json"


class Objective(str, enum.Enum):
    """``--objective``: what the study maximizes."""

    THROUGHPUT = "throughput"
    GPU_UTIL = "gpu-util"
    BOTH = "both"


def default_study_name(script: str | os.PathLike[str]) -> str:
    """``--study-name``'s default: one study per script."""
    return f"tftune-{Path(script).stem}"


# How a field appears in the resume command (`resume_command`).
_ALWAYS = "always"  # written with its value, default or not
_CHANGED = "changed"  # written where it differs from the default


def _cli(flag: str | None, resume: str | None = None) -> dict[str, str | None]:
    """A field's metadata: its command-line flag (None: the API only) and how the resume
    command writes it (None: not at all)."""
    return {"flag": flag, "resume": resume}


PathOption = str | os.PathLike[str] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizeOptions:
    """Everything a caller may choose about one ``tftune optimize`` run.

    Field names are the keyword arguments of ``tftune.optimize``; the comment beside
    each names its flag. The defaults are the API's; the command line passes every
    field (its ``-o`` defaults to ``tftune-tuning.html``, the API's ``html_file`` to no
    page). The first group defines the study and what each trial measures: the resume
    command repeats it, in this order.
    """

    # --trials: finished trials the study holds, or "auto" (stop once trials stop gaining)
    trials: Trials = field(default=AUTO_TRIALS, metadata=_cli("--trials", _ALWAYS))
    # --objective: "gpu-util", "throughput" or "both"; None: gpu-util where a GPU is seen
    objective: str | None = field(default=None, metadata=_cli("--objective", _CHANGED))
    # --space: a JSON file that narrows or extends the search space
    space_file: PathOption = field(default=None, metadata=_cli("--space", _CHANGED))
    # --batch-size: "N" fixes the batch size, "MIN:MAX" bounds it
    batch_size: str | None = field(default=None, metadata=_cli("--batch-size", _CHANGED))
    # --window: seconds per measured window (None: the trial's default)
    window_s: float | None = field(default=None, metadata=_cli("--window", _CHANGED))
    # --repeats: measured windows per trial (None: the trial's default)
    repeats: int | None = field(default=None, metadata=_cli("--repeats", _CHANGED))
    # --json: where the tuning JSON is written (None: not written)
    json_file: PathOption = field(default=None, metadata=_cli("--json", _CHANGED))
    # --tensorboard: a logdir for TensorBoard's HParams dashboard, a run per trial
    tensorboard: PathOption = field(default=None, metadata=_cli("--tensorboard"))
    # --data-service: also search a tf.data service cut at this dispatcher
    data_service: str | None = field(default=None, metadata=_cli("--data-service", _CHANGED))
    # --seed: the TPE sampler's seed
    seed: int = field(default=DEFAULT_SEED, metadata=_cli("--seed", _CHANGED))
    # --bounds/--no-bounds: measure the pipeline alone and the model alone first
    bounds: bool = field(default=True, metadata=_cli("--bounds", _CHANGED))
    # --guided/--no-guided: enqueue a guess derived from the script as written
    guided: bool = field(default=True, metadata=_cli("--guided", _CHANGED))
    # --rewrites/--no-rewrites: also search the pipeline rewrites that pass their check
    rewrites: bool = field(default=True, metadata=_cli("--rewrites", _CHANGED))
    # --cache-budget: the most a cache() rewrite may hold in memory ("6GB", "512MB";
    # None: a quarter of the memory available when the check runs)
    cache_budget: str | None = field(default=None, metadata=_cli("--cache-budget", _CHANGED))
    # --cache-dir: a folder for a cache() rewrite's file where it does not fit in memory
    cache_dir: PathOption = field(default=None, metadata=_cli("--cache-dir", _CHANGED))

    # Where the study lives: the resume command names both, the defaults resolved
    # (`where`). --storage: an Optuna storage URL or journal file (None: a journal file
    # in the working directory); --study-name: None is tftune-<script>.
    storage: str | None = field(default=None, metadata=_cli("--storage"))
    study_name: str | None = field(default=None, metadata=_cli("--study-name"))

    # --timeout: stop searching after this many seconds, counted from the start
    timeout_s: float | None = field(default=None, metadata=_cli("--timeout"))
    # --step-timeout: seconds to wait for the first step and each one after it
    step_timeout_s: float | None = field(default=None, metadata=_cli("--step-timeout"))
    # --best: where the winning config is written
    best_file: str | os.PathLike[str] = field(default=DEFAULT_BEST_FILE, metadata=_cli("--best"))
    # -o/--output: the HTML tuning report (None: no page)
    html_file: PathOption = field(default=None, metadata=_cli("-o"))
    # --workers: trials run at a time on this machine, in one shared study
    workers: int = field(default=1, metadata=_cli("--workers"))
    # --gpus-per-trial / --cpus-per-trial: each concurrent trial's own GPUs / CPUs
    gpus_per_trial: int | None = field(default=None, metadata=_cli("--gpus-per-trial"))
    cpus_per_trial: int | None = field(default=None, metadata=_cli("--cpus-per-trial"))
    # The API only: the final round that re-measures the leaders beside the baselines
    confirm: bool = field(default=True, metadata=_cli(None))
    # The API only: take the pipeline screen and the guided profile (they run the real
    # script); None: only where the trials run it too (no injected runner)
    profile: bool | None = field(default=None, metadata=_cli(None))

    def __post_init__(self) -> None:
        """The one check of the option values: a `ConfigError` naming the flag."""
        _check_trials(self.trials)
        if self.objective is not None and self.objective not in _OBJECTIVES:
            raise ConfigError(
                f"--objective {self.objective!r}: expected one of {', '.join(_OBJECTIVES)}"
            )
        for name in ("seed", "workers", "repeats", "gpus_per_trial", "cpus_per_trial"):
            _check_int(self, name)
        for name in ("workers", "repeats", "gpus_per_trial", "cpus_per_trial"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{_flag(name)} {value}: must be at least 1")
        for name in ("timeout_s", "window_s", "step_timeout_s"):
            _check_number(self, name)
        if self.step_timeout_s is not None and self.step_timeout_s <= 0:
            raise ConfigError(f"--step-timeout {self.step_timeout_s}: must be more than 0")
        if self.cache_budget is not None:
            parse_bytes(self.cache_budget, "--cache-budget")
        for name in ("batch_size", "data_service", "cache_budget"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{_flag(name)} {value!r}: expected a string")
        if self.batch_size:  # "" is no bound, as no flag is
            from tftune.tuner.searchspace.space_build import BatchBound

            BatchBound.parse(self.batch_size)  # a ConfigError naming --batch-size
        if self.data_service:
            from tftune.tuner.searchspace.service import check_address

            check_address(self.data_service)

    def where(self, script: str | os.PathLike[str]) -> tuple[str, str]:
        """The storage and the study name this run uses, the defaults resolved."""
        return (
            self.storage or DEFAULT_STORAGE_FILE,
            self.study_name or default_study_name(script),
        )

    def outputs(self) -> tuple[tuple[PathOption, str], ...]:
        """The files this run writes, each with its flag (None: not written)."""
        return tuple((getattr(self, n), _flag(n)) for n in ("best_file", "json_file", "html_file"))


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 10**3}
_UNITS |= {"m": 10**6, "g": 10**9, "t": 10**12}


def parse_bytes(text: object, flag: str) -> int:
    """A size as users write it ("6GB", "512MiB", "1.5G", "2000000") in bytes."""
    raw = str(text).strip().lower().replace(" ", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise ConfigError(
            f"{flag} {text!r}: expected a size such as 6GB, 512MiB or a number of bytes"
        ) from None
    if value < 1:
        raise ConfigError(f"{flag} {text!r}: must be more than 0 bytes")
    return int(value)


_OBJECTIVES = tuple(o.value for o in Objective)
_FIELDS = {f.name: f for f in dataclasses.fields(OptimizeOptions)}


def _flag(name: str) -> str:
    """The flag that sets a field (the field's name where only the API has it)."""
    flag: str | None = _FIELDS[name].metadata["flag"]
    return flag or name


def _check_trials(trials: object) -> None:
    if trials == AUTO_TRIALS:
        return
    if isinstance(trials, bool) or not isinstance(trials, int):
        raise ConfigError(f"--trials {trials!r}: expected a number or 'auto'")
    if trials < 1:
        raise ConfigError(f"--trials {trials}: must be at least 1 (or 'auto')")


def _check_int(options: OptimizeOptions, name: str) -> None:
    value = getattr(options, name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{_flag(name)} {value!r}: expected a whole number")


def _check_number(options: OptimizeOptions, name: str) -> None:
    value = getattr(options, name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(f"{_flag(name)} {value!r}: expected a number of seconds")


def with_overrides(
    options: OptimizeOptions | None, overrides: Mapping[str, Any], caller: str
) -> OptimizeOptions:
    """`options` (the defaults where None) with some fields replaced by name; a name
    that is no field is a `TypeError` naming it (and the closest field)."""
    base = options if options is not None else OptimizeOptions()
    for name in overrides:
        if name not in _FIELDS:
            close = difflib.get_close_matches(name, list(_FIELDS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{caller}() got an unknown option {name!r}{hint}")
    return dataclasses.replace(base, **overrides) if overrides else base


def resume_command(
    script: str | os.PathLike[str], script_args: Sequence[str], options: OptimizeOptions
) -> str:
    """The ``tftune optimize`` line that resumes this study: the same storage and study
    name, and every option that defines the study (the fields marked for it, in their
    order: what is searched and measured, and the tuning JSON)."""
    storage, name = options.where(script)
    argv = ["tftune", "optimize", str(script), "--storage", storage, "--study-name", name]
    for f in dataclasses.fields(options):
        value, resume = getattr(options, f.name), f.metadata["resume"]
        if resume is None or (resume == _CHANGED and value == f.default):
            continue
        flag = f.metadata["flag"]
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{flag.removeprefix('--')}")
        elif value is not None:
            argv += [flag, str(value)]
    if script_args:
        argv += ["--", *script_args]
    return shlex.join(argv)


def pick_objective(objective: str | None, gpu: bool, note: Callable[[str], None]) -> Objective:
    """``--objective``; by default GPU utilization where a GPU is visible, else throughput."""
    obj = (
        Objective(objective) if objective else (Objective.GPU_UTIL if gpu else Objective.THROUGHPUT)
    )
    if obj is not Objective.THROUGHPUT and not gpu:
        note(f"--objective {obj.value} on a CPU-only machine: utilization is the step duty cycle")
    return obj
