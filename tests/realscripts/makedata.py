"""Write the small, synthetic data sets the scripts in this folder train on.

    python makedata.py OUT_DIR

Deterministic (one seeded generator) and quick (a few seconds on 2 cores). Layout:

    images/{circles,squares,stripes}/NNN.jpg   64x64 RGB JPEGs, 60 per class
    text/{neg,pos}/NNNN.txt                     one short sentence per file, 1000 per class
    audio/{low,mid,high,sweep}/NNN.wav          1 s mono 16 kHz tones with noise, 50 per class
    speech/{down,go,left,no,right,stop,up,yes}/NNN.wav
                                                1 s mono 16 kHz "words" (2-3 pitched syllables
                                                in noise), 150 per class
    tabular.csv                                 4000 rows: 32 float features, int label (3 classes)
    records/{train,val}.tfrecord                tf.train.Example: "x" (64 floats), "label" (int, 10)
    shards/train-NNNNN-of-00040.tfrecord        the same kind of Examples, 40 shards of 100
    shapes.npz                                  28x28 uint8 shapes: x_train, y_train, x_test, y_test
"""

from __future__ import annotations

import argparse
import os
import time
import wave as wavfile

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

SEED = 1234


def write_images(root: str, rng: np.random.Generator, per_class: int = 60) -> None:
    size = 64
    yy, xx = np.mgrid[0:size, 0:size]
    for cls in ("circles", "squares", "stripes"):
        folder = os.path.join(root, "images", cls)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 60, size=(size, size, 3)).astype(np.float32)
            color = rng.uniform(120, 255, size=3)
            cx, cy = rng.integers(16, 48, size=2)
            r = rng.integers(8, 16)
            if cls == "circles":
                mask = (xx - cx) ** 2 + (yy - cy) ** 2 < r**2
            elif cls == "squares":
                mask = (abs(xx - cx) < r) & (abs(yy - cy) < r)
            else:
                period = int(rng.integers(6, 12))
                mask = ((xx + yy * int(rng.integers(0, 2))) // (period // 2)) % 2 == 0
            img[mask] = color
            jpeg = tf.io.encode_jpeg(tf.constant(img.astype(np.uint8)), quality=90)
            tf.io.write_file(os.path.join(folder, f"{i:03d}.jpg"), jpeg)


SUBJECTS = ["the movie", "this film", "the plot", "the cast", "the ending", "the soundtrack",
            "the director", "every scene", "the script", "the story"]  # fmt: skip
POSITIVE = ["wonderful", "brilliant", "moving", "delightful", "superb", "charming",
            "gripping", "beautiful", "clever", "memorable"]  # fmt: skip
NEGATIVE = ["boring", "dreadful", "clumsy", "tedious", "awful", "predictable",
            "shallow", "messy", "forgettable", "painful"]  # fmt: skip
FILLER = ["honestly", "really", "quite", "at times", "overall", "i think", "for me",
          "in the end", "sadly", "again"]  # fmt: skip


def write_text(root: str, rng: np.random.Generator, per_class: int = 1000) -> None:
    for cls, words in (("neg", NEGATIVE), ("pos", POSITIVE)):
        folder = os.path.join(root, "text", cls)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            parts = []
            for _ in range(int(rng.integers(2, 5))):
                parts.append(f"{rng.choice(SUBJECTS)} was {rng.choice(FILLER)} {rng.choice(words)}")
            # A little noise from the other side, so the task is not trivial.
            if rng.random() < 0.2:
                other = POSITIVE if words is NEGATIVE else NEGATIVE
                parts.append(f"but {rng.choice(SUBJECTS)} was {rng.choice(other)}")
            text = ", ".join(parts).capitalize() + ".<br /> "
            with open(os.path.join(folder, f"{i:04d}.txt"), "w", encoding="utf-8") as fh:
                fh.write(text)


def write_audio(root: str, rng: np.random.Generator, per_class: int = 50) -> None:
    rate, n = 16000, 16000
    t = np.arange(n, dtype=np.float32) / rate
    for cls, (lo, hi) in {
        "low": (200, 400),
        "mid": (700, 1100),
        "high": (2000, 3000),
        "sweep": (300, 3000),
    }.items():
        folder = os.path.join(root, "audio", cls)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            if cls == "sweep":
                f = np.linspace(lo, hi, n, dtype=np.float32)
                wave = np.sin(2 * np.pi * np.cumsum(f) / rate)
            else:
                wave = np.sin(2 * np.pi * rng.uniform(lo, hi) * t)
            wave = 0.5 * wave + 0.05 * rng.standard_normal(n)
            pcm = np.clip(wave, -1, 1).astype(np.float32)[:, None]
            wav = tf.audio.encode_wav(tf.constant(pcm), sample_rate=rate)
            tf.io.write_file(os.path.join(folder, f"{i:03d}.wav"), wav)


# Each "word": the pitches (Hz) of its syllables.
WORDS = {"yes": (300, 600), "no": (500,), "up": (800, 400), "down": (400, 800),
         "left": (350, 350, 700), "right": (700, 350), "go": (250, 250),
         "stop": (900, 300, 900)}  # fmt: skip


def write_speech(root: str, rng: np.random.Generator, per_class: int = 150) -> None:
    rate = 16000
    t = np.arange(rate, dtype=np.float32) / rate
    for word, pitches in WORDS.items():
        folder = os.path.join(root, "speech", word)
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            wave = np.zeros(rate, dtype=np.float32)
            start = rng.uniform(0.05, 0.25)
            length = rng.uniform(0.15, 0.22)
            shift = rng.uniform(0.85, 1.2)  # another speaker's voice
            for k, pitch in enumerate(pitches):
                on = (t >= start + k * length) & (t < start + (k + 1) * length)
                envelope = np.sin(np.pi * (t - start - k * length) / length) * on
                f = pitch * shift
                wave += envelope * (np.sin(2 * np.pi * f * t) + 0.4 * np.sin(4 * np.pi * f * t))
            wave = 0.4 * wave + 0.05 * rng.standard_normal(rate)
            pcm = (np.clip(wave, -1, 1) * 32767).astype("<i2")
            with wavfile.open(os.path.join(folder, f"{i:03d}.wav"), "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(rate)
                out.writeframes(pcm.tobytes())


def write_tabular(root: str, rng: np.random.Generator, rows: int = 4000) -> None:
    features = rng.standard_normal((rows, 32)).astype(np.float32) * 3 + 1
    w = rng.standard_normal((32, 3))
    labels = np.argmax(features @ w + rng.standard_normal((rows, 3)), axis=1)
    header = ",".join([f"f{i}" for i in range(32)] + ["label"])
    with open(os.path.join(root, "tabular.csv"), "w", encoding="utf-8") as fh:
        fh.write(header + "\n")
        for row, label in zip(features, labels, strict=True):
            fh.write(",".join(f"{v:.4f}" for v in row) + f",{label}\n")


def write_records(root: str, rng: np.random.Generator) -> None:
    folder = os.path.join(root, "records")
    os.makedirs(folder, exist_ok=True)
    centers = rng.standard_normal((10, 64)) * 2
    for name, count in (("train", 4000), ("val", 2000)):
        with tf.io.TFRecordWriter(os.path.join(folder, f"{name}.tfrecord")) as writer:
            labels = rng.integers(0, 10, size=count)
            xs = centers[labels] + rng.standard_normal((count, 64)) * 1.5
            for x, label in zip(xs, labels, strict=True):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                            "label": tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[int(label)])
                            ),
                        }
                    )
                )
                writer.write(example.SerializeToString())


