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


_SCRIPT_CONTEXT = {"ignore_unknown_options": True}


@main.command(context_settings=_SCRIPT_CONTEXT)
@click.option("--config", "config_path", required=True, metavar="FILE", help="Config JSON.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def run(config_path: str, script: str, script_args: tuple[str, ...]) -> None:
    """Run SCRIPT with a tuned config applied: it just trains, faster.

    \b
    tftune run --config tftune-best.json train.py -- --epochs 3
    Arguments after `--` go to the script. Same as `tftune.apply(FILE)` in the script.
    """
    from tftune.tuner.config import load_config
    from tftune.tuner.runner import check_script, run_script

    config = load_config(config_path)
    check_script(script)
    sys.exit(run_script(script, script_args, config))


def _step_range(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, int]:
    start, sep, stop = value.partition(":")
    if not (sep and start.isdigit() and stop.isdigit() and int(start) < int(stop)):
        raise click.BadParameter(f"{value!r} is not START:STOP with START < STOP, e.g. 20:40")
    return int(start), int(stop)


@main.command(context_settings=_SCRIPT_CONTEXT)
@click.argument("script")
@click.option(
    "--steps",
    default="20:40",
    show_default=True,
    callback=_step_range,
    help="Profile steps START (inclusive) to STOP (exclusive).",
)
@click.option(
    "-o",
    "--logdir",
    default="tftune-profile",
    show_default=True,
    metavar="DIR",
    help="TensorBoard log directory to write the trace to.",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="FILE",
    help="Apply this config while profiling.",
)
@click.option("--timeout", type=float, default=None, metavar="S", help="Give up after S seconds.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def profile(
    script: str,
    steps: tuple[int, int],
    logdir: str,
    config_path: str | None,
    timeout: float | None,
    script_args: tuple[str, ...],
) -> None:
    """Capture a TensorBoard profile of SCRIPT, unmodified, with step markers.

    \b
    tftune profile train.py --steps 20:40 -o logdir/ -- --epochs 1
    then: tftune analyze logdir/
    """
    from tftune.probes.errors import ScriptError
    from tftune.tuner.config import load_config
    from tftune.tuner.runner import profile_script

    config = load_config(config_path) if config_path else None
    result = profile_script(
        script, script_args, steps[0], steps[1], logdir, config=config, timeout_s=timeout
    )
    if not result.captured:
        raise ScriptError(f"{script}: no profile captured: {result.reason}")
    first, last = result.steps or (steps[0], steps[1] - 1)
    ended = " (the script ended first)" if last < steps[1] - 1 else ""
    click.echo(f"profile of steps {first}-{last}{ended} written to {result.logdir}")
    click.echo(f"next: tftune analyze {logdir}")
