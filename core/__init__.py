"""What every layer shares (`tftune.core`): user errors, the files users hand tftune and
the files it writes, and the vocabulary (categories, input-bound bands, stage names, trial
states). It imports nothing of tftune's other packages, nor TensorFlow."""
