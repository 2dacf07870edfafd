"""Emitting the winner of `tftune optimize`.

- `best_config_with_metrics`: the winning `Config` with what was measured (and its noise)
  in ``meta``; `tftune.tuner.config.save_config` writes it atomically.
- `source_diff`: a unified diff against the user's own lines for the call-site knobs, and
  a code snippet for the global ones (thread pool, final prefetch, mixed precision).
- `run_command`: the exact ``tftune run --config ...`` line.
- `tuning_json`: the tuning JSON (docs/ARCHITECTURE.md), and `write_json_atomic`.
- `render_table`, `trial_line`: the terminal table (with the warning when the script
  crashes on its own: `StudyOutcome.instability`) and the per-trial status lines (a
  failed trial's crash in a few lines: `crashes.CrashSummary.key_lines`).
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import platform
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tftune.core.errors import ConfigError
from tftune.core.userfiles import write_text_atomic
from tftune.tuner._patch import OP_KNOBS
from tftune.tuner.bounds import Ceiling
from tftune.tuner.config import AUTOTUNE, SITE_KNOBS, Config, SiteConfig
from tftune.tuner.crashes import CrashSummary
from tftune.tuner.space import SearchSpace, format_value
from tftune.tuner.study import INPUT_BOUND_SHARE, Role, State, StudyOutcome, TrialRecord

SCHEMA = 1
DEFAULT_BEST_FILE = "tftune-best.json"
# At this share of the ceiling, the tuned run has reached it (the rest is noise).
CEILING_REACHED = 0.9
# A failed trial's status line is followed by at most this many of its crash's key lines
# (its messages, then the frames: `crashes.CrashSummary.key_lines`).
TRIAL_CRASH_LINES = 5
# ... and, for a Python exception (its reason already names it), where it was raised.
TRIAL_EXCEPTION_LINES = 1
# What the terminal adds below the instability sentence.
INSTABILITY_CONSEQUENCE = (
    "its crashes are counted as failed trials, but no knob value is blamed for them; "
    "fix the crash, then tune again"
)
# TensorFlow's positional parameter order (after self), for knobs passed positionally.
_POSITIONAL: dict[str, dict[str, int]] = {
    "map": {"num_parallel_calls": 1},
    "interleave": {"cycle_length": 1, "num_parallel_calls": 3},
    "batch": {"batch_size": 0},
    "padded_batch": {"batch_size": 0},
    "prefetch": {"buffer_size": 0},
    "TFRecordDataset": {"num_parallel_calls": 3},
    "TextLineDataset": {"num_parallel_calls": 3},
    "FixedLengthRecordDataset": {"num_parallel_calls": 6},
    "PyDataset": {"num_parallel_calls": 0, "use_multiprocessing": 1, "buffer_size": 2},
}
# A PyDataset's site is its subclass's ``super().__init__(...)`` line.
_OP_OF_CALLEE = {"__init__": "PyDataset"}
# The transformations each knob is applied to: the patcher's own table, so that the diff
# edits exactly the calls a config changes when it runs.
_KNOB_OPS: dict[str, tuple[str, ...]] = {
    knob: tuple(op for op, knobs in OP_KNOBS.items() if knob in knobs) for knob in SITE_KNOBS
}


# --- the diff -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Edit:
    start: int  # byte offsets into the file
    end: int
    text: str


def _tf_alias(tree: ast.Module) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "tensorflow":
                    return a.asname or "tensorflow"
    return "tf"


def _offsets(source: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(source):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def _value_text(value: int | bool, alias: str) -> str:
    if value == AUTOTUNE and not isinstance(value, bool):
        return f"{alias}.data.AUTOTUNE"
    return str(value)


def _find_calls(tree: ast.Module, line: int, ops: Sequence[str]) -> list[ast.Call]:
    """Every ``.op(...)`` call at a call site's line. A config applies to each call on
    that line that takes the knob (``ds.map(f).map(g)`` shares one key), and the line of
    a call is that of its method name (a chain split over lines)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _op_of(node) in ops
        and line in (node.lineno, node.func.end_lineno)
    ]


