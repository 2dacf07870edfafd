"""tftune.tuner: everything that searches.

`optimize` orchestrates one tuning run from its `options`; `searchspace` is what is
searched (and what shapes it before the study), `fixes` the structural rewrites and their
checks, `child` the code inside the user's process, `trial` one run of the script,
`study` the Optuna study, and `output` what the user gets.
"""
