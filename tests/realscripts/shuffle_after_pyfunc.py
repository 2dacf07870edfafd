"""Text classification with a Python tokenizer, shuffled after the map.

Reviews are read from files, tokenized by a Python function wrapped in
`tf.py_function` (lower-case, strip punctuation, split, hash words and bigrams into
buckets), in a plain sequential `map`; then `shuffle` with a buffer of most of the
dataset, `padded_batch`, `prefetch`. Shuffling after the expensive map looks harmless,
but the buffer must be filled at the start of every epoch, one Python call at a time,
before the first batch comes out. The loop is a `tf.function` step over the dataset.
"""

import time

START = time.perf_counter()

import argparse
import os
import re
import string
import zlib

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--shuffle-buffer", type=int, default=1500)
parser.add_argument("--buckets", type=int, default=5000)
parser.add_argument("--max-len", type=int, default=48)
args = parser.parse_args()

# The file names and labels, listed in Python.
paths, labels = [], []
for label, cls in enumerate(["neg", "pos"]):
    folder = os.path.join(args.data, "text", cls)
    for name in sorted(os.listdir(folder)):
        paths.append(os.path.join(folder, name))
        labels.append(label)
print(f"{len(paths)} reviews")

PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def tokenize(text):
    text = PUNCT.sub(" ", text.numpy().decode("utf-8").lower().replace("<br />", " "))
    words = text.split()
    tokens = words + [f"{a}_{b}" for a, b in zip(words, words[1:])]
    ids = [1 + zlib.crc32(t.encode()) % (args.buckets - 1) for t in tokens[: args.max_len]]
    return np.array(ids, dtype=np.int64)


def load_and_tokenize(path, label):
    text = tf.io.read_file(path)
    ids = tf.py_function(tokenize, [text], tf.int64)
    ids.set_shape([None])
    return ids, label


train_ds = tf.data.Dataset.from_tensor_slices((paths, labels))
train_ds = train_ds.map(load_and_tokenize)
train_ds = train_ds.shuffle(buffer_size=args.shuffle_buffer)
train_ds = train_ds.padded_batch(args.batch_size, padded_shapes=([args.max_len], []))
train_ds = train_ds.prefetch(tf.data.AUTOTUNE)

model = keras.Sequential(
    [
        keras.Input(shape=(args.max_len,), dtype="int64"),
        keras.layers.Embedding(args.buckets, 32, mask_zero=True),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
accuracy = keras.metrics.BinaryAccuracy(threshold=0.0)


@tf.function
def train_step(ids, y):
    with tf.GradientTape() as tape:
        logits = tf.squeeze(model(ids, training=True), axis=-1)
        loss = loss_fn(tf.cast(y, tf.float32), logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    accuracy.update_state(y, logits)
    return loss


WARMUP_STEPS = 5
step_times = []
examples, seconds, counted, first_step, step = 0, 0.0, 0, None, 0
for epoch in range(args.epochs):
    epoch_start = last = time.perf_counter()
    if first_step is None:
        first_step = epoch_start
    for ids, y in train_ds:
        loss = train_step(ids, y)
        now = time.perf_counter()
        if last == epoch_start:
            first_batch_s = now - epoch_start
        step_times.append(now - last)
        if step >= WARMUP_STEPS:
            examples += int(ids.shape[0])
            seconds += now - last
            counted += 1
        last = now
        step += 1
        if args.steps and step >= args.steps:
            break
    # The epoch's end is training time too: its last next() waits until the pipeline
    # says the data is exhausted (0.3-0.5 s in about half the epochs here).
    if step > WARMUP_STEPS:
        seconds += time.perf_counter() - last
    print(f"epoch {epoch + 1}: loss {float(loss):.4f} acc {float(accuracy.result()):.3f} "
          f"({time.perf_counter() - epoch_start:.1f} s, first batch after {first_batch_s:.2f} s)")
    accuracy.reset_state()
    if args.steps and step >= args.steps:
        break

print(f"preamble {first_step - START:.1f} s")
median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {step} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
print(f"training rate {examples / max(seconds, 1e-9):.1f} ex/s over {counted} steps")
