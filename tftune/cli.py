"""The `tftune` command line: thin click commands over the public API.

Each command parses its options, calls into probes/tuner/reports and writes files.
User errors (`UserError`) become one line on stderr and exit code 1, never a traceback.
Heavy imports (tensorflow, optuna, numpy) happen inside the commands, so `--help` is fast
and works without TensorFlow.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from tftune import __version__
from tftune._data_service_cli import data_service
from tftune._debug_log import VERBOSE, capture
from tftune._optimize_flags import field_option, optimize_options
from tftune.core.errors import Terminated, UserError
from tftune.core.userfiles import STDOUT, check_writable, json_text, read_json, write_output
from tftune.tuner.option_defaults import PROFILE_LOGDIR, PROFILE_STEPS


class _Group(click.Group):
    """A click group that turns `UserError` into a clean one-line failure."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            raise click.ClickException(str(exc)) from None
        except Terminated:
            click.echo("tftune: terminated", err=True)
            sys.exit(143)
        except KeyboardInterrupt:
            click.echo("tftune: interrupted", err=True)
            sys.exit(130)


def use_color(stream: TextIO) -> bool:
    """ANSI colour only on a terminal, and never under NO_COLOR (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def human_stream(quiet: bool, *outputs: object) -> TextIO | None:
    """Where a command's words go: nowhere under --quiet, standard error when one of its
    documents takes standard output (`-`), else standard output."""
    if quiet:
        return None
    return sys.stderr if any(str(o) == STDOUT for o in outputs if o is not None) else sys.stdout


def say(stream: TextIO | None, text: str) -> None:
    if stream is not None:
        click.echo(text, file=stream)


QUIET = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tftune")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Find and fix what slows your tf.data input pipeline down."""
    # What other packages log, warn or leave unraised goes to the debug log, which
    # --verbose shows: never between tftune's lines (tftune/_debug_log.py).
    ctx.call_on_close(capture())


# The script's own options go after `--`: an unknown option before it is a usage error
# with click's suggestion ("No such option: --trails. Did you mean --trials?"), not an
# argument the script then rejects.
_SCRIPT_CONTEXT: dict[str, Any] = {}


@main.command(context_settings=_SCRIPT_CONTEXT)
@click.option(
    "--config", "config_path", metavar="FILE", help="Config JSON [none: the script as written]."
)
@QUIET
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def run(config_path: str | None, quiet: bool, script: str, script_args: tuple[str, ...]) -> None:
    """Run SCRIPT with a tuned config applied: it just trains, faster.

    \b
    tftune run --config tftune-best.json train.py -- --epochs 3
    Arguments after `--` go to the script. Same as `tftune.apply(FILE)` in the script.
    Without --config the script runs as written under tftune's hooks.
    """
    from tftune.tuner.output.repro import environment_differences, mismatch_warning
    from tftune.tuner.searchspace.config import Config, load_config
    from tftune.tuner.trial import check_script, run_script

    config = load_config(config_path) if config_path else Config()
    check_script(script)
    diffs = environment_differences(config.meta)
    if diffs and config_path and not quiet:
        click.echo(f"tftune: {mismatch_warning(config_path, diffs)}", err=True)
    sys.exit(run_script(script, script_args, config))


def _step_range(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, int]:
    start, sep, stop = value.partition(":")
    if not (sep and start.isdigit() and stop.isdigit() and int(start) < int(stop)):
        raise click.BadParameter(
            f"{value!r} is not START:STOP with START < STOP, e.g. {PROFILE_STEPS}"
        )
    return int(start), int(stop)


