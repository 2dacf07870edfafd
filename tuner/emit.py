"""The winner of `tftune optimize` as code: what the user changes to adopt it.

- `source_diff` (`rewrite_sources`): a unified diff against the user's own lines for the
  call-site knobs; `globals_snippet`: code for the global ones (thread pool, final
  prefetch, mixed precision).
- `run_command`: the exact ``tftune run --config ...`` line.

The tuning JSON that carries them is `tuner.tuning_doc`'s.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tftune.tuner.child.datasets import OP_KNOBS
from tftune.tuner.config import AUTOTUNE, SITE_KNOBS, Config, SiteConfig
from tftune.tuner.service import CUT_OPS

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
