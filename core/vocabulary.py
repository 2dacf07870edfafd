"""The words tftune speaks, defined once: categories (and which trace events are
host-to-device copies), shares and "not measured" in words, input-bound bands, stage names,
trial states, a tuning run's phases and knob values. The analysis, the reports and the
tuner import them from here, so a user never reads two words for one thing (`tftune
analyze` and `tftune optimize` once called one 7% input wait "moderately input-bound" and
"not the input pipeline").

Pure Python: no TensorFlow, no NumPy.
"""

from __future__ import annotations

import enum
import re

# ---- categories -------------------------------------------------------------------------
# Where step time goes (the analysis JSON's `breakdown`), in the order a reader expects:
# input first, then the device. `device_to_device` is XProf's device-to-device copies and
# collectives.
BREAKDOWN_CATEGORIES = (
    "input_wait",
    "host_to_device",
    "device_compute",
    "host_compute",
    "kernel_launch",
    "compilation",
    "output",
    "device_to_device",
    "other",
)
# Work the training loop does on the consumer thread between the iterator's GetNext and
# the step function (Python preprocessing, NumPy conversion, eager ops): not tf.data's
# and not the step's, so it is a bottleneck of its own, never part of the input wait.
TRAINING_LOOP = "training_loop"
# A step run op by op from Python (no tf.function around it): each op is dispatched
# eagerly, and the Python between them is step time too.
EAGER_STEP = "eager_step"
# What a bottleneck is (the analysis JSON's `bottlenecks[].category`).
BOTTLENECK_CATEGORIES = (
    "io",
    "tokenization",
    "python",
    "preprocessing",
    "host_to_device",
    "device_compute",
    "host_compute",
    TRAINING_LOOP,
    EAGER_STEP,
    "other",
)
CATEGORY_LABELS = {
    "input_wait": "Input wait",
    "host_to_device": "Host → device",
    "device_compute": "Device compute",
    "host_compute": "Host compute",
    "kernel_launch": "Kernel launch",
    "compilation": "Compilation",
    "output": "Output",
    "device_to_device": "Device → device",
    "other": "Other",
    "io": "I/O",
    "tokenization": "Tokenization",
    "python": "Python",
    "preprocessing": "Preprocessing",
    TRAINING_LOOP: "Work in the training loop outside tf.data",
    EAGER_STEP: "Step run eagerly, op by op from Python",
}
CATEGORY_COLORS = {
    "input_wait": "#dc4c2c",
    "host_to_device": "#e69b00",
    "device_compute": "#2563eb",
    "host_compute": "#0f9d76",
    "kernel_launch": "#7c3aed",
    "compilation": "#a16207",
    "output": "#64748b",
    "device_to_device": "#0369a1",
    "other": "#9ca3af",
    "io": "#b45309",
    "tokenization": "#be185d",
    "python": "#c2410c",
    "preprocessing": "#0e7490",
    TRAINING_LOOP: "#9333ea",
    EAGER_STEP: "#db2777",
}


def category_label(category: str) -> str:
    """A category as a reader sees it ("Host → device"); unknown ones as given."""
    return CATEGORY_LABELS.get(category, category.replace("_", " ").capitalize())


# A copy from the host to a device, by its event's name: the CUPTI collector's
# ("MemcpyH2D"), XProf's parser's ("MemcpyHToD") and the CUDA API's ("cuMemcpyHtoDAsync").
# The breakdown counts these as `host_to_device`; the timeline colours them so.
_HOST_TO_DEVICE = re.compile(r"^(memcpyh2d|memcpyhtod|cumemcpyhtod|cudamemcpyhtod)", re.I)


def is_host_to_device(name: str) -> bool:
    """Whether a trace event named `name` copies from the host to a device."""
    return _HOST_TO_DEVICE.match(name) is not None


# ---- shares in words ---------------------------------------------------------------------
# A share of step time (0..1) as every report prints it: whole percent, except that a
# share above zero but under 1% reads "under 1%" (never "0%" for time that was spent).
UNDER_ONE_PERCENT = "under 1%"
# What every report prints for a figure that was not measured (never 0).
NOT_MEASURED = "not measured"


def percent(share: float, compact: bool = False) -> str:
    """`share` (0..1) in whole percent; above zero and under 1%: "under 1%" ("<1%" where
    `compact`, for table cells)."""
    if 0 < share < 0.01:
        return "<1%" if compact else UNDER_ONE_PERCENT
    return f"{100 * share:.0f}%"


