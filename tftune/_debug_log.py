"""The debug log: what the packages tftune uses log, warn or leave unraised (gcsfs, s3fs,
botocore, aiohttp, asyncio, fsspec, TensorBoard's protos), kept off the terminal.

Python prints a library's log record of WARNING or above, with its traceback, on standard
error where nobody configured logging (its "last resort" handler); `warnings.warn` and an
exception raised in a finalizer print too. A command's words and its one-line error would
be lost among them (gcsfs printed 155 lines, 6 tracebacks, for one closed emulator). Every
command line run goes through `capture`: the records are dropped, or with ``--verbose``
written to standard error, INFO and above, each line marked ``debug:``. Below INFO,
botocore logs whole signed requests, session tokens included: never shown.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import click

FORMAT = "debug: %(name)s: %(levelname)s: %(message)s"


class _Log(logging.Handler):
    """The debug log's one handler on the root logger: drops, or writes to stderr."""

    def __init__(self) -> None:
        super().__init__(HIDDEN)
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


HIDDEN = logging.CRITICAL + 1  # the handler's level while the log is not shown


def capture() -> Callable[[], None]:
    """Route the third-party log, warnings and unraisable exceptions into the debug log
    (module docstring), not shown; returns what ends the command's part of it. The
    handler and the hook stay, hidden, for the interpreter's exit, where finalizers log
    (an aiohttp session left open)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _Log)), None)
    if handler is None:
        handler = _Log()
        root.addHandler(handler)
    level = root.level
    logging.captureWarnings(True)
    sys.unraisablehook = _unraisable

    def end() -> None:
        handler.setLevel(HIDDEN)
        root.setLevel(level)
        logging.captureWarnings(False)

    return end


def show() -> None:
    """Show the debug log on standard error from now on (``--verbose``)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, _Log):
            handler.setLevel(logging.INFO)
    root.setLevel(min(root.getEffectiveLevel(), logging.INFO))


def _unraisable(info: Any) -> None:
    # An exception in a finalizer (an aiohttp session closed at exit): a warning, logged.
    name = getattr(info.exc_type, "__name__", "exception")
    logging.getLogger("unraisable").warning("%s in %r", name, info.object, exc_info=info.exc_value)


def _set_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        show()


VERBOSE = click.option(
    "--verbose",
    is_flag=True,
    expose_value=False,
    callback=_set_verbose,
    help="Also show the debug log: what the storage and other packages logged or warned.",
)
