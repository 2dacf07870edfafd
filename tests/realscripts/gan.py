"""A small DCGAN on 28x28 shape images, after the TensorFlow DCGAN tutorial.

Generator and discriminator each have their own Adam; one compiled step samples noise,
runs both networks and applies both updates. The real images come from an in-memory
dataset (shuffle, batch, prefetch).
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--noise-dim", type=int, default=64)
args = parser.parse_args()

with np.load(os.path.join(args.data, "shapes.npz")) as f:
    train_images = f["x_train"]
train_images = (train_images.reshape(-1, 28, 28, 1).astype("float32") - 127.5) / 127.5

BUFFER_SIZE = len(train_images)
train_dataset = (
    tf.data.Dataset.from_tensor_slices(train_images)
    .shuffle(BUFFER_SIZE, seed=0)
    .batch(args.batch_size, drop_remainder=True)
    .prefetch(tf.data.AUTOTUNE)
)


def make_generator():
    return keras.Sequential(
        [
            keras.Input(shape=(args.noise_dim,)),
            keras.layers.Dense(7 * 7 * 64, use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.LeakyReLU(),
            keras.layers.Reshape((7, 7, 64)),
            keras.layers.Conv2DTranspose(32, 5, strides=2, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.LeakyReLU(),
            keras.layers.Conv2DTranspose(1, 5, strides=2, padding="same", activation="tanh"),
        ],
        name="generator",
    )


def make_discriminator():
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 5, strides=2, padding="same"),
            keras.layers.LeakyReLU(),
            keras.layers.Dropout(0.3),
            keras.layers.Conv2D(64, 5, strides=2, padding="same"),
            keras.layers.LeakyReLU(),
            keras.layers.Dropout(0.3),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ],
        name="discriminator",
    )


generator = make_generator()
discriminator = make_discriminator()
cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)
generator_optimizer = keras.optimizers.Adam(2e-4, beta_1=0.5)
discriminator_optimizer = keras.optimizers.Adam(2e-4, beta_1=0.5)


def discriminator_loss(real_output, fake_output):
    real_loss = cross_entropy(tf.ones_like(real_output), real_output)
    fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    return real_loss + fake_loss


def generator_loss(fake_output):
    return cross_entropy(tf.ones_like(fake_output), fake_output)


@tf.function
def train_step(images):
    noise = tf.random.normal([args.batch_size, args.noise_dim])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated_images = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated_images, training=True)
        gen_loss = generator_loss(fake_output)
        disc_loss = discriminator_loss(real_output, fake_output)
    gen_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
    disc_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gen_grads, generator.trainable_variables, strict=False))
    discriminator_optimizer.apply_gradients(
        zip(disc_grads, discriminator.trainable_variables, strict=False)
    )
    return gen_loss, disc_loss


step = 0
step_times = []
for epoch in range(args.epochs):
    start = time.time()
    last = time.perf_counter()
    for image_batch in train_dataset:
        gen_loss, disc_loss = train_step(image_batch)
        now = time.perf_counter()
        step_times.append(now - last)
        last = now
        step += 1
        if args.steps and step >= args.steps:
            break
    print(
        f"epoch {epoch + 1}: gen {float(gen_loss):.3f} disc {float(disc_loss):.3f} "
        f"({time.time() - start:.1f} s)"
    )
    if args.steps and step >= args.steps:
        break

median_ms = 1000 * float(np.median(step_times[2:] or step_times))
print(f"trained {step} steps, batch {args.batch_size}, median step {median_ms:.2f} ms")
