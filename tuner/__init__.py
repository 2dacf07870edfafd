"""tftune.tuner: everything that searches.

Call-site discovery, the search space, config application (the child bootstrap), the
trial runner, the Optuna study and emitting the winner.
"""
