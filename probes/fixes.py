"""More fixes: files opened one after another, and the rule that no fix the trace shows
already in place is ever recommended.

Beside `probes.recommendations` (same `Recommendation` type, same `gain` convention):

* `file_open_recs(w, share, cores)`: an interleave or flat_map that opens one file per
  element (`probes.input_work.opens_files`). One after another, a parallel interleave
  reads several at once; already parallel, the files are too small and should be merged.
* `distributed_prefetch_rec(tree, wait)`: a `tf.distribute` dataset whose own pipeline
  does not end in prefetch (TF 2.21's `experimental_distribute_dataset` rebatches the
  global batch and adds only `prefetch(num_replicas)` after the rebatch, seen as
  `Prefetch::Rebatch::<the user's top stage>`; its per-replica buffer holds 1).
  `distributed_iterator_stage(st)` names the MultiDeviceIterator's per-replica
  `Generator` stage: the distributed iterator's own, never a stage to fix.
* `in_place(rec, tree)`: the reason the trace shows `rec` is already done (a map that is
  already parallel, a pipeline that already ends in an AUTOTUNE prefetch, a threadpool
  already that large, an interleave already parallel), else None; `probes.findings`
  drops such fixes.
"""

from __future__ import annotations

from tftune.core.vocabulary import percent
from tftune.probes.ideas import DISTRIBUTED_PREFETCH, MERGE_FILES, PARALLEL_READS
from tftune.probes.input_work import StageWork, ms
from tftune.probes.recommendations import (
    Change,
    ChangeKind,
    Recommendation,
    one_at_a_time,
    runs_python,
)
from tftune.probes.stages import Stage, StageTree

# Reading files this short is dominated by opening them: merge into shards of this size.
SHARD_MB = 100
# Interleave kinds that read one input at a time.
SEQUENTIAL_OPENERS = frozenset({"Interleave", "FlatMap"})


def _sequential(st: Stage) -> bool:
    par, cycle = st.knob("parallelism"), st.knob("cycle_length")
    if st.kind in SEQUENTIAL_OPENERS:
        return True
    return not (isinstance(par, int) and par > 1) and not (isinstance(cycle, int) and cycle > 1)


def interleave_code(cycle: int) -> str:
    return (
        f"ds = files.interleave(tf.data.TFRecordDataset, cycle_length={cycle},\n"
        "                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)"
    )


MERGE_CODE = (
    f"# once, offline: merge the small files into shards of ~{SHARD_MB} MB\n"
    "with tf.io.TFRecordWriter(f'merged-{i:05d}.tfrecord') as out:\n"
    "    for record in tf.data.TFRecordDataset(small_files_of_this_shard):\n"
    "        out.write(record.numpy())"
)


def file_open_recs(w: StageWork, share: float, cores: int | None) -> list[Recommendation]:
    """Fixes for a stage that opens one file per element, best first."""
    st = w.stage
    files = max(1, st.function_calls)
    per_file = ms(st.work_ps) / files
    ev = {
        "stage": st.name,
        "op": st.op,
        "files_opened": st.function_calls,
        "ms_per_file": round(per_file, 4),
        "parallelism": st.knob("parallelism"),
        "cycle_length": st.knob("cycle_length"),
    }
    merge = Recommendation(
        kind=MERGE_FILES,
        summary=(
            f"Each file holds little ({per_file:.2f} ms per file, mostly opening it): write "
            f"fewer, larger files (shards of ~{SHARD_MB} MB), the longer-term fix"
        ),
        code=MERGE_CODE,
        gain=share * (0.3 if _sequential(st) else 0.7),
        category="io",
        stage=st.name,
        evidence=ev,
    )
    if not _sequential(st):
        return [merge]
    cycle = max(8, 4 * (cores or 1))
    how = "flat_map" if st.kind == "FlatMap" else "interleave with cycle_length=1"
    parallel = Recommendation(
        kind=PARALLEL_READS,
        change=Change(ChangeKind.CYCLE_LENGTH, cycle),
        summary=(
            f"Files are opened and read one after another ({how}: {st.function_calls} "
            f"files, {per_file:.2f} ms each): read {cycle} at once with a parallel interleave"
        ),
        code=interleave_code(cycle),
        gain=share * 0.8,
        category="io",
        stage=st.name,
        evidence=ev,
    )
    return [parallel, merge]


