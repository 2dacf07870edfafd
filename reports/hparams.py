"""The tuning JSON's trials in TensorBoard's HParams dashboard (`tftune optimize
--tensorboard LOGDIR`): one run per finished trial, named ``trial-<N>``, with its knobs as
hyperparameters (the values as the JSON writes them: ``AUTOTUNE``, ``as written``, ``16``)
and its examples/s and utilization as metrics; the experiment's summary at the logdir's
top lists them all. Written with TensorBoard's own protos and summaries, framed as
TensorFlow's records (`_record`) by tftune itself: TensorBoard's event writer imports
TensorFlow where it is installed (for `tf.io.gfile`), whose start-up lines would land in
the middle of `tftune optimize`'s output. Needs the ``tensorboard`` package.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tftune.core.errors import UserError
from tftune.core.tuning_document import TuningDocument
from tftune.core.userfiles import write_bytes_atomic
from tftune.core.vocabulary import AS_WRITTEN_WORD, TrialState, knob_value_words

# The metrics each trial's run holds (`TrialRow` fields), by the tag TensorBoard shows.
METRICS = (("examples_per_s", "examples/s"), ("utilization", "utilization"))
EXTRA = "pip install tensorboard"


def write_hparams(doc: TuningDocument, logdir: str | os.PathLike[str]) -> Path:
    """Write the document's finished trials (its ``trials_detail``) under `logdir`;
    returns it."""
    try:
        from tensorboard.plugins.hparams import summary_v2 as hp
    except ImportError:
        raise UserError(f"--tensorboard {logdir}: needs TensorBoard: {EXTRA}") from None
    rows = [r for r in doc.trials_detail if r.state in _FINISHED]
    names = sorted({k for r in rows for k, _ in r.params})
    root = Path(logdir)
    now = time.time()
    metrics = [
        hp.Metric(tag, display_name=shown, description=f"the trial's {shown}")
        for tag, shown in METRICS
    ]
    config = hp.hparams_config_pb([hp.HParam(n) for n in names], metrics, time_created_secs=now)
    _write(root, [(config, 0)])
    for r in rows:
        given = dict(r.params)
        params = {n: knob_value_words(given[n]) if n in given else AS_WRITTEN_WORD for n in names}
        trial = f"trial-{r.number:03d}"
        summaries: list[tuple[Any, int]] = [(hp.hparams_pb(params, trial, now), 0)]
        for tag, _ in METRICS:
            value = getattr(r, tag)  # the row's figure of that name; None: not measured
            if value is not None:
                summaries.append((_scalar(tag, float(value)), 0))
        _write(root / trial, summaries)
    return root


_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _scalar(tag: str, value: float) -> Any:
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=tag, simple_value=value)])


def _write(folder: Path, summaries: Sequence[tuple[Any, int]]) -> None:
    """One event file in `folder` holding `summaries` (Summary protos, with their step),
    named as TensorFlow names one and written atomically."""
    from tensorboard.compat.proto.event_pb2 import Event

    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    events = [Event(wall_time=now, file_version="brain.Event:2")]
    events += [Event(wall_time=now, step=step, summary=summary) for summary, step in summaries]
    name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.0"
    data = b"".join(_record(e.SerializeToString()) for e in events)
    write_bytes_atomic(folder / name, data)


def _record(data: bytes) -> bytes:
    """One TFRecord: the length (uint64), its masked CRC-32C, the data and its masked
    CRC-32C, little-endian (TensorFlow's `core/lib/io/record_writer`)."""
    length = struct.pack("<Q", len(data))
    return b"".join(
        (length, struct.pack("<I", _masked_crc(length)), data, struct.pack("<I", _masked_crc(data)))
    )


def _masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _crc_table() -> tuple[int, ...]:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), a byte at a time."""
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()