def _example(x: np.ndarray, label: int) -> bytes:
    feature = {
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shards(root: str, rng: np.random.Generator, shards: int = 40, per: int = 100) -> None:
    """Many small TFRecord files, as a sharded dataset is written."""
    folder = os.path.join(root, "shards")
    os.makedirs(folder, exist_ok=True)
    centers = rng.standard_normal((10, 64)) * 2
    for shard in range(shards):
        path = os.path.join(folder, f"train-{shard:05d}-of-{shards:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            labels = rng.integers(0, 10, size=per)
            xs = centers[labels] + rng.standard_normal((per, 64)) * 1.5
            for x, label in zip(xs, labels, strict=True):
                writer.write(_example(x, int(label)))


def _shape(kind: int, rng: np.random.Generator) -> np.ndarray:
    yy, xx = np.mgrid[0:28, 0:28]
    cx, cy = rng.uniform(9, 19, size=2)
    r = rng.uniform(4, 8)
    if kind == 0:  # disc
        mask = (xx - cx) ** 2 + (yy - cy) ** 2 < r**2
    elif kind == 1:  # ring
        d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
        mask = abs(d - r) < 1.5
    elif kind == 2:  # square
        mask = (abs(xx - cx) < r) & (abs(yy - cy) < r)
    elif kind == 3:  # cross
        mask = (
            ((abs(xx - cx) < 1.5) | (abs(yy - cy) < 1.5)) & (abs(xx - cx) < r) & (abs(yy - cy) < r)
        )
    else:  # diagonal bar
        mask = (abs((xx - cx) - (yy - cy)) < 2) & (abs(xx - cx) < r)
    img = mask * rng.uniform(180, 255) + rng.uniform(0, 30, size=(28, 28))
    return np.clip(img, 0, 255).astype(np.uint8)


def write_shapes(root: str, rng: np.random.Generator) -> None:
    arrays = {}
    for split, count in (("train", 2000), ("test", 500)):
        y = rng.integers(0, 5, size=count)
        arrays[f"x_{split}"] = np.stack([_shape(int(k), rng) for k in y])
        arrays[f"y_{split}"] = y.astype(np.int64)
    np.savez(os.path.join(root, "shapes.npz"), **arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the data sets into")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    rng = np.random.default_rng(SEED)
    for write in (write_images, write_text, write_audio, write_tabular, write_records):
        write(args.out, rng)
    write_shapes(args.out, rng)
    # Added later, with its own generator, so the data sets above stay as they were.
    write_speech(args.out, np.random.default_rng(SEED + 1))
    write_shards(args.out, np.random.default_rng(SEED + 2))
    print(f"wrote data to {args.out} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
