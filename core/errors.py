"""User-facing errors shared by every layer.

A `UserError` is a problem with what the user gave us (a path, a file, a value). The CLI
prints its message as one line and exits 1, with no traceback. Messages name the file or
value and say what is wrong.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: printed as one line, exit code 1."""

    exit_code = 1


class TraceError(UserError):
    """A trace file or logdir that cannot be read as a TensorFlow profile."""


class ConfigError(UserError):
    """A tftune config file or value that is malformed."""


class ScriptError(UserError):
    """A training script that does not exist or cannot be run."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch system preempting or cancelling the job), handled as Ctrl-C is:
    the running trial is stopped and recorded, and the command exits 143."""
