"""How an option appears on the command line: its `Flag`.

Each field of `tuner.options.OptimizeOptions` carries one as its metadata: the flag's
name (the one the errors name), what ``--help`` says, how its value is typed (`Typed`),
its place in the resume command (`Resume`) and, where the command line's default is not
the API's, that one. ``tftune optimize``'s click options are made from them
(tftune/_optimize_flags.py), so a default or a help text is written once. ``--trials``'
text form is read here too (`parse_trials`), with the check the options type runs.
Imports nothing of the tuner but its defaults: the command line reads it without the tuner.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tftune.tuner.option_defaults import AUTO_TRIALS, Trials

# The key of a field's `Flag` in its metadata.
FLAG = "flag"


class Typed(enum.Enum):
    """How a flag's value is typed on the command line (the command gives each its click
    type: tftune/_optimize_flags.py)."""

    TEXT = "text"
    NUMBER = "number"
    ABOVE_ZERO = "a number above 0"
    WHOLE = "a whole number"
    COUNT = "a whole number, at least 1"
    FILE = "a path that is no folder"
    FOLDER = "a path that is no file"
    SWITCH = "--name/--no-name"
    CHOICE = "one of the flag's choices"
    TRIALS = "a count or auto (`parse_trials`)"


class Resume(enum.Enum):
    """How the resume command (`tuner.options.resume_command`) writes a field."""

    ALWAYS = "always"  # with its value, default or not
    CHANGED = "changed"  # where it differs from the default


@dataclass(frozen=True, slots=True)
class Flag:
    """How a field appears on the command line. `name` is the flag the errors name (None:
    the API only); `help` is what ``--help`` says; the default is the field's, unless
    `command_default` gives the command line its own."""

    name: str | None
    help: str = ""
    typed: Typed = Typed.TEXT
    resume: Resume | None = None  # None: the resume command leaves it out
    metavar: str | None = None
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    command_default: str | None = None


def trials_problem(trials: object) -> str | None:
    """Why `trials` is no ``--trials`` value (None: it is one)."""
    if trials == AUTO_TRIALS:
        return None
    if isinstance(trials, bool) or not isinstance(trials, int):
        return "expected a number or 'auto'"
    return "must be at least 1 (or 'auto')" if trials < 1 else None


def parse_trials(text: str | int) -> Trials:
    """``--trials`` as typed: a number of at least 1, or auto. A `ValueError` says why
    not (click reports it as an invalid value of the option)."""
    if text == AUTO_TRIALS:
        return AUTO_TRIALS
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number or 'auto'") from None
    problem = trials_problem(n)
    if problem is not None:
        raise ValueError(f"{n} {problem}")
    return n
