"""tftune.reports: everything that shows.

A pure `build_*_model(...)` step, then renderers that only format (`render(model) -> str`).
Writing files belongs to the CLI. Nothing here imports tensorflow.
"""
