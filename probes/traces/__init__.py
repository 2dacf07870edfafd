"""tftune.probes.traces: reading a profiler trace.

Finding runs and host files (local or in object storage), decoding the XSpace column-wise,
step detection, the per-step breakdown, the tf.data stage tree and what the input wait and
the training loop were spent on. Frozen, typed data out; no advice.
"""
