"""tftune.tuner.fixes: the structural fixes and their safety checks.

Which rewrites a training pipeline allows, their check before the study, and whether a
16-bit precision policy is safe for the model's output.
"""
