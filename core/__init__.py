"""What every layer shares (`tftune.core`): user errors, the files users hand tftune and
the files it writes, the vocabulary (categories, input-bound bands, stage names, trial
states), the strict reading of the documents (`document_reading`) and the two documents'
type trees (`analysis_document`, `tuning_document`). It imports nothing of tftune's
other packages, nor TensorFlow."""
