"""The winner of `tftune optimize` as code: what the user changes to adopt it.

- `source_diff` (`rewrite_sources`): a unified diff against the user's own lines for the
  call-site knobs and the rewrites (`tuner.output.rewrite_code`); `globals_snippet`: code for
  the global ones (thread pool, final prefetch, mixed precision, one iterator in a
  custom loop).
- `run_command`: the exact ``tftune run --config ...`` line.

The tuning JSON that carries them is `tuner.output.assemble`'s.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tftune.tuner.child.datasets import OP_KNOBS
from tftune.tuner.option_defaults import DEFAULT_BEST_FILE
from tftune.tuner.output.rewrite_code import (
    RewriteFacts,
    iterator_snippet,
    rewrite_edits,
    rewrite_files,
)
from tftune.tuner.output.source_edits import (
    Edit,
    apply_edits,
    find_calls,
    keyword_added,
    line_starts,
    op_of,
    span,
    tf_alias,
)
from tftune.tuner.searchspace.config import AUTOTUNE, SITE_KNOBS, Config, SiteConfig
from tftune.tuner.searchspace.service import CUT_OPS

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
# The transformations each knob is applied to: the patcher's own table, so that the diff
# edits exactly the calls a config changes when it runs.
_KNOB_OPS: dict[str, tuple[str, ...]] = {
    knob: tuple(op for op, knobs in OP_KNOBS.items() if knob in knobs) for knob in SITE_KNOBS
}


# --- the diff -----------------------------------------------------------------------


def _value_text(value: int | bool, alias: str) -> str:
    if value == AUTOTUNE and not isinstance(value, bool):
        return f"{alias}.data.AUTOTUNE"
    return str(value)


def _site_edits(
    tree: ast.Module, starts: list[int], line: int, site: SiteConfig, alias: str
) -> list[Edit]:
    edits: list[Edit] = []
    for knob in SITE_KNOBS:
        value = getattr(site, knob)
        if value is None:
            continue
        text = _value_text(value, alias)
        for call in find_calls(tree, line, _KNOB_OPS[knob]):
            edits.append(_call_edit(call, knob, text, starts))
    return edits


def _call_edit(call: ast.Call, knob: str, text: str, starts: list[int]) -> Edit:
    """The edit that passes `knob` = `text` to one call: its keyword's or positional
    argument's value replaced, or the keyword added before the closing parenthesis. The
    keyword is TensorFlow's name for the knob there (a reader's is num_parallel_reads)."""
    name = op_of(call) or ""
    param = OP_KNOBS.get(name, {}).get(knob, knob)
    kw = next((k for k in call.keywords if k.arg == param), None)
    pos = _POSITIONAL.get(name, {}).get(knob)
    if kw is not None:
        return Edit(*span(kw.value, starts), text)
    if pos is not None and pos < len(call.args):
        return Edit(*span(call.args[pos], starts), text)
    return keyword_added(call, param, text, starts)


def _service_edit(tree: ast.Module, starts: list[int], line: int, code: str) -> list[Edit]:
    """``.apply(distribute(...))`` after the last stage built on the cut's line (the
    outermost call of a chain), where `tuner.child.service_read` applies it."""
    calls = find_calls(tree, line, sorted(CUT_OPS))
    if not calls:
        return []
    last = max(calls, key=lambda c: (c.end_lineno or c.lineno, c.end_col_offset or 0))
    end = starts[(last.end_lineno or last.lineno) - 1] + (last.end_col_offset or 0)
    return [Edit(end, end, code)]


def rewrite_sources(
    script: str | os.PathLike[str], config: Config, facts: RewriteFacts | None = None
) -> dict[str, tuple[str, str]]:
    """``{relative path: (before, after)}``: the config's call-site knobs and its
    rewrites (`tuner.output.rewrite_code`, with their `facts`) written into the user's own
    lines. Files that cannot be read or parsed are skipped (the config still applies
    through ``tftune run --config``)."""
    script_dir = Path(script).resolve().parent
    facts = facts or RewriteFacts()
    by_file: dict[str, list[tuple[int, SiteConfig]]] = {}
    for key, site in config.sites.items():
        path, _, line = key.rpartition(":")
        if line.isdigit() and not site.is_empty():
            by_file.setdefault(path, []).append((int(line), site))
    cut = config.data_service.cut.rpartition(":") if config.data_service else None
    if cut is not None:  # the tf.data service's distribute() goes in at its cut
        by_file.setdefault(cut[0], [])
    for rel in rewrite_files(config, facts):
        by_file.setdefault(rel, [])
    out: dict[str, tuple[str, str]] = {}
    for rel, sites in sorted(by_file.items()):
        try:
            source = (script_dir / rel).read_bytes()
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        starts = line_starts(source)
        alias = tf_alias(tree)
        edits = [e for line, s in sites for e in _site_edits(tree, starts, line, s, alias)]
        if cut is not None and cut[0] == rel and config.data_service is not None:
            edits += _service_edit(tree, starts, int(cut[2]), config.data_service.code(alias))
        edits += rewrite_edits(tree, source, starts, rel, config, facts)
        new = apply_edits(source, edits)  # edits at one place: in the config's order
        out[rel] = (source.decode("utf-8", "replace"), new.decode("utf-8", "replace"))
    return out


def source_diff(
    script: str | os.PathLike[str], config: Config, facts: RewriteFacts | None = None
) -> str:
    """A unified diff (``patch -p1`` from the script's folder) of `rewrite_sources`."""
    out: list[str] = []
    for rel, (before, after) in rewrite_sources(script, config, facts).items():
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
    facts: RewriteFacts | None = None,
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
    lines += iterator_snippet(config, facts or RewriteFacts())
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
