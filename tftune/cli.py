"""The `tftune` command line: thin click commands over the public API.

Each command parses its options, calls into probes/tuner/reports and writes files.
User errors (`UserError`) become one line on stderr and exit code 1, never a traceback.
Heavy imports (tensorflow, optuna, numpy) happen inside the commands, so `--help` is fast
and works without TensorFlow.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from tftune import __version__
from tftune.probes.errors import UserError


class _Group(click.Group):
    """A click group that turns `UserError` into a clean one-line failure."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            click.echo("tftune: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tftune")
def main() -> None:
    """Find and fix what slows your tf.data input pipeline down."""
