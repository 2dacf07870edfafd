"""Benchmark: the rewrites tftune finds, against the same fix applied by hand.

    python bench/bench_rewrites.py --out bench/results-rewrites.json [--cases a,b] [--runs 2]

Per case (a user-style script of tests/realscripts whose real win is a rewrite, with the
data `makedata.py` writes), in one run of this bench:

1. ``tftune optimize SCRIPT --batch-size B`` (the script's own batch: the rewrite is
   compared, not a batch change), timed; its tuning JSON says which rewrites it
   checked, measured and put in the winner;
2. the script run plainly, under ``tftune run --config BEST``, and as a copy with the
   expert's fix applied by hand (`Case.hand_fix`: a ``cache()`` added, ``@tf.function``
   put back, ``fit`` over ``repeat()``, an ``interleave``), alternately, `--runs` times
   each; each run's figure is the script's own ``training rate R ex/s`` line.

It prints one row per case and writes ``--out``: the rewrites in the winner, tftune's own
speed-up, and by the script's own counter the tuned and hand-fixed rates over the plain
one (medians), and tuned over hand-fixed; the goal is tuned >= 0.9 x hand-fixed. Not a
test: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REALSCRIPTS = ROOT / "tests" / "realscripts"
TFTUNE = [sys.executable, "-m", "tftune"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", COLUMNS="400")
OWN_RATE = re.compile(r"training rate ([\d.]+) ex/s over (\d+) steps")
GOAL = 0.9  # tftune's rewrite reaches at least this share of the hand fix's rate


def _replace(old: str, new: str) -> Callable[[str], str]:
    def fix(text: str) -> str:
        if old not in text:
            raise SystemExit(f"hand fix: {old!r} not found")
        return text.replace(old, new, 1)

    return fix


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    batch: int
    run: tuple[str, ...]  # a plain or tuned run, long enough for a steady figure
    hand_fix: Callable[[str], str]
    fix_words: str


CASES = {
    c.name: c
    for c in (
        Case(
            "shuffle_after_pyfunc",
            32,
            ("--epochs", "14"),
            _replace(
                "train_ds = train_ds.map(load_and_tokenize)\n",
                "train_ds = train_ds.map(load_and_tokenize).cache()\n",
            ),
            "cache() after the tokenizer",
        ),
        Case(
            "decode_every_epoch",
            32,
            ("--epochs", "12"),
            _replace("train_ds = train_ds.map(load)\n", "train_ds = train_ds.map(load).cache()\n"),
            "cache() after the decoding map",
        ),
        Case(
            "eager_tape_loop",
            64,
            ("--epochs", "4"),
            _replace("# @tf.function\ndef train_step", "@tf.function\ndef train_step"),
            "@tf.function put back on the step",
        ),
        Case(
            "fit_validation_epochs",
            32,
            ("--epochs", "6"),
            _replace(
                "    train_spectrogram_ds,\n    validation_data=val_spectrogram_ds,\n",
                "    train_spectrogram_ds.repeat(),\n"
                "    steps_per_epoch=len(train_spectrogram_ds),\n"
                "    validation_data=val_spectrogram_ds.repeat(),\n"
                "    validation_steps=len(val_spectrogram_ds),\n",
            ),
            "fit over repeat() with the epochs' steps given",
        ),
        Case(
            "sharded_records",
            64,
            ("--epochs", "6"),
            _replace(
                "files.flat_map(tf.data.TFRecordDataset)",
                "files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4)",
            ),
            "interleave over the shards",
        ),
    )
}


def _run(argv: list[str], cwd: Path, timeout: float = 1800) -> tuple[str, float]:
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr, time.monotonic() - t0


def _own(text: str) -> float:
    found = OWN_RATE.findall(text)
    if not found:
        raise SystemExit(f"no 'training rate' line in:\n{text[-2000:]}")
    return float(found[-1][0])


def _optimize(case: Case, data: Path, work: Path) -> tuple[dict[str, Any], float]:
    script = REALSCRIPTS / f"{case.name}.py"
    out, best = work / "tuning.json", work / "best.json"
    argv = [
        *TFTUNE, "optimize", str(script), "--batch-size", str(case.batch),
        "--json", str(out), "--best", str(best), "-o", str(work / "tuning.html"),
        "--storage", str(work / "study.journal"), "-q",
        "--", "--data", str(data), "--epochs", "100000",
    ]  # fmt: skip
    _, wall = _run(argv, work, timeout=3600)
    return json.loads(out.read_text()), wall


def bench_case(case: Case, data: Path, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"tftune-bench-{case.name}-") as tmp:
        work = Path(tmp)
        doc, wall = _optimize(case, data, work)
        fixed = work / f"{case.name}.py"
        fixed.write_text(case.hand_fix((REALSCRIPTS / f"{case.name}.py").read_text()))
        script = str(REALSCRIPTS / f"{case.name}.py")
        args = ["--data", str(data), *case.run]
        plain, tuned, hand = [], [], []
        for _ in range(runs):  # alternately, so that a slow spell hits each alike
            plain.append(_own(_run([sys.executable, script, *args], work)[0]))
            tuned_argv = [*TFTUNE, "run", "--config", str(work / "best.json"), script, "--"]
            tuned.append(_own(_run([*tuned_argv, *args], work)[0]))
            hand.append(_own(_run([sys.executable, str(fixed), *args], work)[0]))
    rows = doc.get("rewrites") or []
    best = doc.get("best") or {}
    p, t, h = (statistics.median(x) for x in (plain, tuned, hand))
    return {
        "case": case.name,
        "hand_fix": case.fix_words,
        "tuning_s": round(wall, 1),
        "winner": best.get("description"),
        "rewrites_in_winner": [f"{r['kind']}={r.get('value')}" for r in rows if r["in_winner"]],
        "rewrites": [{k: r.get(k) for k in ("kind", "site", "value", "state")} for r in rows],
        "tftune_speedup": best.get("speedup_vs_as_written"),
        "own": {"plain": plain, "tuned": tuned, "hand": hand},
        "tuned_vs_plain": round(t / p, 3),
        "hand_vs_plain": round(h / p, 3),
        "tuned_vs_hand": round(t / h, 3),
        "goal_ok": t >= GOAL * h,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tftune-bench-data-") as tmp:
        data = Path(tmp)
        _run([sys.executable, str(REALSCRIPTS / "makedata.py"), str(data)], ROOT)
        results = []
        for name in args.cases.split(","):
            row = bench_case(CASES[name], data, args.runs)
            results.append(row)
            print(
                f"{name}: winner [{', '.join(row['rewrites_in_winner']) or 'no rewrite'}] "
                f"tftune {row['tftune_speedup']}x; own counter: tuned {row['tuned_vs_plain']}x, "
                f"hand {row['hand_vs_plain']}x, tuned/hand {row['tuned_vs_hand']} "
                f"({'ok' if row['goal_ok'] else 'MISSED'}); tuning {row['tuning_s']} s",
                flush=True,
            )
            if args.out is not None:
                args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
