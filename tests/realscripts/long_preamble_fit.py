"""Text classification with a vocabulary built by hand before training.

The "basic text classification" tutorial's shape, with the vocabulary counted in plain
Python instead of `adapt`: an eager loop over the whole labeled dataset decodes every
review, splits it and counts the words in a `collections.Counter` (several passes, as
when a corpus is read to collect n-gram statistics). Only then is a TextVectorization
layer built with that vocabulary, mapped over the dataset, and the model fitted. The
counting lasts well over 20 s with the default `--vocab-passes`.
"""

import time

START = time.perf_counter()

import argparse
import collections
import os
import re
import string

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--vocab-passes", type=int, default=20,
                    help="passes over the corpus when counting words (and bigrams)")
parser.add_argument("--max-tokens", type=int, default=2000)
parser.add_argument("--sequence-length", type=int, default=64)
args = parser.parse_args()

text_dir = os.path.join(args.data, "text")
raw_train_ds = keras.utils.text_dataset_from_directory(
    text_dir, batch_size=args.batch_size, validation_split=0.2, subset="training", seed=7
)
raw_val_ds = keras.utils.text_dataset_from_directory(
    text_dir, batch_size=args.batch_size, validation_split=0.2, subset="validation", seed=7
)

PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def clean(text):
    text = text.lower().replace("<br />", " ")
    return PUNCT.sub("", text)


# Count words and bigrams, one review at a time.
counter = collections.Counter()
started = time.perf_counter()
for vocab_pass in range(args.vocab_passes):
    for text, label in raw_train_ds.unbatch():
        words = clean(text.numpy().decode("utf-8")).split()
        counter.update(words)
        counter.update(f"{a} {b}" for a, b in zip(words, words[1:]))
print(f"counted {len(counter)} distinct tokens in {time.perf_counter() - started:.1f} s "
      f"({args.vocab_passes} passes)")

vocab = [word for word, _ in counter.most_common(args.max_tokens - 2)]
vectorize = keras.layers.TextVectorization(
    standardize=lambda x: tf.strings.regex_replace(
        tf.strings.regex_replace(tf.strings.lower(x), "<br />", " "),
        f"[{re.escape(string.punctuation)}]", ""),
    ngrams=2,
    output_mode="int",
    output_sequence_length=args.sequence_length,
    vocabulary=vocab,
)

AUTOTUNE = tf.data.AUTOTUNE
train_ds = raw_train_ds.map(lambda x, y: (vectorize(x), y), num_parallel_calls=AUTOTUNE)
val_ds = raw_val_ds.map(lambda x, y: (vectorize(x), y), num_parallel_calls=AUTOTUNE)
train_ds = train_ds.prefetch(AUTOTUNE)
val_ds = val_ds.cache().prefetch(AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input(shape=(args.sequence_length,), dtype="int64"),
        keras.layers.Embedding(args.max_tokens, 64),
        keras.layers.Conv1D(128, 5, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1),
    ]
)


class ExamplesSeen(keras.metrics.Metric):
    """How many examples the batches held (reset each epoch, like every metric)."""

    def __init__(self, name="examples", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(tf.cast(tf.shape(y_true)[0], "float32"))

    def result(self):
        return self.count


model.compile(
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    optimizer="adam",
    metrics=[keras.metrics.BinaryAccuracy(threshold=0.0), ExamplesSeen()],
)


class TrainingClock(keras.callbacks.Callback):
    """Time spent in training batches (each epoch's start included, validation not)."""

    def __init__(self, warmup_steps=5):
        super().__init__()
        self.warmup_steps = warmup_steps
        self.times, self.steps, self.examples, self.seconds = [], 0, 0, 0.0
        self.first_batch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.last, self.seen = time.perf_counter(), 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_batch is None:
            self.first_batch = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        seen = int(logs["examples"])
        self.times.append(now - self.last)
        if len(self.times) > self.warmup_steps:
            self.steps += 1
            self.examples += seen - self.seen
            self.seconds += now - self.last
        self.last, self.seen = now, seen


clock = TrainingClock()
model.fit(train_ds, validation_data=val_ds, epochs=args.epochs, callbacks=[clock], verbose=2)

print(f"preamble {clock.first_batch - START:.1f} s")
median_ms = 1000 * float(np.median(clock.times[2:] or clock.times))
print(f"trained {len(clock.times)} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {clock.examples / max(clock.seconds, 1e-9):.1f} ex/s over {clock.steps} steps")
