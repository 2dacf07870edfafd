"""Child side: the training dataset read from a tf.data service, cut at a call site.

`distribute_at_cut` is called by `Streams.prepare` (tuner/child/streams.py) on the
training dataset when the config has a ``data_service`` (`tuner.searchspace.service`). It walks the
dataset's lineage from the end down to the last stage the script built at the cut's
call site, applies TensorFlow's ``distribute()`` there (the dispatcher's workers run
everything up to the cut), and rebuilds the stages after it on the trainer: a batch, a
prefetch, options, repeat and take, the usual tail of a pipeline. Any other stage after
the cut cannot be rebuilt faithfully here: `ServiceCutError` names it, and a trial ends
with that reason.

A trial (`trial=True`) gives its job a name of its own, so that one trial never joins
another's job; ``tftune run`` tags the config's job name with the run
(`job_name_for`), so that the trainers of one run on several hosts share one job, and
the next run gets a new one.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from tftune.core.errors import ConfigError
from tftune.tuner.searchspace.service import (
    COMPRESSION_OFF,
    DISTRIBUTED_EPOCH,
    RUN_TAG_ENV,
    TRIAL_JOB_SEPARATOR,
    ServiceConfig,
)

# How far the lineage is walked looking for the cut (a pipeline's tail is short).
MAX_TAIL = 32
# Set on the dataset distribute() returns: tests read where it was cut.
CUT_ATTR = "_tftune_service_cut"
# Kept on the user's dataset: the next epoch iterates the same distributed dataset, whose
# iterations TensorFlow counts (each a new repetition of the job). A new distribute()
# under the same job name would join the finished job and see an empty epoch. (It holds
# only stages upstream of the user's dataset: no reference cycle.)
KEPT_ATTR = "_tftune_service_kept"


class ServiceCutError(ConfigError):
    """The config's cut point cannot be applied to this training dataset."""


def _rebuilders() -> dict[str, Callable[[Any, Any], Any]]:
    """How to rebuild each stage that may follow the cut, on a new input."""
    from tensorflow.python.data.ops import batch_op, dataset_ops, prefetch_op, repeat_op, take_op

    return {
        "_BatchDataset": lambda d, i: batch_op._BatchDataset(
            i, _static(d._batch_size), _static(d._drop_remainder)
        ),
        "_PrefetchDataset": lambda d, i: prefetch_op._PrefetchDataset(i, _static(d._buffer_size)),
        "_OptionsDataset": lambda d, i: dataset_ops._OptionsDataset(i, d._options_attr),
        "_RepeatDataset": lambda d, i: repeat_op._RepeatDataset(i, _static(d._count)),
        "_TakeDataset": lambda d, i: take_op._TakeDataset(i, _static(d._count)),
    }


def _static(value: Any) -> Any:
    """A stage's argument as the Python value it was built from (TF keeps a tensor),
    or the tensor itself when it is not a constant."""
    import tensorflow as tf

    v = tf.get_static_value(value)
    if v is None:
        return value
    return v.item() if hasattr(v, "item") else v


def job_name_for(config: ServiceConfig, trial: bool) -> str | None:
    """The job name distribute() gets: the config's, with a tag for this training run.

    A dispatcher keeps a finished job under its name, and a new run under that name would
    join it and read nothing. So the name is the config's plus the run's tag: ``$`` +
    `RUN_TAG_ENV`, else the Slurm job id (trainers of one job share it), else this
    process alone. A trial's is always its own."""
    if config.job_name is None:
        return None
    if trial:
        return f"{config.job_name}{TRIAL_JOB_SEPARATOR}{os.getpid()}-{time.time_ns()}"
    tag = os.environ.get(RUN_TAG_ENV) or os.environ.get("SLURM_JOB_ID")
    return f"{config.job_name}-{tag or f'{os.getpid()}-{time.time_ns()}'}"


def distribute_at_cut(ds: Any, config: ServiceConfig, *, trial: bool) -> Any:
    """`ds` with ``distribute()`` after the last stage built at ``config.cut``; `ds`
    itself when its tail holds no stage built there (another pipeline of the script,
    such as a validation set built elsewhere), except in a trial (`_not_here`)."""
    kept = getattr(ds, KEPT_ATTR, None)
    if kept is not None and kept[0] == config:
        return kept[1]
    rebuild = _rebuilders()
    tail: list[Any] = []  # the stages after the cut, last first
    node = ds
    while getattr(node, "_tftune_site", None) != config.cut or _is_options(node):
        name = type(node).__name__
        inputs = list(node._inputs()) if hasattr(node, "_inputs") else []
        if len(tail) >= MAX_TAIL or len(inputs) != 1:
            return _not_here(ds, config, trial)
        if name not in rebuild:
            if not _has_cut(node, config.cut):
                return _not_here(ds, config, trial)
            raise ServiceCutError(
                f"data_service cut {config.cut}: a {name.strip('_')} stage follows it, "
                "which tftune cannot move to the trainer; cut after a later stage"
            )
        tail.append(node)
        node = inputs[0]
    out = node.apply(_distribute(config, trial))
    with contextlib.suppress(AttributeError):
        setattr(out, CUT_ATTR, config.cut)
    for stage in reversed(tail):
        out = rebuild[type(stage).__name__](stage, out)
    with contextlib.suppress(AttributeError):
        setattr(ds, KEPT_ATTR, (config, out))
    return out


def _not_here(ds: Any, config: ServiceConfig, trial: bool) -> Any:
    """No stage built at the cut: a trial's training dataset must have one (the trial
    ends with the reason); elsewhere `ds` stays local."""
    if trial:
        raise ServiceCutError(
            f"data_service cut {config.cut}: no stage built there in the training "
            "pipeline (choose another cut, or drop data_service from the config)"
        )
    return ds


def _has_cut(ds: Any, cut: str, depth: int = 0) -> bool:
    """Whether a stage built at `cut` is anywhere in `ds`'s lineage."""
    if getattr(ds, "_tftune_site", None) == cut and not _is_options(ds):
        return True
    inputs = list(ds._inputs()) if hasattr(ds, "_inputs") and depth < MAX_TAIL else []
    return any(_has_cut(i, cut, depth + 1) for i in inputs)


def _is_options(ds: Any) -> bool:
    """An options stage carries its input's site tag but is not the stage built there."""
    return type(ds).__name__ == "_OptionsDataset"


def _distribute(config: ServiceConfig, trial: bool) -> Callable[[Any], Any]:
    import tensorflow as tf

    policy = tf.data.experimental.service.ShardingPolicy
    mode = policy.DYNAMIC if config.processing_mode == DISTRIBUTED_EPOCH else policy.OFF
    kwargs: dict[str, Any] = {"job_name": job_name_for(config, trial)}
    if config.compression == COMPRESSION_OFF:
        kwargs["compression"] = None
    if config.max_outstanding_requests is not None:
        kwargs["max_outstanding_requests"] = config.max_outstanding_requests
    return tf.data.experimental.service.distribute(mode, config.address, **kwargs)  # type: ignore[no-any-return]
