"""Emitting the winner of `tftune optimize`.

- `best_config_with_metrics`: the winning `Config` with what was measured (and its noise)
  in ``meta``; `tftune.tuner.config.save_config` writes it atomically.
- `source_diff`: a unified diff against the user's own lines for the call-site knobs, and
  a code snippet for the global ones (thread pool, final prefetch, mixed precision).
- `run_command`: the exact ``tftune run --config ...`` line.
- `tuning_json`: the tuning JSON (docs/json.md), and `write_json_atomic`;
  `record_json`: one trial as the JSON's ``trials_detail`` holds it.

Rendering them is the reports' job: `tftune.reports.tuning_terminal` draws the table and
the per-trial lines from this JSON, `tftune.reports.tuning_html` the page.
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
from tftune.core.vocabulary import TrialState
from tftune.tuner.bounds import Ceiling
from tftune.tuner.child.datasets import OP_KNOBS
from tftune.tuner.config import AUTOTUNE, SITE_KNOBS, Config, SiteConfig
from tftune.tuner.crashes import CrashSummary
from tftune.tuner.service import CUT_OPS
from tftune.tuner.space import SearchSpace, format_value
from tftune.tuner.study import Role, StudyOutcome, TrialRecord
from tftune.tuner.trial.discovery import Discovery

SCHEMA = 1
DEFAULT_BEST_FILE = "tftune-best.json"
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


def _service_edit(tree: ast.Module, starts: list[int], line: int, code: str) -> list[_Edit]:
    """``.apply(distribute(...))`` after the last stage built on the cut's line (the
    outermost call of a chain), where `tuner.child.service_read` applies it."""
    calls = _find_calls(tree, line, sorted(CUT_OPS))
    if not calls:
        return []
    last = max(calls, key=lambda c: (c.end_lineno or c.lineno, c.end_col_offset or 0))
    end = starts[(last.end_lineno or last.lineno) - 1] + (last.end_col_offset or 0)
    return [_Edit(end, end, code)]


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
    cut = config.data_service.cut.rpartition(":") if config.data_service else None
    if cut is not None:  # the tf.data service's distribute() goes in at its cut
        by_file.setdefault(cut[0], [])
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
        if cut is not None and cut[0] == rel and config.data_service is not None:
            edits += _service_edit(tree, starts, int(cut[2]), config.data_service.code(alias))
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


def record_json(r: TrialRecord) -> dict[str, Any]:
    """One trial as the tuning JSON's ``trials_detail`` holds it (and as its status line
    is drawn from: `tftune.reports.tuning_terminal.trial_line`). A failed trial keeps its
    stderr tail and crash."""
    failed = r.state is TrialState.FAILED
    return {
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
        "stderr_tail": (r.stderr_tail or None) if failed else None,
        "crash": _crash_json(r.crash) if failed else None,
        "training": r.training.to_json() if r.training is not None else None,
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
    """The tuning JSON, schema 1 (docs/ARCHITECTURE.md). ``null`` is "not measured".

    It carries all that the reports draw (`tftune.reports.tuning_terminal`, `.tuning_html`):
    each baseline with its final-round figure (``confirmed``), ``best`` (with its
    ``input_wait_share``, for the ceiling caption), ``ceiling``, ``instability`` and one
    `record_json` row per trial."""
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
        "trials_detail": [record_json(r) for r in outcome.records],
        "instability": outcome.instability.to_json() if outcome.instability else None,
        "importances": dict(outcome.importances),
        "study": {"name": outcome.study_name, "storage": outcome.storage, "seed": seed},
        "command": command,
        "diff": diff,
        "snippet": snippet,
        "notes": list(outcome.notes),
        "platform": {"python": platform.python_version(), "cores": os.cpu_count()},
    }


def training_json(found: Discovery, outcome: StudyOutcome) -> dict[str, Any]:
    """What was measured as training (the tuning JSON's ``training``): the loop, the
    preamble every run pays, and, for the script as written and the winner, what was
    taken out of their windows and the epoch-start stall with its cause and fix (the
    winner's only where it is not the script as written)."""
    trains = found.training
    aw = outcome.baselines.get(Role.AS_WRITTEN)
    return {
        "loop": trains.to_json() if trains is not None else None,
        "busiest_loop": found.busiest_loop,
        "preamble_s": _round(found.preamble_s),
        "as_written": aw.training.to_json() if aw is not None and aw.training else None,
        "tuned": (
            outcome.best.training.to_json()
            if outcome.best.training and outcome.best.role is not Role.AS_WRITTEN
            else None
        ),
    }


def tuned_record(outcome: StudyOutcome) -> TrialRecord:
    """The winner's honest figure: from the final round where it ran, else its trial's."""
    return outcome.remeasured(outcome.best) or outcome.best
