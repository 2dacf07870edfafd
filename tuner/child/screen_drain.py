"""Child side: the pipeline screen (``tftune optimize``'s first look at pipeline configs).

A full trial costs a fresh interpreter, the script's start-up and several windows. The
screen ranks many pipeline configs in ONE process instead: where the script is about to
iterate its training dataset, the dataset is rebuilt under each candidate config and
drained without the model for about a second (`run_screen`). The parent
(`tftune.tuner.searchspace.screen`) uses the ranking to seed the search; only full trials decide the
winner (on a CPU-only host the pipeline and the model share the cores).

Rebuilding needs the calls that built the dataset. While a screen is asked for, every
transformation the script calls records itself on the dataset it returns (a `Replay`):
the call sites with knobs through `DatasetOps`' wrapper (`remember`), the other common
methods through `record_methods`. `rebuild` replays them from the sources up, with the
candidate's knobs at each call site (the site is forced for the replayed call, so that
the knob wrapper applies them as it does for the user's own call) and with the
candidate as the patcher's config, so that a call the user's function makes while it is
traced again (a reader inside an ``interleave``) gets the candidate's knobs too. A
dataset that did not come from a recorded call (a source, or one built by a library) is
reused as it is; a candidate site that no replay reached is reported as ``missing``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tftune.core.userfiles import write_text_atomic
from tftune.tuner.child.step_clock import examples_of
from tftune.tuner.searchspace.config import Config, config_from_json

REPLAY_ATTR = "_tftune_replay"
# Methods recorded for rebuilding besides the knob ops (map, interleave, batch,
# padded_batch, prefetch: `datasets.DatasetOps`). ``apply`` replays the user's function.
RECORDED_METHODS = (
    "apply",
    "cache",
    "concatenate",
    "enumerate",
    "filter",
    "flat_map",
    "ignore_errors",
    "ragged_batch",
    "rebatch",
    "repeat",
    "shard",
    "shuffle",
    "skip",
    "take",
    "take_while",
    "unbatch",
    "unique",
    "window",
    "with_options",
)


@dataclass(frozen=True, slots=True)
class Replay:
    """One recorded call: `fn` called with `args` (the input dataset first, for a method)
    and `kwargs`; `site` is the user's call site of a knob op, `constructor` a reader's
    ``__init__`` (then `fn` is the class)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    site: str | None = None
    constructor: bool = False


def lineage_sites(ds: Any, depth: int = 0) -> set[str]:
    """The user's call sites on `ds`'s lineage (the datasets it was built from)."""
    site = getattr(ds, "_tftune_site", None)
    replay: Replay | None = getattr(ds, REPLAY_ATTR, None)
    found = {s for s in (site, replay.site if replay else None) if s}
    if depth > 256:
        return found
    try:
        inputs = list(ds._inputs())
    except Exception:  # not a dataset, or one whose inputs cannot be listed
        inputs = []
    for parent in inputs:
        found |= lineage_sites(parent, depth + 1)
    return found


def remember(target: Any, replay: Replay) -> None:
    """Tag `target` (the dataset a call returned, or a constructed reader) with `replay`."""
    with contextlib.suppress(AttributeError, TypeError):
        setattr(target, REPLAY_ATTR, replay)


def record_methods() -> None:
    """Wrap `RECORDED_METHODS` of ``tf.data.Dataset`` to tag what they return."""
    from tensorflow.python.data.ops import dataset_ops

    cls = dataset_ops.DatasetV2
    for name in RECORDED_METHODS:
        current = getattr(cls, name, None)
        if current is None or getattr(current, "__tftune_recorder__", False):
            continue
        setattr(cls, name, _recording(current))


