"""Recorded traces of training loops whose advice must fit the loop (issue 28, item 5),
beside tests/tracegen.py and tests/tracegen_real.py.

* `eager_step`: a `GradientTape` step whose author left `@tf.function` commented out, so
  every op of the model, the loss and the optimizer is dispatched from Python.
* `mirrored_loop`: the tensorflow/docs custom-training tutorial's loop under a
  `MirroredStrategy` over two logical CPUs: one `strategy.run` per `tf.function` call,
  fed by `strategy.experimental_distribute_dataset`.
* `py_tokenizer_parallel`: a Python tokenizer in `tf.py_function`, mapped in parallel
  (GIL-bound), that keeps the step waiting: it must not be sized for tf.data service
  workers, which cannot run a Python function.

They register in `tracegen.CASES`, so the `trace_case` fixture serves their recorded
traces (tests/fixtures/traces/).
"""

from __future__ import annotations

import tracegen

# The custom-loop guide's small CNN trained by a loop with GradientTape; the step runs
# eagerly (the decorator is commented out, as it is in many scripts being debugged).
tracegen.case(
    "eager_step",
    """
    import keras
    X = tf.random.stateless_uniform([1024, 28, 28, 1], [1, 2])
    Y = tf.random.stateless_uniform([1024], [3, 4], 0, 5, tf.int32)
    model = keras.Sequential([
        keras.Input((28, 28, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(), keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"), keras.layers.Dense(5),
    ])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(1e-3)

    def make_dataset():
        ds = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(1024).repeat()
        return ds.batch(64).prefetch(tf.data.AUTOTUNE)

    # @tf.function
    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    """,
    steps=15,
)

# The distributed custom-training tutorial: MirroredStrategy over two logical CPUs, the
# global batch distributed by experimental_distribute_dataset, one strategy.run per call
# of the compiled step.
tracegen.case(
    "mirrored_loop",
    """
    def main(logdir, steps):
        import keras
        (cpu,) = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        global_batch = 64
        x = tf.random.stateless_uniform([2048, 28, 28, 1], [3, 4])
        y = tf.random.stateless_uniform([2048], [5, 6], 0, 10, tf.int64)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048)
        dist_ds = strategy.experimental_distribute_dataset(ds.batch(global_batch))
        with strategy.scope():
            model = keras.Sequential([
                keras.Input((28, 28, 1)), keras.layers.Flatten(),
                keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10),
            ])
            optimizer = keras.optimizers.Adam()
            optimizer.build(model.trainable_variables)  # not lazily inside the tf.function
            loss_object = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="none"
            )

        def train_step(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                per_example = loss_object(labels, model(images, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        @tf.function
        def distributed_train_step(inputs):
            losses = strategy.run(train_step, args=(inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

        # One epoch of the finite dataset, as the tutorial's `for x in dist_ds:` takes it;
        # each profiled step is the whole iteration, next() included.
        it = iter(dist_ds)
        total_loss = 0.0
        for _ in range(3):
            total_loss += distributed_train_step(next(it))
        tf.profiler.experimental.start(logdir)
        for step in range(steps):
            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                total_loss += distributed_train_step(next(it))
        tf.profiler.experimental.stop()
    """,
    steps=15,
)

# A Python tokenizer in tf.py_function, mapped in parallel: the threads queue on the GIL,
# and the step waits for it.
tracegen.case(
    "py_tokenizer_parallel",
    tracegen.PY_TOKENIZER
    + """
def make_dataset():
    ds = tf.data.Dataset.from_tensor_slices(LINES).repeat()
    ds = ds.map(lambda s: tf.py_function(tokenize_text, [s], tf.int64),
                num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(16).prefetch(tf.data.AUTOTUNE)
""",
    steps=15,
)
