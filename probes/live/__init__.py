"""tftune.probes.live: what is measured while the user's script runs.

The step clock (its file format, both sides), a run's training time and its record, the
epoch-start stall's diagnosis, the NVML sampler and the machine record a measurement was
taken on.
"""
