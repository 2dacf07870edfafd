"""The idea behind a fix: `Recommendation.kind` and `NextMove.kind`, one vocabulary.

Two fixes with the same idea for the same target say one thing, however their text and
code differ (mixed precision told as a float32 `Activation` in one place and a float32
`Dense` in another is one idea). The analysis keeps the first of each: the ranked fixes
are deduplicated by (kind, stage), and a next move is not offered when a fix of its kind
is already among the fixes (`probes.advice.analysis.next_moves`).
"""

from __future__ import annotations

# -- the pipeline ---------------------------------------------------------------------
PARALLEL_MAP = "parallel_map"  # num_parallel_calls on a map that runs one call at a time
THREADPOOL = "threadpool"  # more calls in flight than the cores: a larger private pool
TF_OPS = "tf_ops"  # rewrite Python (a py_function, a Python tokenizer) in TF ops
NUMPY_FUNCTION = "numpy_function"  # tf.numpy_function instead of tf.py_function
PARALLEL_GENERATORS = "parallel_generators"  # several from_generator through interleave
PY_DATASET_WORKERS = "py_dataset_workers"  # a Keras PyDataset's workers
MORE_CPUS = "more_cpus"  # the tf.data service: more CPUs than this host has
CACHE = "cache"  # decode once, cache(), random work after
VECTORIZE = "vectorize"  # batch first, map whole batches
PARALLEL_READS = "parallel_reads"  # read several files at once (a parallel interleave)
MERGE_FILES = "merge_files"  # fewer, larger files
PREFETCH = "prefetch"  # a final prefetch
DISTRIBUTED_PREFETCH = "distributed_prefetch"  # prefetch before a tf.distribute strategy
# -- the step -------------------------------------------------------------------------
PREFETCH_TO_DEVICE = "prefetch_to_device"
LOOP_TO_PIPELINE = "loop_to_pipeline"  # the training loop's own work into a parallel map
STEP_MARKERS = "step_markers"  # the Trace(...) line a trace without markers needs
COMPILE = "compile"  # tf.function around a step that runs eagerly
STEPS_PER_CALL = "steps_per_call"  # several steps per tf.function call (custom loops)
PRECISION = "precision"  # 16-bit compute, float32 output layer
XLA = "xla"  # jit_compile=True
BATCH_SIZE = "batch_size"  # a larger batch
STEPS_PER_EXECUTION = "steps_per_execution"  # Keras fit: several steps per call

# The ideas that speed up the step itself (not the input pipeline): what `tftune
# optimize` says as its next moves when the run is not input-bound.
STEP_IDEAS = frozenset({COMPILE, STEPS_PER_CALL, PRECISION, XLA, BATCH_SIZE, STEPS_PER_EXECUTION})

# What `tftune optimize` measures of a fix with this idea, in words ("tftune optimize
# measures it: ..."); an idea not here is a change of code it cannot try for you.
OPTIMIZE_MEASURES = {
    PARALLEL_MAP: "its parallelism is a knob",
    THREADPOOL: "the thread pool is a knob",
    PY_DATASET_WORKERS: "the PyDataset's workers are knobs",
    MORE_CPUS: "with --data-service, the tf.data service's cut",
    CACHE: "the cache() rewrite",
    VECTORIZE: "the rewrite that makes the map over batches",
    PARALLEL_READS: "files read at once: a reader's knob, or the files rewrite of a flat_map",
    PREFETCH: "the prefetch depth is a knob",
    COMPILE: "the compile_step switch",
    PRECISION: "mixed precision is a knob",
    XLA: "the jit_compile switch (Keras)",
    BATCH_SIZE: "the batch size is a knob",
    STEPS_PER_EXECUTION: "the steps_per_execution switch",
}
