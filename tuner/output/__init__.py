"""tftune.tuner.output: what a tuning run gives the user.

The winner as code (the diff of the user's own lines, the rewrites and the scaled learning
rate as code), its config file and command, the tuning document, the reproducibility
record and when tuning pays for itself.
"""
