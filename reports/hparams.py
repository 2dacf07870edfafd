"""The tuning JSON's trials in TensorBoard's HParams dashboard (`tftune optimize
--tensorboard LOGDIR`): one run per finished trial, named ``trial-<N>``, with its knobs as
hyperparameters (the values as the JSON writes them: ``AUTOTUNE``, ``default``, ``16``)
and its examples/s and utilization as metrics; the experiment's summary at the logdir's
top lists them all. Written with TensorBoard's own protos and event writer: no
TensorFlow. Needs the ``tensorboard`` package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tftune.core.errors import UserError
from tftune.core.tuning_document import TuningDocument
from tftune.core.vocabulary import TrialState

# The metrics each trial's run holds (`TrialRow` fields), by the tag TensorBoard shows.
METRICS = (("examples_per_s", "examples/s"), ("utilization", "utilization"))
EXTRA = "pip install tensorboard"


def write_hparams(data: TuningDocument | Mapping[str, Any], logdir: str | os.PathLike[str]) -> Path:
    """Write the document's finished trials (its ``trials_detail``) under `logdir`;
    returns it. `data` is the document, or its JSON."""
    try:
        from tensorboard.plugins.hparams import summary_v2 as hp
    except ImportError:
        raise UserError(f"--tensorboard {logdir}: needs TensorBoard: {EXTRA}") from None
    doc = data if isinstance(data, TuningDocument) else TuningDocument.from_json(data)
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
        params = {n: dict(r.params).get(n, "as written") for n in names}
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
    """One event file in `folder` holding `summaries` (Summary protos, with their step)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder))
    try:
        for summary, step in summaries:
            writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))
    finally:
        writer.close()