def _callee(call: ast.Call) -> str | None:
    """The name a call calls: ``ds.map(...)`` -> map, ``TFRecordDataset(...)`` (imported
    by name) -> TFRecordDataset."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def _op_of(call: ast.Call) -> str | None:
    callee = _callee(call)
    return _OP_OF_CALLEE.get(callee, callee) if callee is not None else None


def _site_edits(
    tree: ast.Module, starts: list[int], line: int, site: SiteConfig, alias: str
) -> list[_Edit]:
    edits: list[_Edit] = []
    for knob in SITE_KNOBS:
        value = getattr(site, knob)
        if value is None:
            continue
        text = _value_text(value, alias)
        for call in _find_calls(tree, line, _KNOB_OPS[knob]):
            edits.append(_call_edit(call, knob, text, starts))
    return edits


def _call_edit(call: ast.Call, knob: str, text: str, starts: list[int]) -> _Edit:
    """The edit that passes `knob` = `text` to one call: its keyword's or positional
    argument's value replaced, or the keyword added before the closing parenthesis. The
    keyword is TensorFlow's name for the knob there (a reader's is num_parallel_reads)."""
    name = _op_of(call) or ""
    param = OP_KNOBS.get(name, {}).get(knob, knob)

    def span(n: ast.expr) -> tuple[int, int]:
        end_line = n.end_lineno if n.end_lineno is not None else n.lineno
        end_col = n.end_col_offset if n.end_col_offset is not None else n.col_offset
        return starts[n.lineno - 1] + n.col_offset, starts[end_line - 1] + end_col

    kw = next((k for k in call.keywords if k.arg == param), None)
    pos = _POSITIONAL.get(name, {}).get(knob)
    if kw is not None:
        a, b = span(kw.value)
        return _Edit(a, b, text)
    if pos is not None and pos < len(call.args):
        a, b = span(call.args[pos])
        return _Edit(a, b, text)
    end_line = call.end_lineno if call.end_lineno is not None else call.lineno
    close = starts[end_line - 1] + (call.end_col_offset or 1) - 1  # the ")"
    sep = ", " if call.args or call.keywords else ""
    return _Edit(close, close, f"{sep}{param}={text}")


def rewrite_sources(script: str | os.PathLike[str], config: Config) -> dict[str, tuple[str, str]]:
    """``{relative path: (before, after)}``: the config's call-site knobs written into the
    user's own lines. Files that cannot be read or parsed are skipped (the config still
    applies through ``tftune run --config``)."""
    script_dir = Path(script).resolve().parent
    by_file: dict[str, list[tuple[int, SiteConfig]]] = {}
    for key, site in config.sites.items():
        path, _, line = key.rpartition(":")
        if line.isdigit() and not site.is_empty():
            by_file.setdefault(path, []).append((int(line), site))
    out: dict[str, tuple[str, str]] = {}
    for rel, sites in sorted(by_file.items()):
        try:
            source = (script_dir / rel).read_bytes()
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        starts = _offsets(source)
        alias = _tf_alias(tree)
        edits = [e for line, s in sites for e in _site_edits(tree, starts, line, s, alias)]
        new = source
        # From the end of the file back; edits at one place land in the config's order.
        order = sorted(enumerate(edits), key=lambda ie: (ie[1].start, ie[1].end, ie[0]))
        for _, e in reversed(order):
            new = new[: e.start] + e.text.encode() + new[e.end :]
        out[rel] = (source.decode("utf-8", "replace"), new.decode("utf-8", "replace"))
    return out


def source_diff(script: str | os.PathLike[str], config: Config) -> str:
    """A unified diff (``patch -p1`` from the script's folder) of `rewrite_sources`."""
    out: list[str] = []
    for rel, (before, after) in rewrite_sources(script, config).items():
        out.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                f"a/{rel}",
                f"b/{rel}",
            )
        )
    return "".join(out)


def globals_snippet(
    config: Config,
    alias: str = "tf",
    own_pipeline: bool = True,
    config_file: str = DEFAULT_BEST_FILE,
) -> str:
    """Python lines for the knobs that are not call-site arguments. Without a tf.data
    pipeline of the script's own (`own_pipeline`: Keras builds it from a PyDataset or
    arrays) there is no dataset line to change for the tf.data ones: it says how to apply
    them instead."""
    lines: list[str] = []
    tf_data = (config.final_prefetch, config.threadpool_size, config.deterministic)
    if not own_pipeline and any(v is not None for v in tf_data):
        lines += [
            "# Keras builds the tf.data pipeline it iterates, so the final prefetch, thread",
            "# pool and determinism have no line of yours: apply them at the top of the script",
            f"# with tftune.apply({json.dumps(config_file)}), or train with tftune run --config.",
        ]
        config = replace(config, final_prefetch=None, threadpool_size=None, deterministic=None)
    if config.final_prefetch is not None:
        lines += [
            "# last transformation before the loop iterates the dataset:",
            f"ds = ds.prefetch({_value_text(config.final_prefetch, alias)})",
        ]
    if config.threadpool_size is not None or config.deterministic is not None:
        lines += [f"options = {alias}.data.Options()"]
        if config.threadpool_size is not None:
            lines += [f"options.threading.private_threadpool_size = {config.threadpool_size}"]
        if config.deterministic is not None:
            lines += [f"options.deterministic = {config.deterministic}"]
        lines += ["ds = ds.with_options(options)  # on the dataset that is iterated"]
    if config.mixed_precision not in (None, "off"):
        lines += [
            "# before the model is built; keep the output layer in float32:",
            f'{alias}.keras.mixed_precision.set_global_policy("{config.mixed_precision}")',
        ]
    return "\n".join(lines) + ("\n" if lines else "")


