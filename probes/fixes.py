"""More fixes: files opened one after another, and the rule that no fix the trace shows
already in place is ever recommended.

Beside `probes.recommendations` (same `Recommendation` type, same `gain` convention):

* `file_open_recs(w, share, cores)`: an interleave or flat_map that opens one file per
  element (`probes.input_work.opens_files`). One after another, a parallel interleave
  reads several at once; already parallel, the files are too small and should be merged.
* `in_place(rec, tree)`: the reason the trace shows `rec` is already done (a map that is
  already parallel, a pipeline that already ends in an AUTOTUNE prefetch, a threadpool
  already that large, an interleave already parallel), else None; `probes.findings`
  drops such fixes.
"""

from __future__ import annotations

import re

from tftune.probes.input_work import StageWork, ms
from tftune.probes.recommendations import Recommendation, one_at_a_time
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


# A knob-only map fix (`ds.map(fn, num_parallel_calls=AUTOTUNE)`, fn maybe renamed by
# `at_site`), not a rewrite such as `fn_in_tf_ops`.
_PLAIN_MAP_RE = re.compile(
    r"^ds = ds\.map\((?!\w*_in_tf_ops)\w+, num_parallel_calls=tf\.data\.AUTOTUNE\)(\s*#.*)?$"
)
_POOL_RE = re.compile(r"private_threadpool_size = (\d+)")
_CYCLE_RE = re.compile(r"interleave\(.*cycle_length=(\d+)", re.DOTALL)


def _last_stage(tree: StageTree) -> Stage | None:
    root = tree.root
    top = tree.children(root.name) if root is not None else ()
    return top[0] if top else None


def in_place(r: Recommendation, tree: StageTree) -> str | None:
    """Why the trace shows the change `r` proposes is already there, else None."""
    code = r.code.split("\n", 1)[1] if r.code.startswith("# ") else r.code
    st = tree.by_name(r.stage) if r.stage else None
    if code.startswith("ds = ds.prefetch("):
        last = _last_stage(tree)
        if last is not None and last.kind == "Prefetch":
            return f"the pipeline already ends in a prefetch ({last.name})"
    if ".cache()" in code:
        cached = next((s for s in tree.stages if "Cache" in s.kind), None)
        if cached is not None:
            return f"the pipeline already caches ({cached.name})"
    if st is None:
        return None
    par = st.knob("parallelism")
    if _PLAIN_MAP_RE.match(code) and not one_at_a_time(st):
        return f"{st.kind} already runs {par or 'several'} calls at once"
    m = _POOL_RE.search(code)
    pool = st.knob("threadpool_size")
    if m and isinstance(pool, int) and pool >= int(m.group(1)):
        return f"the threadpool already has {pool} threads"
    m = _CYCLE_RE.search(code)
    cycle = st.knob("cycle_length")
    if m and not _sequential(st) and isinstance(cycle, int) and cycle >= int(m.group(1)):
        return f"{st.kind} already reads {cycle} files at once"
    return None
