"""Recorded traces of public-style training scripts (issue 19), beside tests/tracegen.py.

Each case is written the way the scripts of tests/realscripts/ are (image folders,
TextVectorization, WAV decoding, a GAN, an eager loop with Python preprocessing), plus
many small files read one after another and a small Keras model that is compute-bound.
They register in `tracegen.CASES`, so the `trace_case` fixture serves their recorded
traces (tests/fixtures/traces/). The work is sized so that the diagnosis a reader of
the script would give is unambiguous on a loaded 2-core machine, and each recording
takes a few seconds.
"""

from __future__ import annotations

import tracegen

# Many small files (one record each, as a per-sample export leaves them), opened one
# after another by interleave(cycle_length=1); the map after the batch already runs in
# parallel, so the only thing left to fix is how the files are read.
tracegen.case(
    "small_files",
    """
    import random
    SPEC = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([], tf.int64)}

    def _write(n=600):
        rng = random.Random(0)
        os.makedirs("shards", exist_ok=True)
        paths = []
        for i in range(n):
            path = f"shards/sample-{i:05d}.tfrecord"
            feat = {
                "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rng.randbytes(2048)])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10])),
            }
            with tf.io.TFRecordWriter(path) as w:
                w.write(tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString())
            paths.append(path)
        return paths

    def parse_batch(records):
        ex = tf.io.parse_example(records, SPEC)
        return tf.io.decode_raw(ex["x"], tf.uint8), ex["y"]

    def make_dataset():
        files = tf.data.Dataset.from_tensor_slices(_write()).repeat()
        ds = files.interleave(tf.data.TFRecordDataset, cycle_length=1)
        ds = ds.batch(64).map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE)
    """,
    steps=12,
)

# Image class folders read with list_files and a sequential map (the "load images"
# tutorial before its performance section): JPEG decode and resize per file.
tracegen.case(
    "image_folders",
    """
    def _folders(n=96):
        for c in ("cats", "dogs"):
            os.makedirs(f"images/{c}", exist_ok=True)
        imgs = tf.cast(tf.random.stateless_uniform([n, 160, 160, 3], [1, 2], 0, 255), tf.uint8)
        for i in range(n):
            c = ("cats", "dogs")[i % 2]
            tf.io.write_file(f"images/{c}/{i:04d}.jpg", tf.io.encode_jpeg(imgs[i]))

    CLASSES = tf.constant(["cats", "dogs"])

    def process_path(path):
        label = tf.argmax(tf.cast(tf.strings.split(path, "/")[-2] == CLASSES, tf.int32))
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.image.resize(img, [128, 128]) / 255.0
        return img, label

    def make_dataset():
        _folders()
        ds = tf.data.Dataset.list_files("images/*/*.jpg", seed=0).repeat()
        return ds.map(process_path).batch(16)

    def train_step(batch):
        return tf.reduce_mean(batch[0])
    """,
    steps=12,
)

# Text classification with a Keras TextVectorization layer adapted on the text and
# applied in a sequential map over batches of raw strings.
tracegen.case(
    "text_vectorization",
    """
    import keras
    WORDS = ["The", "movie", "was", "great!", "terrible,", "acting", "<br />", "plot", "fun"]
    TEXTS = [" ".join(WORDS[(i * 7 + j) % 9] for j in range(400 + i % 50)) for i in range(256)]

    def standardize(text):
        text = tf.strings.lower(text)
        text = tf.strings.regex_replace(text, "<br />", " ")
        return tf.strings.regex_replace(text, "[!,.]", "")

    def make_dataset():
        vectorize = keras.layers.TextVectorization(
            max_tokens=1000, standardize=standardize, output_sequence_length=128
        )
        raw = tf.data.Dataset.from_tensor_slices((TEXTS, [i % 2 for i in range(256)]))
        vectorize.adapt(raw.map(lambda x, y: x).batch(64))
        ds = raw.repeat().batch(64)
        return ds.map(lambda x, y: (vectorize(x), y))
    """,
    steps=12,
)

# Speech commands style: WAV files listed, read, decoded and turned into log-mel
# spectrograms in a sequential map.
tracegen.case(
    "audio_wav",
    """
    import math

    def _wavs(n=32, rate=16000):
        os.makedirs("wavs", exist_ok=True)
        t = tf.range(rate, dtype=tf.float32) / rate
        for i in range(n):
            tone = 0.5 * tf.sin(2 * math.pi * (200.0 + 40 * i) * t)
            tf.io.write_file(f"wavs/{i:03d}.wav", tf.audio.encode_wav(tone[:, None], rate))

    MEL = tf.signal.linear_to_mel_weight_matrix(64, 257, 16000, 20.0, 7600.0)

    def load_wav(path):
        audio, _ = tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1)
        audio = tf.squeeze(audio, -1)
        stft = tf.signal.stft(audio, frame_length=400, frame_step=80, fft_length=512)
        return tf.math.log(tf.matmul(tf.abs(stft), MEL) + 1e-6)

    def make_dataset():
        _wavs()
        ds = tf.data.Dataset.list_files("wavs/*.wav", seed=0).repeat()
        return ds.map(load_wav).batch(8)
    """,
    steps=10,
)

