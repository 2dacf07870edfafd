"""The command line of ``tftune optimize``, made from `OptimizeOptions`' fields.

Each field's `Flag` (tuner/option_flags.py) gives its option's name, help text and how
its value is typed; its default is the field's (or the flag's `command_default`); its
destination is the field's name, so the command builds the options with
``OptimizeOptions(**opts)``. Nothing here spells a default or a help text again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from tftune.tuner.option_flags import Flag, Typed, parse_trials
from tftune.tuner.options import command_line

F = TypeVar("F", bound=Callable[..., Any])

# The order ``tftune optimize --help`` lists the options in (the fields' own order is the
# resume command's).
HELP_ORDER = (
    "trials",
    "timeout_s",
    "objective",
    "storage",
    "study_name",
    "seed",
    "guided",
    "rewrites",
    "cache_budget",
    "cache_dir",
    "space_file",
    "batch_size",
    "best_file",
    "json_file",
    "html_file",
    "window_s",
    "repeats",
    "step_timeout_s",
    "bounds",
    "workers",
    "gpus_per_trial",
    "cpus_per_trial",
    "data_service",
    "tensorboard",
)

_TYPES: dict[Typed, Any] = {
    Typed.TEXT: None,
    Typed.SWITCH: None,
    Typed.NUMBER: float,
    Typed.ABOVE_ZERO: click.FloatRange(min=0, min_open=True),
    Typed.WHOLE: int,
    Typed.COUNT: click.IntRange(min=1),
    Typed.FILE: click.Path(dir_okay=False),
    Typed.FOLDER: click.Path(file_okay=False),
    Typed.TRIALS: parse_trials,
}


def _click_type(flag: Flag) -> Any:
    if flag.typed is Typed.CHOICE:
        return click.Choice(flag.choices)
    return _TYPES[flag.typed]


def field_option(name: str) -> Callable[[F], F]:
    """The click option of the `OptimizeOptions` field `name`, its destination the field's
    name: ``tftune optimize`` has one per field, and another command that takes the same
    option (``profile --step-timeout``, ``status --storage``) uses it too."""
    flag, default = command_line()[name]
    assert flag.name is not None  # command_line() holds the fields that have a flag
    decls = [flag.name, *flag.aliases]
    if flag.typed is Typed.SWITCH:
        decls = [f"{flag.name}/--no-{flag.name.removeprefix('--')}"]
    extra: dict[str, Any] = {}
    if default is not None:
        extra.update(default=default, show_default=True)
    if flag.metavar is not None:
        extra["metavar"] = flag.metavar
    return click.option(*decls, name, type=_click_type(flag), help=flag.help, **extra)


def optimize_options(command: F) -> F:
    """`command` with the options of ``tftune optimize``, in `HELP_ORDER`."""
    for name in reversed(HELP_ORDER):
        command = field_option(name)(command)
    return command
