"""The options of one tuning run: `OptimizeOptions`, built once at the front door.

``tftune optimize`` (its click command) and ``tftune.optimize(...)`` (the public API)
each build one `OptimizeOptions` and pass it down; `tuner.optimize.optimize` and its
phases read it. Each field carries its command-line `Flag` (`tuner.option_flags`: name,
help, how its value is typed): the command's click options are made from them
(tftune/_optimize_flags.py), the errors name the flag users type, and the resume
command printed on Ctrl-C (`resume_command`) is derived from the fields rather than
spelled again.

The objectives are defined here; what an option is when left out (the seed, the files,
the trial count, the windows and deadlines ``--help`` names) is `tuner.option_defaults`',
which the modules acting on them import (`tuner.study` re-exports some). At module level
this module imports only those two leaf modules of the tuner, so the command line can
import it without the study (Optuna, numpy) or TensorFlow.

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
from typing import Any

from tftune.core.errors import ConfigError
from tftune.tuner.option_defaults import (
    AGREE_WITHIN,
    AUTO_TRIALS,
    CACHE_BUDGET_SHARE,
    DEFAULT_BEST_FILE,
    DEFAULT_HTML_FILE,
    DEFAULT_REPEATS,
    DEFAULT_SEED,
    DEFAULT_STORAGE_FILE,
    DEFAULT_TRIALS,
    DEFAULT_WINDOW_S,
    EXTRA_WINDOWS,
    FIRST_STEP_S,
    FIRST_WINDOW_SHARE,
    STALL_FACTOR,
    STALL_FLOOR_S,
    Trials,
)
from tftune.tuner.option_flags import FLAG, Flag, Resume, Typed, trials_problem


class Objective(str, enum.Enum):
    """``--objective``: what the study maximizes."""

    THROUGHPUT = "throughput"
    GPU_UTIL = "gpu-util"
    BOTH = "both"


def default_study_name(script: str | os.PathLike[str]) -> str:
    """``--study-name``'s default: one study per script."""
    return f"tftune-{Path(script).stem}"


PathOption = str | os.PathLike[str] | None
_ALWAYS, _CHANGED = Resume.ALWAYS, Resume.CHANGED
_GPU_OR_NOT = f"{Objective.GPU_UTIL.value} when a GPU is visible, else {Objective.THROUGHPUT.value}"


def _cli(name: str | None, help: str = "", typed: Typed = Typed.TEXT, **more: Any) -> Any:
    """A field's metadata: its `Flag`."""
    return {FLAG: Flag(name, help, typed, **more)}