# The DCGAN tutorial's step: generator and discriminator, two Adam optimizers, over
# shuffled, batched, prefetched in-memory images. The step is the work.
tracegen.case(
    "gan",
    """
    import keras
    IMAGES = tf.random.stateless_uniform([512, 28, 28, 1], [3, 4], -1.0, 1.0)

    def make_dataset():
        return tf.data.Dataset.from_tensor_slices(IMAGES).shuffle(512).repeat().batch(
            64, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    generator = keras.Sequential([
        keras.Input((64,)), keras.layers.Dense(7 * 7 * 32, use_bias=False),
        keras.layers.BatchNormalization(), keras.layers.LeakyReLU(),
        keras.layers.Reshape((7, 7, 32)),
        keras.layers.Conv2DTranspose(32, 5, strides=2, padding="same", use_bias=False),
        keras.layers.BatchNormalization(), keras.layers.LeakyReLU(),
        keras.layers.Conv2DTranspose(1, 5, strides=2, padding="same", activation="tanh"),
    ])
    discriminator = keras.Sequential([
        keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 5, strides=2, padding="same"),
        keras.layers.LeakyReLU(), keras.layers.Conv2D(64, 5, strides=2, padding="same"),
        keras.layers.LeakyReLU(), keras.layers.Flatten(), keras.layers.Dense(1),
    ])
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    g_opt, d_opt = keras.optimizers.Adam(2e-4), keras.optimizers.Adam(2e-4)

    @tf.function
    def train_step(images):
        noise = tf.random.normal([64, 64])
        with tf.GradientTape() as gt, tf.GradientTape() as dt:
            fake = generator(noise, training=True)
            real_out = discriminator(images, training=True)
            fake_out = discriminator(fake, training=True)
            g_loss = bce(tf.ones_like(fake_out), fake_out)
            d_loss = bce(tf.ones_like(real_out), real_out) + bce(tf.zeros_like(fake_out), fake_out)
        g_grads = gt.gradient(g_loss, generator.trainable_variables)
        d_grads = dt.gradient(d_loss, discriminator.trainable_variables)
        g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
        d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
        return g_loss, d_loss
    """,
    steps=10,
)

# An eager loop that pulls each batch to NumPy and augments it image by image in Python
# before a compiled step (code ported from a NumPy pipeline), recorded with the Python
# tracer and no step markers, as such a script is profiled.
tracegen.case(
    "eager_loop",
    """
    import numpy as np
    IMAGES = tf.cast(tf.random.stateless_uniform([256, 48, 48, 3], [5, 6], 0, 255), tf.uint8)
    W = tf.Variable(tf.random.normal([40 * 40 * 3, 10], stddev=0.01))

    def augment_batch(images, rng):
        out = np.empty((len(images), 40, 40, 3), np.float32)
        for i, img in enumerate(images):
            top, left = rng.integers(0, 9, size=2)
            patch = img[top:top + 40, left:left + 40].astype(np.float32) / 255.0
            if rng.random() < 0.5:
                patch = patch[:, ::-1]
            patch = np.clip(patch * rng.uniform(0.8, 1.2) + rng.uniform(-0.1, 0.1, 3), 0, 1)
            out[i] = np.tanh(np.sqrt(patch + 1e-3))
        return out

    @tf.function
    def train_step(x):
        return tf.reduce_mean(tf.matmul(tf.reshape(x, [-1, 40 * 40 * 3]), W))

    def main(logdir, steps):
        ds = tf.data.Dataset.from_tensor_slices(IMAGES).repeat().batch(32).prefetch(2)
        rng = np.random.default_rng(0)
        it = iter(ds)
        for _ in range(3):
            train_step(augment_batch(next(it).numpy(), rng))
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=1
        )
        tf.profiler.experimental.start(logdir, options=options)
        for _ in range(steps):
            images = next(it)
            batch = augment_batch(images.numpy(), rng)
            train_step(batch)
        tf.profiler.experimental.stop()
    """,
    steps=12,
)

# A small Keras model trained with fit, one step per call: the input is one in-memory
# batch, repeated; each step is many tiny ops, and Keras' per-step work on the host
# sits between the calls. Profiled from a callback through Keras' own trace functions.
tracegen.case(
    "keras_small_steps",
    """
    import keras
    from keras.src.backend.tensorflow import tensorboard as ktb

    class Profile(keras.callbacks.Callback):
        def __init__(self, logdir, first, last):
            super().__init__()
            self.logdir, self.first, self.last, self.ctx = logdir, first, last, None

        def on_train_batch_begin(self, batch, logs=None):
            if batch == self.first:
                ktb.start_trace(self.logdir)
            if self.first <= batch <= self.last:
                self.ctx = ktb.start_batch_trace(batch)

        def on_train_batch_end(self, batch, logs=None):
            if self.ctx is not None:
                ktb.stop_batch_trace(self.ctx)
                self.ctx = None
            if batch == self.last:
                ktb.stop_trace(True)

    def main(logdir, steps):
        x = tf.random.stateless_normal([2048, 32], [7, 8])
        y = tf.cast(tf.reduce_sum(x, 1) > 0, tf.int32)
        # One in-memory batch, repeated, read inline by the step: no producer thread that a
        # loaded machine could starve, so the input share stays near zero everywhere.
        ds = tf.data.Dataset.from_tensors((x[:32], y[:32])).repeat()
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        ds = ds.with_options(options)
        layers = [keras.Input((32,))]
        for _ in range(8):
            layers += [keras.layers.Dense(32), keras.layers.LayerNormalization(),
                       keras.layers.Activation("gelu")]
        model = keras.Sequential(layers + [keras.layers.Dense(2)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        model.fit(ds, epochs=1, steps_per_epoch=steps + 8, verbose=0,
                  callbacks=[Profile(logdir, 5, 5 + steps - 1)])
    """,
    steps=30,
)
