"""The `tftune` command line: thin click commands over the public API.

Each command parses its options, calls into probes/tuner/reports and writes files.
User errors (`UserError`) become one line on stderr and exit code 1, never a traceback.
Heavy imports (tensorflow, optuna, numpy) happen inside the commands, so `--help` is fast
and works without TensorFlow.
"""

from __future__ import annotations

import sys
from pathlib import Path
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


# ----------------------------------------------------------------------------- files


def generated_at() -> str:
    """The report timestamp: now in UTC, or SOURCE_DATE_EPOCH for reproducible output."""
    from tftune.reports.model import timestamp_now

    return timestamp_now()


def read_json_file(path: Path) -> Any:
    """Parse a JSON file, or fail with one line naming it."""
    import json

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno})") from None


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and `os.replace`, so a reader never sees half a file."""
    import os
    import tempfile

    target = path.resolve()
    if target.is_dir():
        raise UserError(f"{path}: is a directory, expected a file name")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- commands


@main.command("report")
@click.argument("json_file", type=click.Path(path_type=Path, dir_okay=True))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Where to write the HTML (default: next to the JSON, as <name>.html).",
)
def report(json_file: Path, output: Path | None) -> None:
    """Render the HTML report of a saved analysis or tuning JSON.

    Needs neither the trace nor TensorFlow. The kind of report is read from the JSON.
    """
    from tftune.reports import render_report_json

    data = read_json_file(json_file)
    html = render_report_json(data, generated_at=generated_at(), source=json_file.name)
    target = output if output is not None else json_file.with_suffix(".html")
    write_text_atomic(target, html)
    click.echo(str(target))
