"""Custom training with tf.distribute.MirroredStrategy, after the TensorFlow tutorial.

Two logical CPU devices stand in for two GPUs. The global batch is split between the
replicas by `strategy.experimental_distribute_dataset`; one `tf.function` step runs
`strategy.run` on each replica and `strategy.reduce`s the loss; after every epoch a
test loop runs over the test dataset the same way (forward pass only).
"""

import time

START = time.perf_counter()

import argparse
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
parser.add_argument("--batch-size-per-replica", type=int, default=32)
args = parser.parse_args()

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)
logical = [d.name for d in tf.config.list_logical_devices("CPU")]
strategy = tf.distribute.MirroredStrategy(logical)
print(f"Number of devices: {strategy.num_replicas_in_sync}")

with np.load(os.path.join(args.data, "shapes.npz")) as f:
    train_images, train_labels = f["x_train"], f["y_train"]
    test_images, test_labels = f["x_test"], f["y_test"]
train_images = train_images[..., None].astype("float32") / 255.0
test_images = test_images[..., None].astype("float32") / 255.0

BUFFER_SIZE = len(train_images)
GLOBAL_BATCH_SIZE = args.batch_size_per_replica * strategy.num_replicas_in_sync

train_dataset = (
    tf.data.Dataset.from_tensor_slices((train_images, train_labels))
    .shuffle(BUFFER_SIZE)
    .batch(GLOBAL_BATCH_SIZE)
)
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(
    GLOBAL_BATCH_SIZE
)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


def create_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(64, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(5),
        ]
    )


with strategy.scope():
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    )

    def compute_loss(labels, predictions):
        per_example_loss = loss_object(labels, predictions)
        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)

    test_loss = tf.keras.metrics.Mean(name="test_loss")
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
    model = create_model()
    optimizer = tf.keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)  # its slots, mirrored, before the first step


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_accuracy.update_state(labels, predictions)
    return loss


def test_step(inputs):
    images, labels = inputs
    predictions = model(images, training=False)
    test_loss.update_state(loss_object(labels, predictions))
    test_accuracy.update_state(labels, predictions)


@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


@tf.function
def distributed_test_step(dataset_inputs):
    return strategy.run(test_step, args=(dataset_inputs,))


def batch_examples(inputs):
    """Examples in one distributed batch: the replicas' shares added up."""
    images, _ = inputs
    return sum(int(t.shape[0]) for t in strategy.experimental_local_results(images))


WARMUP_STEPS = 5
step_times = []
examples, seconds, counted, first_step, step = 0, 0.0, 0, None, 0
for epoch in range(args.epochs):
    total_loss, num_batches = 0.0, 0
    last = time.perf_counter()
    if first_step is None:
        first_step = last
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
        num_batches += 1
        now = time.perf_counter()
        step_times.append(now - last)
        if step >= WARMUP_STEPS:
            examples += batch_examples(x)
            seconds += now - last
            counted += 1
        last = now
        step += 1
        if args.steps and step >= args.steps:
            break
    # The epoch's end is training time too: its last next() waits until the pipeline
    # says the data is exhausted (the distributed iterator: 0.5-0.7 s an epoch here).
    if step > WARMUP_STEPS:
        seconds += time.perf_counter() - last
    train_loss = total_loss / num_batches

    for x in test_dist_dataset:
        distributed_test_step(x)

    print(f"Epoch {epoch + 1}, Loss: {float(train_loss):.4f}, "
          f"Accuracy: {float(train_accuracy.result()) * 100:.2f}, "
          f"Test Loss: {float(test_loss.result()):.4f}, "
          f"Test Accuracy: {float(test_accuracy.result()) * 100:.2f}")
    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()
    if args.steps and step >= args.steps:
        break

print(f"preamble {first_step - START:.1f} s")
median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {step} steps, batch {GLOBAL_BATCH_SIZE}, median step {median_ms:.2f} ms")
print(f"training rate {examples / max(seconds, 1e-9):.1f} ex/s over {counted} steps")
