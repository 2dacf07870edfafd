"""What every layer shares (`tftune.core`): user errors, the files users hand tftune and
the files it writes, the vocabulary (categories, input-bound bands, stage names, trial
states) and the analysis document (`analysis_document`), with the strict reader the
documents share (`document_reading`). It imports nothing of tftune's other packages, nor
TensorFlow."""
