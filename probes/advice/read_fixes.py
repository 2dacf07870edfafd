"""Fixes for reading and handing over (`probes.advice.recommendations` has the type): I/O at
the source, files opened one after another (a parallel interleave; already parallel,
files too small to be worth opening: merge them), the final prefetch, and a
`tf.distribute` dataset whose own pipeline does not end in prefetch (TF 2.21's
`experimental_distribute_dataset` rebatches the global batch and adds only
`prefetch(num_replicas)` after the rebatch, seen as `Prefetch::Rebatch::<the user's top
stage>`; its per-replica buffer holds 1).
"""

from __future__ import annotations

from tftune.core.vocabulary import STAGE_SEPARATOR, percent
from tftune.probes.advice.ideas import DISTRIBUTED_PREFETCH, MERGE_FILES, PARALLEL_READS, PREFETCH
from tftune.probes.advice.recommendations import (
    Change,
    ChangeKind,
    Recommendation,
    distributed_top,
    opens_one_at_a_time,
)
from tftune.probes.traces.input_work import StageWork, is_io_source, ms
from tftune.probes.traces.stages import StageTree

# Reading files this short is dominated by opening them: merge into shards of this size.
SHARD_MB = 100


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


def io_rec(w: StageWork, share: float) -> Recommendation | None:
    st = w.stage
    if not is_io_source(st):
        return None
    under_interleave = any("Interleave" in part for part in st.name.split(STAGE_SEPARATOR))
    if under_interleave:
        return None
    return Recommendation(
        kind=PARALLEL_READS,
        change=Change(ChangeKind.CYCLE_LENGTH, 8),
        summary=(
            f"Files are read one at a time ({st.kind}, {ms(st.self_ps)} ms reading): shard the "
            "data and read several files at once"
        ),
        code=(
            'files = tf.data.Dataset.list_files("data-*.tfrecord", shuffle=True)\n'
            "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=8,\n"
            "                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)"
        ),
        gain=share * 0.8,
        category="io",
        stage=st.name,
        evidence={"source": st.kind, "op": st.op, "read_ms": ms(st.self_ps), "calls": st.calls},
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
        gain=share * (0.3 if opens_one_at_a_time(st) else 0.7),
        category="io",
        stage=st.name,
        evidence=ev,
    )
    if not opens_one_at_a_time(st):
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


def prefetch_rec(tree: StageTree, input_share: float, host_share: float) -> Recommendation | None:
    root = tree.root
    top = tree.children(root.name) if root is not None else ()
    if not top or top[0].kind == "Prefetch":
        return None
    return Recommendation(
        kind=PREFETCH,
        change=Change(ChangeKind.FINAL_PREFETCH),
        summary=(
            f"The pipeline does not end in prefetch (top stage: {top[0].kind}): the next batch is "
            "only prepared while the step waits"
        ),
        code="ds = ds.prefetch(tf.data.AUTOTUNE)",
        gain=min(input_share, max(host_share, 0.0)),
        category="other",
        stage=top[0].name,
        evidence={"top_stage": top[0].name},
    )


def distributed_prefetch_rec(tree: StageTree, wait: float) -> Recommendation:
    """Prefetch the batches of a tf.distribute dataset before it is distributed, so that
    the replicas find them ready (`in_place`: where the user's pipeline ends in one)."""
    top, rebatched = distributed_top(tree)
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