# --- files and commands -------------------------------------------------------------


def run_command(script: str, args: Sequence[str], config_file: str) -> str:
    cmd = ["tftune", "run", "--config", config_file, script]
    if args:
        cmd += ["--", *args]
    return shlex.join(cmd)


def _metrics(r: TrialRecord | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "examples_per_s": _round(r.examples_per_s),
        "utilization": _round(r.utilization, 4),
        "spread": _round(r.spread, 4),
        "input_wait_share": _round(r.input_wait_share, 4),
        "repeats": [_round(x) for x in r.repeats],
        "trial": r.number,
        "state": r.state.value,
        "reason": r.reason,
    }


def _baseline(outcome: StudyOutcome, r: TrialRecord | None) -> dict[str, Any] | None:
    """A baseline's trial figures, with its final-round figure as ``confirmed``."""
    out = _metrics(r)
    if out is not None:
        again = outcome.remeasured(r)
        out["confirmed"] = _metrics(again) if again is not r else None
    return out


def _crash_json(crash: CrashSummary | None) -> dict[str, Any] | None:
    return crash.to_json() if crash is not None else None


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def best_config_with_metrics(outcome: StudyOutcome, command: str) -> Config:
    """The winner, with what was measured in ``meta`` (for humans and for CI)."""
    aw = outcome.baselines.get(Role.AS_WRITTEN)
    meta = {
        "tool": "tftune optimize",
        "objective": outcome.objective.value,
        "study": outcome.study_name,
        "storage": outcome.storage,
        "command": command,
        "measured": _metrics(outcome.best),
        "confirmed": _metrics(outcome.confirm),
        "as_written": _metrics(aw),
        "speedup_vs_as_written": _speedup(tuned_record(outcome), outcome.remeasured(aw)),
        "noise": "spread = (max - min) / median of the repeat windows' examples/s",
    }
    return replace(outcome.best_config, meta=meta)


def _speedup(r: TrialRecord | None, base: TrialRecord | None) -> float | None:
    if r is None or base is None or not r.examples_per_s or not base.examples_per_s:
        return None
    return round(r.examples_per_s / base.examples_per_s, 3)


