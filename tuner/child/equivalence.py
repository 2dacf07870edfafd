"""Child side: the equivalence check of the rewrites, before any of them is measured.

`tftune optimize` asks for it in the config's meta (`CHECK_META_KEY`): where the script is
about to iterate its training dataset, each candidate rewrite (`tuner.fixes.rewrites.Candidate`)
is applied to a rebuild of that dataset (the pipeline screen's `Rebuilder`, which replays
the calls that built it) and its elements are compared with the script's own
(`run_check`). Then the child leaves, without training. What is compared:

- **cache**: the part of the pipeline above the cache, rebuilt twice, must give the same
  first elements on both passes, in order: a cache serves every later epoch the first
  pass's elements, so the part above it must not draw anything anew. Its size is measured
  on the way (bytes per example times the examples of a pass);
- **order**: the shuffle's output, with the shuffle moved, against the script's own, with
  one seed for both and the buffer held to `CHECK_SHUFFLE_BUFFER` (a map is element-wise,
  so the order does not depend on the buffer's size): in order, else as a multiset;
- **iterator**: one pass and the start of the next, read from one iterator over
  ``ds.repeat()``, against two passes read from two iterators, with every shuffle held in
  order (a buffer of one): the epoch ends where the script's did.

Every shuffle of a rebuild gets one seed, so that two rebuilds are comparable. A failed
check is a result (`RewriteState.REFUSED`, with where the outputs differed), never a
crash: each candidate's row is written as soon as it is known.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tftune.core.tuning_rewrites import (
    Equivalence,
    RewriteKind,
    RewriteRow,
    RewriteState,
)
from tftune.tuner.child.datasets import to_device
from tftune.tuner.child.elements import (
    CHECK_BATCHES,
    FLOAT_RTOL,
    Late,
    Leaves,
    cache_bytes,
    compare,
    shapes,
    take,
    wanted,
)
from tftune.tuner.child.lineage import is_batched
from tftune.tuner.child.rewrite_apply import filter_plan, finite_length
from tftune.tuner.child.screen_drain import REPLAY_ATTR, Rebuilder, Replay
from tftune.tuner.fixes.rewrites import CACHE_FILL_MAX_S, Candidate
from tftune.tuner.searchspace.config import Config

CHECK_META_KEY = "tftune_check"
CHECK_SHUFFLE_BUFFER = 64
CHECK_SEED = 20260
# A rewrite that changes the order of a pass (files read at once) is compared over a
# whole pass, of at most this many elements.
CHECK_PASS_ELEMENTS = 200_000
# One candidate's check gives up after this long (a rebuilt pipeline's first elements).
CHECK_CANDIDATE_S = 60.0


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """What the parent asks for (the config's meta, `CHECK_META_KEY`)."""

    candidates: tuple[Candidate, ...]
    out: str
    seconds: float = CHECK_CANDIDATE_S

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> CheckSpec:
        found = tuple(Candidate.from_json(c) for c in meta["candidates"])
        return cls(found, str(meta["out"]), float(meta.get("seconds", CHECK_CANDIDATE_S)))

    def to_meta(self) -> dict[str, Any]:
        return {
            "candidates": [c.to_json() for c in self.candidates],
            "out": self.out,
            "seconds": self.seconds,
        }


def check_spec(config: Config) -> CheckSpec | None:
    meta = config.meta.get(CHECK_META_KEY)
    return CheckSpec.from_meta(meta) if isinstance(meta, Mapping) else None


# --- rebuilding --------------------------------------------------------------------------


class _SeededRebuilder(Rebuilder):
    """A `Rebuilder` whose shuffles all take one seed and at most `buffer` elements."""

    def __init__(self, force: Callable[[str | None], None], buffer: int) -> None:
        super().__init__(force, set())
        self.buffer = buffer

    def _call(self, replay: Replay, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if getattr(replay.fn, "__name__", "") == "shuffle":
            args, kwargs = _seeded(args, kwargs, self.buffer)
        return super()._call(replay, args, kwargs)


def _seeded(
    args: tuple[Any, ...], kwargs: dict[str, Any], buffer: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    from tensorflow.python.data.ops import dataset_ops

    method = dataset_ops.DatasetV2.shuffle
    while hasattr(method, "__tftune_original__") or hasattr(method, "__wrapped__"):
        method = getattr(method, "__tftune_original__", None) or method.__wrapped__
    bound = inspect.signature(method).bind(*args, **kwargs)
    given: Any = bound.arguments.get("buffer_size")
    try:
        size = int(given)
    except (TypeError, ValueError):
        size = buffer
    bound.arguments["buffer_size"] = max(1, min(size, buffer))
    bound.arguments["seed"] = CHECK_SEED
    return tuple(bound.args), dict(bound.kwargs)


def _batch_after(ds: Any, map_site: str) -> Any | None:
    """The batch on `ds`'s lineage made right over the script's map at `map_site`."""
    current = ds
    for _ in range(256):
        replay: Replay | None = getattr(current, REPLAY_ATTR, None)
        try:
            inputs = list(current._inputs())
        except Exception:
            return None
        if not inputs:
            return None
        below: Replay | None = getattr(inputs[0], REPLAY_ATTR, None)
        is_batch = replay is not None and getattr(replay.fn, "__name__", "") == "batch"
        if is_batch and below is not None and below.site == map_site:
            return current
        current = inputs[0]
    return None


def made_at(ds: Any, site: str, op: str, depth: int = 0) -> Any | None:
    """The dataset on `ds`'s lineage that the script's `op` call at `site` returned."""
    replay: Replay | None = getattr(ds, REPLAY_ATTR, None)
    if replay is not None and replay.site == site and getattr(replay.fn, "__name__", "") == op:
        return ds
    if depth > 256:
        return None
    try:
        inputs = list(ds._inputs())
    except Exception:
        inputs = []
    for parent in inputs:
        found = made_at(parent, site, op, depth + 1)
        if found is not None:
            return found
    return None


# --- the checks ---------------------------------------------------------------------------


class Checker:
    """Checks the candidates on the training dataset `ds` (module docstring). `patcher`
    is the child's `Patcher`: its config is each rebuild's, its forced site the replay's."""

    def __init__(self, patcher: Any, ds: Any, batched: bool, iterate: Callable[[Any], Any]):
        self.patcher, self.ds, self.batched, self.iterate = patcher, ds, batched, iterate

    def rebuild(self, target: Any, config: Config, buffer: int = CHECK_SHUFFLE_BUFFER) -> Any:
        def force(site: str | None) -> None:
            self.patcher.forced_site = site

        before = self.patcher.config
        self.patcher.config = config
        try:
            return _SeededRebuilder(force, buffer).rebuild(target)
        finally:
            self.patcher.config = before

    def run(self, c: Candidate, seconds: float) -> RewriteRow:
        deadline = time.monotonic() + seconds
        try:
            if c.kind is RewriteKind.CACHE:
                return self.cache(c, deadline)
            if c.kind is RewriteKind.ORDER:
                return self.order(c, deadline)
            if c.kind is RewriteKind.VECTORIZE:
                return self.vectorize(c, deadline)
            if c.kind is RewriteKind.FILTER:
                return self.filter(c, deadline)
            if c.kind is RewriteKind.FILES:
                return self.files(c, deadline)
            if c.kind is RewriteKind.HOST_TO_DEVICE:
                return self.device(c, deadline)
            return self.iterator(c, deadline)
        except Late:
            why = f"not checked: its elements took over {seconds:.0f} s to come"
        except Exception as exc:  # a rewrite this pipeline cannot take: a result
            why = f"the rewritten pipeline failed: {type(exc).__name__}: {exc}"[:300]
        return _refused(c, why)

    def _take(self, ds: Any, n: int, deadline: float) -> list[Leaves]:
        return take(ds, n, deadline, self.iterate)

    def cache(self, c: Candidate, deadline: float) -> RewriteRow:
        assert c.site is not None
        target = made_at(self.ds, c.site, "map") or made_at(self.ds, c.site, "interleave")
        if target is None:
            return _refused(c, f"the map at {c.site} was not found in the training pipeline")
        first = self._take(self.rebuild(target, Config()), CHECK_BATCHES, deadline)
        n = wanted(first, bool(is_batched(target)))
        began = time.monotonic()
        a = self._take(self.rebuild(target, Config()), n, deadline)
        per_element_s = (time.monotonic() - began) / max(1, len(a))
        b = self._take(self.rebuild(target, Config()), n, deadline)
        result = compare(a, b, multiset=False)
        if not result.passed:
            why = (
                f"the part above the cache gave other elements on a second pass "
                f"({result.detail}): it is not deterministic, and a cache would repeat one "
                "pass's elements every epoch"
            )
            return _refused(c, why, result)
        cached = self._take(self.rebuild(target, c.config()), n, deadline)
        again = compare(a, cached, multiset=False)
        if not again.passed:
            return _refused(c, f"the cached pipeline differs: {again.detail}", again)
        size, length = cache_bytes(a, target, self.iterate)
        fill_s = per_element_s * length if length is not None else None
        if fill_s is not None and fill_s > CACHE_FILL_MAX_S:
            why = (
                f"its first pass, which fills it, would take about {fill_s:,.0f} s "
                f"({length:,} elements): no trial could see past it"
            )
            return c.row(RewriteState.REFUSED, why, result, size)
        check = replace(result, how="in order, on two passes")
        what = f"cache() after the map at {c.site}"
        return c.row(RewriteState.CHECKED, what, check, size)

    def order(self, c: Candidate, deadline: float) -> RewriteRow:
        assert c.site is not None
        target = made_at(self.ds, c.site, "shuffle")
        if target is None:
            return _refused(c, f"the shuffle at {c.site} was not found in the training pipeline")
        probe = self._take(self.rebuild(target, Config()), CHECK_BATCHES, deadline)
        n = wanted(probe, False)
        a = self._take(self.rebuild(target, Config()), n, deadline)
        b = self._take(self.rebuild(target, c.config()), n, deadline)
        result = compare(a, b, multiset=True)
        if not result.passed:
            return _refused(c, f"the moved shuffle's outputs differ: {result.detail}", result)
        maps = ", ".join(s.rsplit(":", 1)[-1] for s in c.crosses)
        what = f"the shuffle at {c.site} moved above the map(s) at line {maps}"
        return c.row(RewriteState.CHECKED, what, result)

    def filter(self, c: Candidate, deadline: float) -> RewriteRow:
        """The filter moved above the map, where its predicate reads only what the map
        passes through in place (`filter_plan`): its output against the script's own."""
        assert c.site is not None
        target = made_at(self.ds, c.site, "filter")
        inputs = list(target._inputs()) if target is not None else []
        if target is None or not inputs:
            return _refused(c, f"the filter at {c.site} was not found")
        why = filter_plan(inputs[0], target)
        if why is not None:
            return c.row(RewriteState.NOT_APPLICABLE, why)
        probe = self._take(self.rebuild(target, Config()), CHECK_BATCHES, deadline)
        n = wanted(probe, bool(is_batched(target)))
        a = self._take(self.rebuild(target, Config()), n, deadline)
        b = self._take(self.rebuild(target, c.config()), n, deadline)
        result = compare(a, b, multiset=False)
        if not result.passed:
            return _refused(c, f"the moved filter keeps other elements: {result.detail}", result)
        what = f"the filter at {c.site} moved above the map at {c.crosses[0]}"
        return c.row(RewriteState.CHECKED, what, result)

    def vectorize(self, c: Candidate, deadline: float) -> RewriteRow:
        """The batches of the map made over batches against the script's own, within
        `FLOAT_RTOL` where they are floating point (a batched op may sum in another
        order)."""
        assert c.site is not None
        target = _batch_after(self.ds, c.site)
        if target is None:
            return _refused(c, f"the batch after the map at {c.site} was not found")
        probe = self._take(self.rebuild(target, Config()), CHECK_BATCHES, deadline)
        n = wanted(probe, True)
        a = self._take(self.rebuild(target, Config()), n, deadline)
        b = self._take(self.rebuild(target, c.config()), n, deadline)
        result = compare(a, b, multiset=False, rtol=FLOAT_RTOL)
        if not result.passed:
            return _refused(c, f"the map over batches gives other batches: {result.detail}", result)
        way = "as it is" if c.value == "batch" else "through tf.vectorized_map"
        what = f"the map at {c.site} made over batches, its function {way}"
        return c.row(RewriteState.CHECKED, what, result)

    def files(self, c: Candidate, deadline: float) -> RewriteRow:
        """A whole pass of the flat_map's records, read as an interleave, against the
        script's own as a multiset: the same records, in another order."""
        assert c.site is not None
        target = made_at(self.ds, c.site, "flat_map")
        if target is None:
            return _refused(c, f"the flat_map at {c.site} was not found")
        limit = CHECK_PASS_ELEMENTS + 1
        a = self._take(self.rebuild(target, Config()), limit, deadline)
        if len(a) == limit:
            why = f"a pass holds over {CHECK_PASS_ELEMENTS:,} records: too many to compare"
            return _refused(c, why)
        b = self._take(self.rebuild(target, c.config()), limit, deadline)
        result = compare(a, b, multiset=True)
        if not result.passed:
            return _refused(c, f"the interleaved pass holds other records: {result.detail}", result)
        check = replace(result, how=f"{result.how}, over a whole pass")
        what = f"the flat_map at {c.site} read as an interleave of several files at once"
        return c.row(RewriteState.CHECKED, what, check)

    def device(self, c: Candidate, deadline: float) -> RewriteRow:
        """The batches copied to the GPU ahead against the script's own, in order."""
        probe = self._take(self.rebuild(self.ds, Config()), CHECK_BATCHES, deadline)
        n = wanted(probe, self.batched)
        a = self._take(self.rebuild(self.ds, Config()), n, deadline)
        b = self._take(to_device(self.rebuild(self.ds, Config())), n, deadline)
        result = compare(a, b, multiset=False)
        if not result.passed:
            return _refused(c, f"the batches on the GPU differ: {result.detail}", result)
        return c.row(RewriteState.CHECKED, "the next batches prefetched to the GPU", result)

    def iterator(self, c: Candidate, deadline: float) -> RewriteRow:
        length = finite_length(self.ds)
        if length is None:
            return _refused(c, "the training dataset's length is not known and finite")
        extra = max(CHECK_BATCHES, min(length, wanted([], self.batched)))
        held_in_order = 1  # a shuffle buffer of one: each pass in the same order
        one = self.rebuild(self.ds, Config(), held_in_order)
        two = self.rebuild(self.ds, Config(), held_in_order)
        try:
            passes = self._take(one, length, deadline) + self._take(two, extra, deadline)
            repeated = self.rebuild(self.ds, Config(), held_in_order).repeat()
            held = self._take(repeated, length + extra, deadline)
        except Late:
            why = f"not checked: one epoch of {length} elements took too long to read"
            return _refused(c, why)
        result = compare(passes, held, multiset=False)
        if not result.passed and shapes(passes) == shapes(held):
            # Elements that differ but come as many a pass, of one structure: the
            # pipeline draws anew on each pass (an augmentation), as the script's does.
            how = "epoch length and structure: the pipeline draws random numbers each pass"
            result = Equivalence(True, len(held), how)
        if not result.passed:
            why = f"one iterator's epochs differ from the script's: {result.detail}"
            return _refused(c, why, result)
        if result.how == "in order":
            result = replace(result, how="in order, across an epoch's end")
        check = result
        what = f"one iterator across epochs of {length} elements"
        return c.row(RewriteState.CHECKED, what, check)


def _refused(c: Candidate, why: str, check: Equivalence | None = None) -> RewriteRow:
    return c.row(RewriteState.REFUSED, why, check)
