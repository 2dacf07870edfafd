"""Which stage ran each function: the `id` stat that ties a function's executions
(`ExecutorState::Process`) to the dispatch that asked for them (`FunctionRun`,
`InstantiatedCapturedFunction::*`), and so to the dispatching stage.

`read_ids` reads the ids of many events at once from a line's bytes; `Owners` keeps
each dispatch id's stage (the last dispatch's, where an id repeats) and answers for
the executions' ids. Ids stay in numpy arrays: a trace has one per function call, and
a Python int and a dict entry per call took more memory than the events' columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tftune.probes.traces._stat_bytes import STAT_INT64, STAT_UINT64
from tftune.probes.traces.stage_events import I64, PlaneIndex
from tftune.probes.traces.trace import Line

Bool = npt.NDArray[np.bool_]
_BIG = 2**63  # a uint64 id from here on is not an int64 one


@dataclass(frozen=True, slots=True, eq=False)
class Ids:
    """Integer ids as protobuf gives them: an int64, or a uint64 that may be 2**63 or
    more (`big`: then the id is `value` + 2**64); `valid` is False where an event has
    no integer `id` stat."""

    value: I64
    big: Bool
    valid: Bool

    def of_executions(self) -> Ids:
        """The keys executions are looked up by: a missing or zero id reads as -1."""
        none = ~self.valid | ((self.value == 0) & ~self.big)
        return Ids(np.where(none, -1, self.value), self.big & ~none, np.ones_like(self.valid))


def _stat_id(stat_ids: frozenset[int], line: Line, index: int) -> int | None:
    """One event's `id` stat, decoded by protobuf."""
    for stat in line.raw_stats(index):
        if stat.metadata_id in stat_ids:
            kind = stat.WhichOneof("value")
            return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else None
    return None


def read_ids(index: PlaneIndex, line: Line, events: npt.NDArray[np.intp]) -> Ids:
    """The `id` stat of each event (its first stat named `id`, when an integer), read
    from the line's bytes for all of them at once; an event laid out unusually is
    decoded by protobuf."""
    kind, raw, unusual = line.first_stat(events, index.stat_id_array)
    value = raw.view(np.int64).copy()
    big = (kind == STAT_UINT64) & (raw >= np.uint64(_BIG))
    valid = (kind == STAT_INT64) | (kind == STAT_UINT64)
    for j in np.flatnonzero(unusual).tolist():
        fid = _stat_id(index.stat_id_keys, line, int(events[j]))
        valid[j] = fid is not None
        if fid is not None:
            big[j] = fid >= _BIG
            value[j] = fid - 2**64 if fid >= _BIG else fid
    return Ids(value, big, valid)


class Owners:
    """Dispatch id -> the stage that dispatched it, as a dict filled dispatch by
    dispatch would hold it: the last dispatch of an id wins."""

    def __init__(self) -> None:
        self._added: list[tuple[I64, Bool, I64]] = []
        self._tables: dict[bool, tuple[I64, I64]] | None = None

    def add(self, ids: Ids, stages: I64) -> None:
        """Dispatches in order, each with its stage (-1: none known, not kept)."""
        keep = ids.valid & (stages >= 0)
        self._added.append((ids.value[keep], ids.big[keep], stages[keep]))
        self._tables = None

    def of(self, ids: Ids) -> I64:
        """The stage of each id (-1: no dispatch had it)."""
        out = np.full(ids.value.shape[0], -1, dtype=np.int64)
        if self._tables is None:
            self._tables = self._sorted()
        for b, (table_keys, table_stages) in self._tables.items():
            ask = np.flatnonzero(ids.valid & (ids.big == b))
            if not ask.size or not table_keys.size:
                continue
            at = np.minimum(np.searchsorted(table_keys, ids.value[ask]), table_keys.size - 1)
            hit = table_keys[at] == ids.value[ask]
            out[ask[hit]] = table_stages[at[hit]]
        return out

    def _sorted(self) -> dict[bool, tuple[I64, I64]]:
        """Per kind of id (int64, or uint64 from 2**63), its sorted keys and stages."""
        if not self._added:
            return {}
        value = np.concatenate([a[0] for a in self._added])
        big = np.concatenate([a[1] for a in self._added])
        stage = np.concatenate([a[2] for a in self._added])
        return {b: _last_per_key(value[big == b], stage[big == b]) for b in (False, True)}


def _last_per_key(keys: I64, values: I64) -> tuple[I64, I64]:
    """Sorted distinct keys, each with the value it was given last."""
    order = np.lexsort((np.arange(keys.shape[0]), keys))
    keys, values = keys[order], values[order]
    last = np.ones(keys.shape[0], dtype=bool)
    last[:-1] = keys[1:] != keys[:-1]
    return keys[last], values[last]