@main.command(context_settings=_SCRIPT_CONTEXT)
@click.argument("script")
@click.option(
    "--steps",
    default=PROFILE_STEPS,
    show_default=True,
    callback=_step_range,
    help="Profile steps START (inclusive) to STOP (exclusive).",
)
@click.option(
    "--logdir",
    default=PROFILE_LOGDIR,
    show_default=True,
    metavar="DIR",
    help="TensorBoard log directory to write the trace to.",
)
@click.option("-o", "old_logdir", hidden=True, help="Deprecated: --logdir.")
@QUIET
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    help="Apply this config while profiling.",
)
@click.option("--timeout", type=float, metavar="S", help="Give up after S seconds.")
@field_option("step_timeout_s")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def profile(
    script: str,
    steps: tuple[int, int],
    logdir: str,
    old_logdir: str | None,
    quiet: bool,
    config_path: str | None,
    timeout: float | None,
    step_timeout_s: float | None,
    script_args: tuple[str, ...],
) -> None:
    """Capture a TensorBoard profile of SCRIPT, unmodified, with step markers.

    \b
    tftune profile train.py --steps 20:40 --logdir logdir/ -- --epochs 1
    then: tftune analyze logdir/
    """
    from tftune.core.errors import ScriptError
    from tftune.tuner.searchspace.config import load_config
    from tftune.tuner.trial import profile_script

    if old_logdir is not None:  # -o is a file everywhere else
        click.echo("tftune: profile's -o is deprecated: use --logdir", err=True)
        logdir = old_logdir
    words = human_stream(quiet)

    config = load_config(config_path) if config_path else None
    result = profile_script(
        script,
        script_args,
        steps[0],
        steps[1],
        logdir,
        config=config,
        timeout_s=timeout,
        step_timeout_s=step_timeout_s,
    )
    if not result.captured:
        raise ScriptError(f"{script}: no profile captured: {result.reason}")
    first, last = result.steps or (steps[0], steps[1] - 1)
    ended = " (the script ended first)" if last < steps[1] - 1 else ""
    say(words, f"profile of training steps {first}-{last}{ended} written to {result.logdir}")
    for seen in result.streams:
        say(words, f"  {seen.role}: the dataset {seen.where()} ({seen.elements:,} elements)")
    stall = result.training.stall if result.training is not None else None
    if stall is not None:
        say(words, f"step clock: {stall.sentence}")
    if result.note is not None:
        say(words, f"step clock: {result.note}")
    say(words, f"next: tftune analyze {logdir}")
    # TensorFlow no longer installs TensorBoard; XProf's server comes with tftune.
    say(
        words,
        f"view it in TensorBoard's Profile tab: tensorboard --logdir {logdir} "
        f"(pip install tensorboard), or in XProf: xprof server --logdir {logdir}",
    )


@main.command(context_settings=_SCRIPT_CONTEXT)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@optimize_options
@QUIET
@VERBOSE
def optimize(script: str, script_args: tuple[str, ...], quiet: bool, **opts: Any) -> None:
    """Search tf.data knobs for SCRIPT (unmodified) and emit the fastest config.

    Arguments after `--` go to the script: tftune optimize train.py -- --epochs 1
    """
    from tftune._optimize_cli import run_optimize_command
    from tftune.tuner.options import OptimizeOptions

    # The options' destinations are OptimizeOptions' field names: built once, here.
    options = OptimizeOptions(**opts)
    words = human_stream(quiet, options.json_file, options.html_file)
    run_optimize_command(script, list(script_args), options, words)


main.add_command(data_service)


@main.command("status")
@field_option("storage")
@click.option("--study-name", help="The study [the storage's only study].")
@click.option(
    "--json",
    "json_out",
    is_flag=False,
    flag_value=STDOUT,
    type=click.Path(dir_okay=False),
    metavar="[FILE]",
    help="Write the status as JSON to FILE (- or no FILE: standard output).",
)
@QUIET
def status(storage: str | None, study_name: str | None, json_out: str | None, quiet: bool) -> None:
    """Progress, running trials and the best result of a study, across all its workers.

    \b
    tftune status --storage postgresql://user@db/tftune --study-name resnet
    Reads the storage only: no TensorFlow, no script.
    """
    import json

    from tftune.tuner.study.status import render_status, study_status

    if json_out is not None:
        check_writable(json_out, "--json")
    s = study_status(storage, study_name)
    if json_out is not None:
        write_output(json_out, json.dumps(s.to_json(), indent=2) + "\n")
    say(human_stream(quiet, json_out), render_status(s))