def _recording(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def recorder(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        if args and result is not args[0]:
            remember(result, Replay(method, args, dict(kwargs)))
        return result

    recorder.__tftune_recorder__ = True  # type: ignore[attr-defined]
    return recorder


class Rebuilder:
    """Rebuilds datasets under one candidate config (see the module docstring). `force`
    makes the knob wrapper treat the next call as made at a given site; `reached` is the
    set of sites the wrapper applied knobs at while rebuilding."""

    def __init__(self, force: Callable[[str | None], None], reached: set[str]) -> None:
        self.force, self.reached = force, reached
        self._memo: dict[int, Any] = {}

    def rebuild(self, ds: Any, depth: int = 0) -> Any:
        replay: Replay | None = getattr(ds, REPLAY_ATTR, None)
        if replay is None or depth > 256:
            return ds
        key = id(ds)
        if key not in self._memo:
            args = tuple(self._input(a, depth) for a in replay.args)
            kwargs = {k: self._input(v, depth) for k, v in replay.kwargs.items()}
            self._memo[key] = self._call(replay, args, kwargs)
        return self._memo[key]

    def _input(self, value: Any, depth: int) -> Any:
        return self.rebuild(value, depth + 1) if hasattr(value, REPLAY_ATTR) else value

    def _call(self, replay: Replay, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.force(replay.site)
        try:
            if replay.constructor:  # a reader: a new one, through its wrapped __init__
                return replay.fn(*args[1:], **kwargs)
            return replay.fn(*args, **kwargs)
        finally:
            self.force(None)


@dataclass(frozen=True, slots=True)
class ScreenSpec:
    """What the parent asks for (the config's ``meta``, `SCREEN_META_KEY`)."""

    candidates: tuple[Config, ...]
    seconds: float
    warmup_s: float
    out: str
    # The first candidate (the script as written) draining at least this fast ends the
    # screen there: the pipeline is not the limit (None: screen them all).
    stop_above: float | None = None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ScreenSpec:
        stop = meta.get("stop_above")
        return cls(
            tuple(config_from_json(c, "screen candidate") for c in meta["candidates"]),
            float(meta["seconds"]),
            float(meta["warmup_s"]),
            str(meta["out"]),
            float(stop) if stop is not None else None,
        )


def drain_rate(
    ds: Any, iterate: Callable[[Any], Any], spec: ScreenSpec, batched: bool
) -> tuple[float, float]:
    """Examples/s of `ds` drained alone, after `spec.warmup_s` (buffers fill, functions
    trace), over at least `spec.seconds` and 3 elements; and the cores the process kept
    busy meanwhile (its CPU time over the wall time)."""
    it = iterate(ds)
    end = time.monotonic() + spec.warmup_s
    while time.monotonic() < end:
        next(it)
    start, cpu0, examples, elements = time.monotonic(), time.process_time(), 0, 0
    while time.monotonic() - start < spec.seconds or elements < 3:
        element = next(it)
        elements += 1
        examples += examples_of(element) if batched else 1
    wall = time.monotonic() - start
    return examples / wall, (time.process_time() - cpu0) / wall


def write_results(path: str, rows: list[dict[str, Any]]) -> None:
    """Atomically: the parent may read the file whenever the child ends."""
    write_text_atomic(path, json.dumps(rows))


SCREEN_META_KEY = "tftune_screen"
# A result row with this key true: the screen stopped after it (`ScreenSpec.stop_above`).
STOPPED_KEY = "stopped"


def screen_spec(config: Config) -> ScreenSpec | None:
    """The screen the parent asked for in `config`'s meta, if any."""
    meta = config.meta.get(SCREEN_META_KEY)
    return ScreenSpec.from_meta(meta) if isinstance(meta, Mapping) else None


def unscreenable(spec: ScreenSpec, why: str) -> NoReturn:
    """No candidate can be drained here: each gets `why`, and the child leaves."""
    write_results(spec.out, [{"index": i, "error": why} for i in range(len(spec.candidates))])
    os._exit(0)


def run_screen(
    patcher: Any,
    ds: Any,
    info: Any,
    spec: ScreenSpec,
    iterate: Callable[[Any], Any],
    apply_globals: Callable[[Any, Config, Any], Any],
) -> None:
    """Rebuild and drain `ds` under each candidate, write one row per candidate to
    `spec.out` as it goes, then leave without running the script's training. `patcher`
    is the child's `Patcher` (its config, hooks, forced site and reached sites)."""
    import tensorflow as tf

    from tftune.tuner.child.state import Hooks

    rows: list[dict[str, Any]] = []
    if tf.inside_function():  # the dataset lives in a graph: it cannot be drained from here
        unscreenable(spec, "the training dataset is iterated inside a tf.function")
    original, hooks = patcher.config, patcher.hooks
    patcher.hooks = Hooks()  # the replayed calls are not new call sites to report

    def force(site: str | None) -> None:
        patcher.forced_site = site

    lineage = lineage_sites(ds)
    for index, candidate in enumerate(spec.candidates):
        reached: set[str] = set()
        row: dict[str, Any] = {"index": index}
        patcher.config, patcher.replay_reached = candidate, reached
        try:
            rebuilt = Rebuilder(force, reached).rebuild(ds)
            # repeat(): a script that builds one epoch's dataset would end the window.
            out = apply_globals(rebuilt, candidate, info).repeat()
            rate, busy = drain_rate(out, iterate, spec, bool(info.batched))
            row.update(examples_per_s=rate, busy_cores=round(busy, 3))
        except StopIteration:
            row["error"] = "the dataset ended within the screen's window"
        except Exception as exc:  # a config this pipeline cannot take: a result, not a crash
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            patcher.config, patcher.replay_reached = original, None
        # Sites of other pipelines (a validation set's) are not this dataset's to reach.
        asked = {site for site, knobs in candidate.sites.items() if not knobs.is_empty()}
        row["missing"] = sorted((asked & lineage) - reached)
        drained = row.get("examples_per_s") or 0.0
        if index == 0 and spec.stop_above is not None and drained >= spec.stop_above > 0:
            row[STOPPED_KEY] = True  # the pipeline as written already outruns the model
        rows.append(row)
        write_results(spec.out, rows)
        if row.get(STOPPED_KEY):
            break  # nothing to rank
    patcher.hooks = hooks
    os._exit(0)
