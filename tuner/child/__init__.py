"""tftune.tuner.child: the code that runs inside the user's process.

The parent side of a trial starts the child (`bootstrap.main`); ``tftune.apply()`` calls
`patcher.activate` in the user's own process. Either way a `patcher.Patcher` applies a
`Config` by patching tf.data and Keras as the script imports them, split by job:

- `bootstrap`: the child's main: the spec, the modes (discover, measure, apply,
  profile), running the script, the discovery recorder and the profiler;
- `patcher`: the `Patcher` and its installation (`imports`: the post-import hook);
- `state`: the hooks the patches call and the state they share;
- `datasets`: the Dataset ops, readers and call sites, as written and as configured;
- `streams`: the iterated dataset, prepared and numbered as a stream;
- `step_clock`, `ring`: the step clock, eager and in-graph;
- `distribute`: tf.distribute's iterators on the clock;
- `keras_fit`, `nanwatch`: the precision policy, PyDataset, ``fit``'s NaN callback and
  output-layer check, and the NaN watch of custom loops;
- `roles`: which stream is training.

Nothing here imports TensorFlow at module level.
"""