def write_json_atomic(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write JSON atomically (see `tftune.core.userfiles`)."""
    return write_text_atomic(path, json.dumps(data, indent=2) + "\n", ConfigError)


def tuning_json(
    *,
    script: str,
    outcome: StudyOutcome,
    space: SearchSpace,
    ceiling: Ceiling | None,
    device: str,
    config_file: str,
    command: str,
    diff: str,
    snippet: str,
    seed: int,
) -> dict[str, Any]:
    """The tuning JSON, schema 1 (docs/ARCHITECTURE.md). ``null`` is "not measured"."""
    b = outcome.baselines
    return {
        "schema": SCHEMA,
        "script": script,
        "objective": outcome.objective.value,
        "utilization_kind": outcome.utilization_kind,
        "device": device,
        "trials": outcome.counts(),
        "wall_s": round(outcome.wall_s, 2),
        "ceiling": ceiling.to_json() if ceiling is not None else None,
        "baselines": {
            key: _baseline(outcome, b.get(role))
            for key, role in (
                ("as_written", Role.AS_WRITTEN),
                ("autotune", Role.AUTOTUNE),
                ("heuristic", Role.HEURISTIC),
                ("guided", Role.GUIDED),
            )
        },
        "best": {
            **(_metrics(outcome.best) or {}),
            "config_file": config_file,
            "config": outcome.best_config.to_json(),
            "description": outcome.best.description,
            "role": outcome.best.role.value,
            "confirmed": _metrics(outcome.confirm),
            "speedup_vs_as_written": _speedup(
                tuned_record(outcome), outcome.remeasured(b.get(Role.AS_WRITTEN))
            ),
        },
        "pareto": [_metrics(r) for r in outcome.pareto]
        if outcome.objective.value == "both"
        else [],
        "space": {
            "knobs": [
                {"name": k.name, "choices": [format_value(c) for c in k.choices], "why": k.why}
                for k in space.knobs
            ],
            "fixed": {n: format_value(v) for n, v in space.fixed.items()},
            "left_out": [{"name": lo.name, "reason": lo.reason} for lo in space.left_out],
            "warnings": list(space.warnings),
        },
        "trials_detail": [
            {
                "number": r.number,
                "role": r.role.value,
                "state": r.state.value,
                "params": {k: format_value(v) for k, v in r.params.items()},
                "description": r.description,
                "examples_per_s": _round(r.examples_per_s),
                "utilization": _round(r.utilization, 4),
                "spread": _round(r.spread, 4),
                "reason": r.reason,
                "wall_s": _round(r.wall_s),
                "notes": list(r.notes),
                "stderr_tail": (r.stderr_tail or None) if r.state is State.FAILED else None,
                "crash": _crash_json(r.crash) if r.state is State.FAILED else None,
            }
            for r in outcome.records
        ],
        "instability": outcome.instability.to_json() if outcome.instability else None,
        "importances": dict(outcome.importances),
        "study": {"name": outcome.study_name, "storage": outcome.storage, "seed": seed},
        "command": command,
        "diff": diff,
        "snippet": snippet,
        "notes": list(outcome.notes),
        "platform": {"python": platform.python_version(), "cores": os.cpu_count()},
    }


# --- terminal -----------------------------------------------------------------------


def _fmt_eps(x: float | None) -> str:
    return "not measured" if x is None else f"{x:,.1f}"


def _fmt_util(x: float | None) -> str:
    return "not measured" if x is None else f"{x:.0%}"


def tuned_record(outcome: StudyOutcome) -> TrialRecord:
    """The winner's honest figure: from the final round where it ran, else its trial's."""
    return outcome.remeasured(outcome.best) or outcome.best


def table_rows(outcome: StudyOutcome) -> list[tuple[str, str, str, str, str]]:
    """(row, examples/s, utilization, spread, speed-up) for the four-way comparison."""
    b = outcome.baselines
    # Final-round figures where there are some: measured side by side with the winner's.
    aw = outcome.remeasured(b.get(Role.AS_WRITTEN))
    rows: list[tuple[str, TrialRecord | None]] = [
        ("as written", aw),
        ("AUTOTUNE everywhere", outcome.remeasured(b.get(Role.AUTOTUNE))),
        ("#cores heuristic", outcome.remeasured(b.get(Role.HEURISTIC))),
        ("tuned", tuned_record(outcome)),
    ]
    out = []
    for label, r in rows:
        if r is None or r.state is not State.COMPLETE:
            why = "not measured" if r is None else f"{r.state.value}: {r.reason or ''}".strip()
            out.append((label, why, "", "", ""))
            continue
        sp = _speedup(r, aw)
        out.append(
            (
                label,
                _fmt_eps(r.examples_per_s),
                _fmt_util(r.utilization),
                "" if r.spread is None else f"±{r.spread / 2:.0%}",
                "" if sp is None else f"{sp:.2f}x",
            )
        )
    return out


def render_table(outcome: StudyOutcome, ceiling: Ceiling | None) -> Any:
    """A rich Table (rendered by the CLI's console); when the script crashes on its own
    (`StudyOutcome.instability`), a Group of the table and that warning below it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    util = "GPU util" if outcome.utilization_kind == "nvml" else "duty cycle"
    t = Table(title="tftune optimize: measured in this run", title_justify="left")
    for col, justify in (
        ("", "left"),
        ("examples/s", "right"),
        (util, "right"),
        ("noise", "right"),
        ("speed-up", "right"),
    ):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for row in table_rows(outcome):
        t.add_row(*row)
    if ceiling is not None and ceiling.examples_per_s is not None:
        t.caption = ceiling_sentence(outcome, ceiling)
        t.caption_justify = "left"
    if outcome.instability is None:
        return t
    warning = Text(f"warning: {outcome.instability.sentence}", style="bold red")
    return Group(t, warning, Text(f"  {INSTABILITY_CONSEQUENCE}"))


def ceiling_sentence(outcome: StudyOutcome, ceiling: Ceiling) -> str:
    """Where the remaining gap is: the as-written and tuned rates against the ceiling (the
    lower of the pipeline alone and the model alone, both as written; once the tuned run
    is past the pipeline's, the model's), and, below it, whether the tuned run still waits
    for input (the pipeline) or not (the two halves slow each other down when they run
    together, e.g. on shared CPU cores)."""

    def rate(x: float | None) -> str:
        return _fmt_eps(x) if x is None else f"{_fmt_eps(x)} ex/s"

    parts = [
        f"pipeline alone {rate(ceiling.pipeline_only_examples_per_s)}, "
        f"model alone on cached data {rate(ceiling.model_only_examples_per_s)}"
    ]
    top = ceiling.examples_per_s
    aw = outcome.remeasured(outcome.baselines.get(Role.AS_WRITTEN))
    tuned = tuned_record(outcome)
    if not top or aw is None or not aw.examples_per_s or not tuned.examples_per_s:
        return "; ".join(parts)
    half = {"pipeline": "the input pipeline", "model": "the model"}.get(
        ceiling.limited_by or "", "the half that was measured"
    )
    model = ceiling.model_only_examples_per_s
    tuned_eps = tuned.examples_per_s
    if (
        ceiling.limited_by == "pipeline"
        and model
        and tuned_eps * CEILING_REACHED > top
        and tuned_eps * CEILING_REACHED <= model
    ):
        # The pipeline alone was measured as written: tuning lifted that ceiling, and the
        # model alone is the one left.
        parts.append(
            f"as written reaches {aw.examples_per_s / top:.0%} of the pipeline alone; tuning "
            f"lifted the pipeline past it ({tuned_eps / top:.1f}x), and tuned reaches "
            f"{tuned_eps / model:.0%} of the model alone"
        )
        top, half = model, "the model"
    elif tuned_eps * CEILING_REACHED > max(top, model or 0):
        # Past both halves as written: the tuned config changed what they were measured
        # with (a batch size changes the model's rate too).
        parts.append(
            f"as written reaches {aw.examples_per_s / top:.0%} of the ceiling ({half}); tuned "
            f"runs {tuned_eps / top:.1f}x past it: its config changes what the two halves were "
            "measured with as written (a batch size changes the model's rate too), so that "
            "ceiling does not bound it"
        )
        return "; ".join(parts)
    else:
        parts.append(
            f"as written reaches {aw.examples_per_s / top:.0%} and tuned "
            f"{tuned.examples_per_s / top:.0%} of the ceiling ({half})"
        )
    wait = tuned.input_wait_share
    if tuned.examples_per_s >= CEILING_REACHED * top:
        parts.append(f"{half} is now the limit")
    elif wait is not None and wait >= INPUT_BOUND_SHARE:
        parts.append(
            f"tuned still waits for input {wait:.0%} of each step: the remaining gap is in "
            "the input pipeline"
        )
    elif wait is not None:
        parts.append(
            f"tuned waits for input only {wait:.0%} of each step: the remaining gap is the "
            "two halves slowing each other down when they run together (shared CPU cores), "
            "not the input pipeline alone"
        )
    return "; ".join(parts)


def trial_line(r: TrialRecord, best: TrialRecord | None) -> str:
    """One status line per trial."""
    head = f"trial {r.number:>3} {r.role.value:<10}"
    if r.state is State.COMPLETE:
        body = f"{_fmt_eps(r.examples_per_s)} ex/s, util {_fmt_util(r.utilization)}"
        if r.spread is not None:
            body += f" (±{r.spread / 2:.0%})"
    elif r.state is State.PRUNED:
        body = f"pruned: {r.reason or ''} ({_fmt_eps(r.examples_per_s)} ex/s so far)"
    else:
        body = f"failed: {r.reason or 'unknown reason'}"
    star = " *best*" if best is not None and best.number == r.number else ""
    line = f"{head} {body}{star}  [{r.description}]"
    if r.state is not State.FAILED or r.crash is None:
        return line
    # The reason is one line ("killed by signal 6"); the crash says what the script said.
    shown = [k for k in r.crash.key_lines() if k not in (r.reason or "")]
    limit = TRIAL_CRASH_LINES if r.crash.native else TRIAL_EXCEPTION_LINES
    return "\n".join([line, *(f"    {k}" for k in shown[:limit])])