@main.command("report")
@click.argument("source")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Where to write the HTML, - for standard output (default: next to the JSON, as "
    "<name>.html).",
)
@QUIET
@VERBOSE
def report(source: str, output: Path | None, quiet: bool) -> None:
    """Render the HTML report of a saved analysis or tuning JSON (a path or a URL).

    Needs neither the trace nor TensorFlow. The kind of report is read from the JSON.
    """
    from tftune.probes.traces.remote import is_url, read_json_url
    from tftune.reports import render_report_json, timestamp_now

    remote = is_url(source)
    json_file = Path(source.rsplit("/", 1)[-1] if remote else source)
    target = output if output is not None else json_file.with_suffix(".html")
    check_writable(target, "-o")
    if not remote and json_file.is_dir():
        raise UserError(
            f"{json_file}: is a directory, expected a saved analysis or tuning JSON (for a "
            f"profiler logdir: tftune analyze {json_file} -o report.html)"
        )
    if json_file.name.endswith((".pb", ".pb.gz")):
        raise UserError(
            f"{source}: a profiler trace, not a saved JSON: run tftune analyze "
            f"{source} -o report.html (tftune report renders an analysis or tuning JSON)"
        )
    data = read_json_url(source) if remote else read_json(json_file)
    html = render_report_json(data, generated_at=timestamp_now(), source=json_file.name)
    write_output(target, html)
    if str(target) != STDOUT:
        say(human_stream(quiet), str(target))


@main.command("analyze")
@click.argument("logdir")
@click.option("--run", "run_name", help="Run to analyze (default: the newest).")
@click.option("--host", help="Host to analyze (default: the one with the most tf.data work).")
@click.option("--list", "list_runs", is_flag=True, help="List the runs and hosts, then exit.")
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    help="Write the analysis JSON here (- for standard output).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write the HTML report here (- for standard output).",
)
@QUIET
@click.option(
    "--xprof",
    is_flag=True,
    help="Also run XProf's own input-pipeline analyzer: its step time and input share "
    "beside tftune's.",
)
@VERBOSE
def analyze(
    logdir: str,
    run_name: str | None,
    host: str | None,
    list_runs: bool,
    json_out: Path | None,
    output: Path | None,
    quiet: bool,
    xprof: bool,
) -> None:
    """Name the input-pipeline bottleneck in a profiler LOGDIR, and the fix."""
    import shutil

    from tftune import analyze as run_analysis
    from tftune.probes.traces.locate import list_runs as find_runs
    from tftune.reports.analysis_terminal import render

    if json_out is not None and output is not None and str(json_out) == str(output) == STDOUT:
        raise UserError("--json - and -o -: only one of them can go to standard output")
    for path, flag in ((json_out, "--json"), (output, "-o")):
        if path is not None:  # fail now, not after the analysis
            check_writable(path, flag)
    if list_runs:
        from tftune.probes.traces.remote import is_url, url_of
        from tftune.probes.traces.remote import list_runs as remote_runs

        remote = is_url(logdir)
        for info in remote_runs(logdir)[1] if remote else find_runs(Path(logdir)):
            where = url_of(logdir, info.path) if remote else info.path
            click.echo(f"{info.name}  {info.size_bytes / 1e6:.1f} MB  {where}")
            for h in info.hosts:
                click.echo(f"    {h.host}  {h.size_bytes / 1e6:.2f} MB")
        return
    # The terminal and the page render the document made here; the JSON is its to_json
    # (its step table held column by column, as it is written fastest).
    document = run_analysis(logdir, run=run_name, host=host, xprof=xprof).document()
    data = document.json_to_write()
    words = human_stream(quiet, json_out, output)
    if words is not None:
        width = min(shutil.get_terminal_size((100, 24)).columns, 140)
        click.echo(render(document, width=width, color=use_color(words)), nl=False, file=words)
    if json_out is not None:
        write_output(json_out, json_text(data))
        if str(json_out) != STDOUT:
            say(words, f"analysis JSON: {json_out}")
    if output is not None:
        from tftune.reports import timestamp_now
        from tftune.reports.analysis_html import render_analysis_html
        from tftune.reports.analysis_model import build_analysis_model

        model = build_analysis_model(
            document, generated_at=timestamp_now(), source=str(logdir), data=data
        )
        html = render_analysis_html(model)
        write_output(output, html)
        if str(output) != STDOUT:
            say(words, f"report: {output}")
