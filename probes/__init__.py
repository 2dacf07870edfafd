"""tftune.probes: everything that observes.

The trace reader, the event model, step detection, the per-step breakdown, the
bottleneck finders, the live step clock of a trial and the NVML sampler. Input is raw
observation; output is frozen, typed data. Nothing here imports tensorflow or optuna at
module level, so analysis works on a laptop without TensorFlow.
"""
