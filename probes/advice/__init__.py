"""tftune.probes.advice: what a trace means and what to change.

The finders over the stage tree and the step breakdown, the fixes (`Recommendation`) and
their ideas, next moves when the input pipeline is not the limit, service sizing, and
`analysis`: the whole `tftune analyze` pass that ends in the analysis document.
"""
