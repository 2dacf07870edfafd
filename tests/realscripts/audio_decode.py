"""Keyword-spotting style audio classifier on WAV files.

Lists the files, reads and decodes each one and turns it into a log spectrogram in a
plain `ds.map(load_wav)` (no num_parallel_calls) and batches; a custom loop trains a small
conv net, and evaluates on the validation files every few epochs.
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--eval-every", type=int, default=5)
args = parser.parse_args()

audio_dir = os.path.join(args.data, "audio")
commands = sorted(os.listdir(audio_dir))
print("commands:", commands)

filenames = tf.io.gfile.glob(os.path.join(audio_dir, "*", "*.wav"))
rng = np.random.default_rng(42)
filenames = [filenames[i] for i in rng.permutation(len(filenames))]
num_val = len(filenames) // 5
train_files, val_files = filenames[num_val:], filenames[:num_val]
print(f"{len(train_files)} training files, {len(val_files)} validation files")


def get_label(path):
    parts = tf.strings.split(path, os.path.sep)
    return tf.argmax(tf.cast(parts[-2] == commands, tf.int32))


def load_wav(path):
    audio, _ = tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1)
    audio = tf.squeeze(audio, axis=-1)
    audio = audio - tf.reduce_mean(audio)
    spectrogram = tf.abs(tf.signal.stft(audio, frame_length=256, frame_step=64, fft_length=512))
    mel = tf.tensordot(spectrogram, mel_matrix, 1)
    log_mel = tf.math.log(mel + 1e-6)
    log_mel = (log_mel - tf.reduce_mean(log_mel)) / (tf.math.reduce_std(log_mel) + 1e-6)
    return log_mel[..., tf.newaxis], get_label(path)


mel_matrix = tf.signal.linear_to_mel_weight_matrix(
    num_mel_bins=64, num_spectrogram_bins=257, sample_rate=16000
)

train_ds = tf.data.Dataset.from_tensor_slices(train_files)
train_ds = train_ds.shuffle(len(train_files), seed=0)
train_ds = train_ds.map(load_wav)
train_ds = train_ds.batch(args.batch_size)
val_ds = tf.data.Dataset.from_tensor_slices(val_files).map(load_wav).batch(args.batch_size)

for spectrograms, _ in train_ds.take(1):
    input_shape = spectrograms.shape[1:]
print("input shape:", input_shape)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        keras.layers.Resizing(32, 32),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(commands)),
    ]
)
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
val_accuracy = keras.metrics.SparseCategoricalAccuracy()


@tf.function
def train_step(spectrograms, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(spectrograms, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
    return loss


step_times = []
for epoch in range(args.epochs):
    last = time.perf_counter()
    for spectrograms, labels in train_ds:
        loss = train_step(spectrograms, labels)
        now = time.perf_counter()
        step_times.append(now - last)
        last = now
    if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.epochs:
        val_accuracy.reset_state()
        for spectrograms, labels in val_ds:
            val_accuracy.update_state(labels, model(spectrograms, training=False))
        print(
            f"epoch {epoch + 1}: loss {float(loss):.4f} val_acc {float(val_accuracy.result()):.3f}"
        )

median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {len(step_times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
