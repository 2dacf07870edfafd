"""The command line of ``tftune optimize``: its options, in the order ``--help`` lists
them. Each option's destination is an `OptimizeOptions` field (tuner/options.py): the
command builds one from them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

STEP_TIMEOUT_HELP = (
    "Seconds to wait for the first training step and for each one after it "
    "[first: 300; then 20x the slowest step, at least 60]."
)


def trials(value: str | int) -> str | int:
    """``--trials``: a positive number, or ``auto`` (click reports a ValueError as an
    invalid value of the option)."""
    if isinstance(value, int) or value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number or 'auto'") from None
    if n < 1:
        raise ValueError(f"{n} must be at least 1 (or 'auto')")
    return n


_OPTIONS = (
    click.option(
        "--trials",
        default="auto",
        show_default=True,
        type=trials,
        metavar="N|auto",
        help=(
            "Finished trials the study holds, or auto: stop once trials stop gaining (at most 20)."
        ),
    ),
    click.option(
        "--timeout", "timeout_s", type=float, help="Stop searching after this many seconds."
    ),
    click.option(
        "--objective",
        type=click.Choice(["gpu-util", "throughput", "both"]),
        help="Default: gpu-util when a GPU is visible, else throughput.",
    ),
    click.option("--storage", help="Optuna storage URL or journal file [./tftune-study.journal]."),
    click.option("--study-name", help="Resume this study [tftune-<script>]."),
    click.option("--seed", default=0, show_default=True, help="TPE sampler seed."),
    click.option(
        "--guided/--no-guided",
        default=True,
        show_default=True,
        help="Enqueue a guess derived from the as-written trial.",
    ),
    click.option(
        "--rewrites/--no-rewrites",
        default=True,
        show_default=True,
        help=(
            "Also search the pipeline rewrites that pass their equivalence check (cache(), "
            "a shuffle moved above its map, one iterator across epochs)."
        ),
    ),
    click.option(
        "--cache-budget",
        metavar="SIZE",
        help="The most a cache() rewrite may hold in memory [a quarter of what is available].",
    ),
    click.option(
        "--cache-dir",
        type=click.Path(file_okay=False),
        help="A folder for a cache() rewrite's file where it does not fit in memory.",
    ),
    click.option(
        "--space",
        "space_file",
        type=click.Path(dir_okay=False),
        help="JSON file that narrows or extends the search space.",
    ),
    click.option("--batch-size", help="N fixes the batch size; MIN:MAX bounds it."),
    click.option(
        "--best",
        "best_file",
        default="tftune-best.json",
        show_default=True,
        type=click.Path(dir_okay=False),
        help="Where to write the winning config.",
    ),
    click.option(
        "--json",
        "json_file",
        type=click.Path(dir_okay=False),
        help="Tuning JSON (- for standard output).",
    ),
    click.option(
        "-o",
        "--output",
        "html_file",
        default="tftune-tuning.html",
        show_default=True,
        type=click.Path(dir_okay=False),
        help="HTML tuning report.",
    ),
    click.option(
        "--window",
        "window_s",
        type=float,
        help="Seconds per measured window [3; the first of several half that].",
    ),
    click.option(
        "--repeats",
        type=int,
        help="Measured windows per trial [2]; up to 2 more where they disagree by over 10%.",
    ),
    click.option(
        "--step-timeout",
        "step_timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        help=STEP_TIMEOUT_HELP,
    ),
    click.option(
        "--bounds/--no-bounds",
        default=True,
        show_default=True,
        help="Measure the pipeline alone and the model alone first.",
    ),
    click.option(
        "--workers",
        default=1,
        show_default=True,
        type=click.IntRange(min=1),
        help="Trials run at a time on this machine (one shared study).",
    ),
    click.option(
        "--gpus-per-trial",
        type=click.IntRange(min=1),
        help="Give each concurrent trial its own K GPUs (CUDA_VISIBLE_DEVICES).",
    ),
    click.option(
        "--cpus-per-trial",
        type=click.IntRange(min=1),
        help="Pin each concurrent trial to its own K CPUs.",
    ),
    click.option("--data-service", help="Also search a tf.data service cut (grpc://HOST:PORT)."),
    click.option(
        "--tensorboard",
        metavar="LOGDIR",
        help="Also write every trial to TensorBoard's HParams dashboard under LOGDIR.",
    ),
)


def optimize_options(command: F) -> F:
    """`command` with the options of ``tftune optimize``."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
