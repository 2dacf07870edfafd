"""Sentiment classification of text files, the Keras text tutorial's way.

text_dataset_from_directory, a TextVectorization layer adapted on the training text
(`vectorize.adapt(...)` iterates the whole text dataset once before training), then the
layer applied in the pipeline with `ds.map(lambda x, y: (vectorize(x), y))`, and fit.
"""

import argparse
import os
import re
import string
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--max-tokens", type=int, default=2000)
parser.add_argument("--sequence-length", type=int, default=100)
args = parser.parse_args()

text_dir = os.path.join(args.data, "text")
raw_train_ds = keras.utils.text_dataset_from_directory(
    text_dir, batch_size=args.batch_size, validation_split=0.2, subset="training", seed=42
)
raw_val_ds = keras.utils.text_dataset_from_directory(
    text_dir, batch_size=args.batch_size, validation_split=0.2, subset="validation", seed=42
)
for text_batch, label_batch in raw_train_ds.take(1):
    print("review:", text_batch.numpy()[0][:80], "label:", label_batch.numpy()[0])


def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")


vectorize = keras.layers.TextVectorization(
    standardize=custom_standardization,
    max_tokens=args.max_tokens,
    output_mode="int",
    output_sequence_length=args.sequence_length,
)
train_text = raw_train_ds.map(lambda x, y: x)
vectorize.adapt(train_text)
print("vocabulary size:", vectorize.vocabulary_size())

AUTOTUNE = tf.data.AUTOTUNE
train_ds = raw_train_ds.map(lambda x, y: (vectorize(x), y))
val_ds = raw_val_ds.map(lambda x, y: (vectorize(x), y))
train_ds = train_ds.cache().prefetch(buffer_size=AUTOTUNE)
val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input(shape=(args.sequence_length,), dtype="int64"),
        keras.layers.Embedding(args.max_tokens, 128),
        keras.layers.Dropout(0.2),
        keras.layers.Conv1D(128, 5, padding="same", activation="relu"),
        keras.layers.Conv1D(128, 5, padding="same", activation="relu"),
        keras.layers.GlobalMaxPooling1D(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    optimizer=keras.optimizers.Adam(1e-3),
    metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)],
)


class StepTimer(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.times, self.last = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now


timer = StepTimer()
model.fit(train_ds, validation_data=val_ds, epochs=args.epochs, callbacks=[timer], verbose=2)
median_ms = 1000 * float(np.median(timer.times[2:] or timer.times))
print(f"trained {len(timer.times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