# TF's rebatch of a distributed dataset's global batch for the replicas.
REBATCH_KINDS = frozenset({"Rebatch", "LegacyRebatch"})


def distributed_iterator_stage(st: Stage) -> bool:
    """The MultiDeviceIterator's per-replica `Generator` (in a trace that reads a
    tf.distribute dataset): a generator that runs no Python, whose function fetches the
    replica's share from the shared pipeline. Its time is that wait, not user work."""
    return st.kind == "Generator" and not runs_python(st)


def _distributed_top(tree: StageTree) -> tuple[Stage | None, bool]:
    """The user's top stage under a tf.distribute dataset, and whether it came through
    `experimental_distribute_dataset` (a rebatch above it)."""
    rebatch = next((s for s in tree.stages if s.kind in REBATCH_KINDS), None)
    if rebatch is not None:
        below = tree.children(rebatch.name)
        return (below[0] if below else None), True
    root = tree.root
    tops = tree.children(root.name) if root is not None else ()
    users = [s for s in tops if not distributed_iterator_stage(s)]
    return (users[0] if users else None), False


def distributed_prefetch_rec(tree: StageTree, wait: float) -> Recommendation:
    """Prefetch the batches of a tf.distribute dataset before it is distributed, so that
    the replicas find them ready (`in_place`: where the user's pipeline ends in one)."""
    top, rebatched = _distributed_top(tree)
    code = (
        "ds = ds.prefetch(tf.data.AUTOTUNE)  # the global batches, ready before the replicas\n"
        "dist_ds = strategy.experimental_distribute_dataset(ds)"
        if rebatched
        else "def dataset_fn(ctx):\n"
        "    ds = ...  # the per-replica pipeline, batched\n"
        "    return ds.prefetch(tf.data.AUTOTUNE)\n\n"
        "dist_ds = strategy.distribute_datasets_from_function(dataset_fn)"
    )
    return Recommendation(
        kind=DISTRIBUTED_PREFETCH,
        summary=(
            f"The step waits for its distributed dataset ({percent(wait)} of step time), whose "
            "own pipeline does not end in prefetch: TF only rebatches it for the replicas "
            "and keeps one batch per replica ahead. Prefetch before distributing it"
        ),
        code=code,
        gain=wait * 0.5,
        category="other",
        stage=top.name if top is not None else None,
        evidence={
            "distributed_input": True,
            "input_wait_share": round(wait, 4),
            "top_stage": top.name if top is not None else None,
        },
    )


def _last_stage(tree: StageTree) -> Stage | None:
    root = tree.root
    top = tree.children(root.name) if root is not None else ()
    return top[0] if top else None


def in_place(r: Recommendation, tree: StageTree) -> str | None:
    """Why the trace shows the change `r` proposes (`Recommendation.change`) is already
    there, else None."""
    if r.kind == DISTRIBUTED_PREFETCH:
        top, _ = _distributed_top(tree)
        if top is not None and top.kind == "Prefetch":
            return f"the distributed dataset already ends in a prefetch ({top.name})"
        return None
    change = r.change
    if change is None:
        return None
    if change.kind is ChangeKind.FINAL_PREFETCH:
        last = _last_stage(tree)
        if last is not None and last.kind == "Prefetch":
            return f"the pipeline already ends in a prefetch ({last.name})"
    if change.kind is ChangeKind.CACHE:
        cached = next((s for s in tree.stages if "Cache" in s.kind), None)
        if cached is not None:
            return f"the pipeline already caches ({cached.name})"
    st = tree.by_name(r.stage) if r.stage else None
    return _stage_has(st, change) if st is not None else None


def _stage_has(st: Stage, change: Change) -> str | None:
    """Why stage `st` already has `change`, else None."""
    par, want = st.knob("parallelism"), change.at_least or 0
    if change.kind is ChangeKind.PARALLEL_CALLS and not one_at_a_time(st):
        return f"{st.kind} already runs {par or 'several'} calls at once"
    pool = st.knob("threadpool_size")
    if change.kind is ChangeKind.THREADPOOL and isinstance(pool, int) and pool >= want:
        return f"the threadpool already has {pool} threads"
    cycle = st.knob("cycle_length")
    if (
        change.kind is ChangeKind.CYCLE_LENGTH
        and not _sequential(st)
        and isinstance(cycle, int)
        and cycle >= want
    ):
        return f"{st.kind} already reads {cycle} files at once"
    return None
