"""tftune.probes: everything that observes.

Three rooms: `traces` reads a profiler trace (locate, decode, steps, breakdown, stages),
`advice` says what it means and what to change (findings, fixes, next moves, the whole
analysis), and `live` is what is measured while the user's script runs (the step clock,
training time, NVML, the machine record). Input is raw observation; output is frozen,
typed data. Nothing here imports tensorflow or optuna at module level, so analysis works
on a laptop without TensorFlow.
"""