# A preamble (the script's seconds before its first training step) this long is said,
# with what it costs the tuning: every run pays it.
PREAMBLE_SAID_S = 5.0

# ---- input-bound bands ------------------------------------------------------------------
# XProf's bands for the share of step time spent waiting for input. One set, for
# `tftune analyze`, the reports and `tftune optimize` alike.
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05


class Band(str, enum.Enum):
    """How input-bound a run is."""

    HIGH = "high"
    MODERATE = "moderate"
    LOW = "low"

    @property
    def input_bound(self) -> bool:
        return self is not Band.LOW

    @property
    def words(self) -> str:
        return {
            Band.HIGH: "highly input-bound",
            Band.MODERATE: "moderately input-bound",
            Band.LOW: "not input-bound",
        }[self]


def input_band(share: float) -> Band:
    """The band of an input-wait share of step time (0..1)."""
    if share >= HIGHLY_INPUT_BOUND:
        return Band.HIGH
    if share >= MODERATELY_INPUT_BOUND:
        return Band.MODERATE
    return Band.LOW


# ---- tf.data stages ---------------------------------------------------------------------
STAGE_SEPARATOR = "::"


def stage_kind(name: str) -> str:
    """A stage's own kind, the last part of its iterator path:
    ``Iterator::Root::Prefetch::ParallelMapV2`` → ``ParallelMapV2``."""
    return name.rsplit(STAGE_SEPARATOR, 1)[-1]


def stage_parent(name: str) -> str | None:
    """The iterator path of a stage's consumer, None for the root."""
    return name.rsplit(STAGE_SEPARATOR, 1)[0] if name.count(STAGE_SEPARATOR) > 1 else None


def stage_short_name(name: str) -> str:
    """A stage as a reader sees it in a narrow column: its kind and its consumer's
    (``Prefetch::ParallelMapV2``), enough to tell two maps apart."""
    parts = name.split(STAGE_SEPARATOR)
    return STAGE_SEPARATOR.join(parts[-2:]) if len(parts) > 2 else name


# ---- trials -----------------------------------------------------------------------------
# A knob's value where tftune leaves it as the script wrote it: in words (`tftune status`,
# the reports, TensorBoard's and optuna-dashboard's knob values), and in the tuning JSON's
# space and trials (`tftune.tuner.searchspace.space.format_value`), which keeps its word.
AS_WRITTEN_WORD = "as written"
KNOB_AS_WRITTEN_JSON = "default"
_KNOB_VALUE_WORDS = {KNOB_AS_WRITTEN_JSON: AS_WRITTEN_WORD, "True": "on", "False": "off"}


def knob_value_words(value: str) -> str:
    """A knob's JSON value as the reports say it: "default" → "as written"."""
    return _KNOB_VALUE_WORDS.get(value, value)


class TrialState(str, enum.Enum):
    """How one trial ended: the runner's result, the study's record and the reports say it
    with these words."""

    COMPLETE = "complete"
    PRUNED = "pruned"
    FAILED = "failed"


# How a stream was declared training where nothing updated weights (a pipeline benchmark):
# the busiest dataset loop stands in (`tftune.tuner.child.roles`).
FALLBACK_HOW = "no optimizer update seen: the busiest dataset loop"


class Phase(str, enum.Enum):
    """Where a tuning run is, as its progress shows it (`tftune.optimize`'s ``on_phase``)."""

    DISCOVERY = "discovery"  # the training loop, the call sites, the rewrites' checks
    SCREEN = "screen"  # the bounds, the pipeline screen, the guided profile
    SEARCH = "search"  # the study's trials
    FINAL_ROUND = "final round"  # the winner again beside the baselines; the learning check


# Optuna's own state names, as a study's trial history (the tuning JSON's `history`) holds
# them, and what tftune calls each.
OPTUNA_STATES = {
    "COMPLETE": TrialState.COMPLETE,
    "PRUNED": TrialState.PRUNED,
    "FAIL": TrialState.FAILED,
}


# ---- input categories -------------------------------------------------------------------
# What the consumer's input wait was spent on (the analysis JSON's `input_categories`), in
# the order the analysis ranks them; `other` is stage overhead outside functions.
INPUT_CATEGORIES = ("io", "tokenization", "python", "preprocessing", "other")