def _fraction(share: float) -> str:
    """A share as ``--help`` words it."""
    return {0.5: "half", 0.25: "a quarter"}.get(share, f"{share:.0%}")


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizeOptions:
    """Everything a caller may choose about one ``tftune optimize`` run.

    Field names are the keyword arguments of ``tftune.optimize``; each field's `Flag`
    names its flag and says what it does. The defaults are the API's; the command line
    passes every field (its ``-o`` defaults to `DEFAULT_HTML_FILE`, the API's
    ``html_file`` to no page). The first group defines the study and what each trial
    measures: the resume command repeats it, in this order.
    """

    trials: Trials = field(
        default=AUTO_TRIALS,
        metadata=_cli(
            "--trials",
            "Finished trials the study holds, or auto: stop once trials stop gaining "
            f"(at most {DEFAULT_TRIALS}).",
            Typed.TRIALS,
            resume=_ALWAYS,
            metavar="N|auto",
        ),
    )
    # None: gpu-util where a GPU is visible; a string of a value is taken as its member
    objective: Objective | None = field(
        default=None,
        metadata=_cli(
            "--objective",
            f"Default: {_GPU_OR_NOT}.",
            Typed.CHOICE,
            resume=_CHANGED,
            choices=tuple(o.value for o in Objective),
        ),
    )
    space_file: PathOption = field(
        default=None,
        metadata=_cli(
            "--space",
            "JSON file that narrows or extends the search space.",
            Typed.FILE,
            resume=_CHANGED,
        ),
    )
    batch_size: str | None = field(
        default=None,
        metadata=_cli(
            "--batch-size", "N fixes the batch size; MIN:MAX bounds it.", resume=_CHANGED
        ),
    )
    window_s: float | None = field(
        default=None,
        metadata=_cli(
            "--window",
            f"Seconds per measured window [{DEFAULT_WINDOW_S:g}; the first of several "
            f"{_fraction(FIRST_WINDOW_SHARE)} that].",
            Typed.NUMBER,
            resume=_CHANGED,
        ),
    )
    repeats: int | None = field(
        default=None,
        metadata=_cli(
            "--repeats",
            f"Measured windows per trial [{DEFAULT_REPEATS}]; up to {EXTRA_WINDOWS} more where "
            f"they disagree by over {AGREE_WITHIN:.0%}.",
            Typed.WHOLE,
            resume=_CHANGED,
        ),
    )
    json_file: PathOption = field(
        default=None,
        metadata=_cli(
            "--json", "Tuning JSON (- for standard output).", Typed.FILE, resume=_CHANGED
        ),
    )
    tensorboard: PathOption = field(
        default=None,
        metadata=_cli(
            "--tensorboard",
            "Also write every trial to TensorBoard's HParams dashboard under LOGDIR.",
            metavar="LOGDIR",
        ),
    )
    data_service: str | None = field(
        default=None,
        metadata=_cli(
            "--data-service",
            "Also search a tf.data service cut (grpc://HOST:PORT).",
            resume=_CHANGED,
        ),
    )
    seed: int = field(
        default=DEFAULT_SEED,
        metadata=_cli("--seed", "TPE sampler seed.", Typed.WHOLE, resume=_CHANGED),
    )
    bounds: bool = field(
        default=True,
        metadata=_cli(
            "--bounds",
            "Measure the pipeline alone and the model alone first.",
            Typed.SWITCH,
            resume=_CHANGED,
        ),
    )
    guided: bool = field(
        default=True,
        metadata=_cli(
            "--guided",
            "Enqueue a guess derived from the as-written trial.",
            Typed.SWITCH,
            resume=_CHANGED,
        ),
    )
    rewrites: bool = field(
        default=True,
        metadata=_cli(
            "--rewrites",
            "Also search the pipeline rewrites that pass their equivalence check (cache(), "
            "a shuffle moved above its map, one iterator across epochs).",
            Typed.SWITCH,
            resume=_CHANGED,
        ),
    )
    # A size as users write it ("6GB", "512MiB": `parse_bytes`)
    cache_budget: str | None = field(
        default=None,
        metadata=_cli(
            "--cache-budget",
            "The most a cache() rewrite may hold in memory "
            f"[{_fraction(CACHE_BUDGET_SHARE)} of what is available].",
            resume=_CHANGED,
            metavar="SIZE",
        ),
    )
    cache_dir: PathOption = field(
        default=None,
        metadata=_cli(
            "--cache-dir",
            "A folder for a cache() rewrite's file where it does not fit in memory.",
            Typed.FOLDER,
            resume=_CHANGED,
        ),
    )

    # Where the study lives: the resume command names both, the defaults resolved
    # (`where`).
    storage: str | None = field(
        default=None,
        metadata=_cli(
            "--storage", f"Optuna storage URL or journal file [./{DEFAULT_STORAGE_FILE}]."
        ),
    )
    study_name: str | None = field(
        default=None,
        metadata=_cli("--study-name", f"Resume this study [{default_study_name('<script>')}]."),
    )

    timeout_s: float | None = field(
        default=None,
        metadata=_cli("--timeout", "Stop searching after this many seconds.", Typed.NUMBER),
    )
    step_timeout_s: float | None = field(
        default=None,
        metadata=_cli(
            "--step-timeout",
            "Seconds to wait for the first training step and for each one after it "
            f"[first: {FIRST_STEP_S:g}; then {STALL_FACTOR:g}x the slowest step, "
            f"at least {STALL_FLOOR_S:g}].",
            Typed.ABOVE_ZERO,
        ),
    )
    best_file: str | os.PathLike[str] = field(
        default=DEFAULT_BEST_FILE,
        metadata=_cli("--best", "Where to write the winning config.", Typed.FILE),
    )
    html_file: PathOption = field(
        default=None,
        metadata=_cli(
            "-o",
            "HTML tuning report.",
            Typed.FILE,
            aliases=("--output",),
            command_default=DEFAULT_HTML_FILE,
        ),
    )
    workers: int = field(
        default=1,
        metadata=_cli(
            "--workers", "Trials run at a time on this machine (one shared study).", Typed.COUNT
        ),
    )
    gpus_per_trial: int | None = field(
        default=None,
        metadata=_cli(
            "--gpus-per-trial",
            "Give each concurrent trial its own K GPUs (CUDA_VISIBLE_DEVICES).",
            Typed.COUNT,
        ),
    )
    cpus_per_trial: int | None = field(
        default=None,
        metadata=_cli(
            "--cpus-per-trial", "Pin each concurrent trial to its own K CPUs.", Typed.COUNT
        ),
    )
    # The API only: the final round that re-measures the leaders beside the baselines
    confirm: bool = field(default=True, metadata=_cli(None))
    # The API only: take the pipeline screen and the guided profile (they run the real
    # script); None: only where the trials run it too (no injected runner)
    profile: bool | None = field(default=None, metadata=_cli(None))

    def __post_init__(self) -> None:
        """The one check of the option values: a `ConfigError` naming the flag."""
        problem = trials_problem(self.trials)
        if problem is not None:
            raise ConfigError(f"--trials {self.trials!r}: {problem}")
        if self.objective is not None and not isinstance(self.objective, Objective):
            if self.objective not in _OBJECTIVES:  # a string of a value is its member
                raise ConfigError(
                    f"--objective {self.objective!r}: expected one of {', '.join(_OBJECTIVES)}"
                )
            object.__setattr__(self, "objective", Objective(self.objective))
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
    return flag_of(name).name or name


def flag_of(name: str) -> Flag:
    """The command-line `Flag` of the field `name`."""
    flag: Flag = _FIELDS[name].metadata[FLAG]
    return flag


def command_line() -> dict[str, tuple[Flag, object]]:
    """Each field the command line sets, by name: its `Flag` and its default there."""
    out: dict[str, tuple[Flag, object]] = {}
    for f in _FIELDS.values():
        flag = flag_of(f.name)
        if flag.name is not None:
            out[f.name] = (flag, flag.command_default or f.default)
    return out


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
        value, flag = getattr(options, f.name), flag_of(f.name)
        if flag.resume is None or (flag.resume is _CHANGED and value == f.default):
            continue
        typed = str(flag.name)
        if isinstance(value, bool):
            argv.append(typed if value else f"--no-{typed.removeprefix('--')}")
        elif isinstance(value, Objective):
            argv += [typed, value.value]
        elif value is not None:
            argv += [typed, str(value)]
    if script_args:
        argv += ["--", *script_args]
    return shlex.join(argv)


def pick_objective(
    objective: Objective | None, gpu: bool, note: Callable[[str], None]
) -> Objective:
    """``--objective``; by default GPU utilization where a GPU is visible, else throughput."""
    obj = objective or (Objective.GPU_UTIL if gpu else Objective.THROUGHPUT)
    if obj is not Objective.THROUGHPUT and not gpu:
        note(f"--objective {obj.value} on a CPU-only machine: utilization is the step duty cycle")
    return obj
