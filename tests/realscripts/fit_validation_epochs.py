"""Keyword spotting on short audio clips, the "simple audio recognition" tutorial's way.

`audio_dataset_from_directory` with `subset="both"`, log-mel spectrograms computed in a
`map` over the batches (for training and validation alike, not cached), a small conv
net, then `model.fit(train_ds, validation_data=val_ds, epochs=E)`: short epochs, and a
validation pass over a large held-out split after every one of them. `model.evaluate`
at the end. A callback times the training batches only.
"""

import time

START = time.perf_counter()

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--validation-split", type=float, default=0.5)
args = parser.parse_args()

SAMPLE_RATE = 16000
train_ds, val_ds = keras.utils.audio_dataset_from_directory(
    directory=os.path.join(args.data, "speech"),
    batch_size=args.batch_size,
    validation_split=args.validation_split,
    seed=0,
    output_sequence_length=SAMPLE_RATE,
    subset="both",
)
label_names = np.array(train_ds.class_names)
print("label names:", label_names)

MEL = tf.signal.linear_to_mel_weight_matrix(
    num_mel_bins=64, num_spectrogram_bins=513, sample_rate=SAMPLE_RATE,
    lower_edge_hertz=20.0, upper_edge_hertz=8000.0,
)


def get_log_mel(waveform):
    spectrogram = tf.signal.stft(waveform, frame_length=1024, frame_step=64, fft_length=1024)
    mel = tf.tensordot(tf.abs(spectrogram), MEL, 1)
    return tf.math.log(mel + 1e-6)[..., tf.newaxis]


def make_spec_ds(ds):
    return ds.map(
        lambda audio, label: (get_log_mel(tf.squeeze(audio, axis=-1)), label),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


train_spectrogram_ds = make_spec_ds(train_ds).prefetch(tf.data.AUTOTUNE)
val_spectrogram_ds = make_spec_ds(val_ds).prefetch(tf.data.AUTOTUNE)

for example_spectrograms, example_labels in train_spectrogram_ds.take(1):
    input_shape = example_spectrograms.shape[1:]
print("input shape:", input_shape)

norm_layer = keras.layers.Normalization()
norm_layer.adapt(data=train_spectrogram_ds.take(2).map(lambda spec, label: spec))

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        keras.layers.Resizing(32, 32),
        norm_layer,
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Dropout(0.25),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(len(label_names)),
    ]
)


class CountExamples(keras.metrics.Metric):
    """Examples seen this epoch, from the batches themselves."""

    def __init__(self, name="n", **kwargs):
        super().__init__(name=name, **kwargs)
        self.n = self.add_variable(shape=(), initializer="zeros", name="n")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.n.assign_add(tf.cast(tf.shape(y_true)[0], "float32"))

    def result(self):
        return self.n


class TrainingTime(keras.callbacks.Callback):
    """Wall time of the training batches, and how many examples they held.

    Each epoch's clock starts at on_epoch_begin (the first batch's wait counts as
    training) and stops at its last training batch, before the validation pass."""

    def __init__(self, skip_epochs=1):
        super().__init__()
        self.skip_epochs = skip_epochs
        self.step_times, self.seconds, self.examples, self.steps = [], 0.0, 0, 0
        self.first_batch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.last, self.seen = epoch, time.perf_counter(), 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_batch is None:
            self.first_batch = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.step_times.append(now - self.last)
        seen = int(logs["n"])
        if self.epoch >= self.skip_epochs:
            self.seconds += now - self.last
            self.examples += seen - self.seen
            self.steps += 1
        self.last, self.seen = now, seen

    def on_test_begin(self, logs=None):
        self.val_start = time.perf_counter()

    def on_test_end(self, logs=None):
        print(f"validation took {time.perf_counter() - self.val_start:.2f} s")


model.compile(
    optimizer=keras.optimizers.Adam(),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy", CountExamples()],
)
timer = TrainingTime(skip_epochs=1 if args.epochs > 1 else 0)
history = model.fit(
    train_spectrogram_ds,
    validation_data=val_spectrogram_ds,
    epochs=args.epochs,
    callbacks=[timer],
    verbose=2,
)
print("evaluate:", model.evaluate(val_spectrogram_ds, return_dict=True, verbose=0))

print(f"preamble {timer.first_batch - START:.1f} s")
median_ms = 1000 * float(np.median(timer.step_times[2:] or timer.step_times))
print(f"trained {len(timer.step_times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {timer.examples / max(timer.seconds, 1e-9):.1f} ex/s over {timer.steps} steps")
