"""The reproducibility record of a tuning run, and the check when its config is applied.

`tftune optimize` writes the record into ``tftune-best.json`` (``meta.record``) and the
tuning JSON (``record``): the exact command, the sampler's seed, the training script's
path, arguments and sha256, the date, and the machine and Python it was measured on
(`tftune.probes.live.environment.collect`, computed once per run in the Python that runs the
script, so it names the TensorFlow that was measured).

`tftune run --config` compares a config's record with this machine
(`environment_differences`) and warns when the tuned values may not carry over. That
check must stay cheap (it runs before every training run): no ``pip freeze``, and
TensorFlow's version is read from the installed package's metadata, not by importing it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tftune.core.run_record import Environment, Record
from tftune.probes.live.environment import collect, differences

# The distributions that provide ``import tensorflow``, most common first.
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-macos",
    "tensorflow-intel",
    "tf-nightly",
)


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def api_call(script: str, args: Sequence[str], options: Mapping[str, Any]) -> str:
    """``tftune.optimize(...)`` as a Python call, for runs started from the API."""
    parts = [repr(script), repr(list(args))]
    parts += [f"{k}={v!r}" for k, v in options.items()]
    return f"tftune.optimize({', '.join(parts)})"


def build_record(
    script: str | os.PathLike[str],
    script_args: Sequence[str],
    *,
    argv: Sequence[str],
    seed: int,
    environment: Environment,
) -> Record:
    path = Path(script).resolve()
    return Record(
        command=shlex.join(argv) if len(argv) > 1 else "".join(argv),
        argv=tuple(argv),
        cwd=os.getcwd(),
        script=str(path),
        script_args=tuple(script_args),
        script_sha256=sha256_file(path),
        seed=seed,
        environment=environment,
    )


def installed_tensorflow(_python: str) -> dict[str, Any]:
    """TensorFlow's version from the installed distribution's metadata: no import, so it
    costs milliseconds. CUDA/cuDNN are not needed for the mismatch check."""
    for name in TENSORFLOW_DISTRIBUTIONS:
        try:
            return {"version": importlib.metadata.version(name)}
        except importlib.metadata.PackageNotFoundError:
            continue
    return {}


def current_environment_cheap(python: str | None = None) -> Environment:
    """This machine, without ``pip freeze`` and without importing TensorFlow."""
    return collect(python or sys.executable, tf_info=installed_tensorflow, freeze=lambda _py: ())


def recorded_environment(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The environment a config's record names, or None (no record: nothing to check)."""
    record = meta.get("record")
    if not isinstance(record, Mapping):
        return None
    env = record.get("environment")
    return env if isinstance(env, Mapping) else None


def environment_differences(
    meta: Mapping[str, Any],
    current: Callable[[], Environment] = current_environment_cheap,
) -> list[str]:
    """What differs, in ways that matter for the tuned values, between the machine the
    config was tuned on and this one; empty when the config has no record."""
    recorded = recorded_environment(meta)
    if recorded is None:
        return []
    found: list[str] = differences(recorded, current())
    return found


def mismatch_warning(config_file: str, diffs: Sequence[str]) -> str:
    return (
        f"warning: {config_file} was tuned on a different machine; the tuned values may not "
        f"be the best here ({'; '.join(diffs)}). Re-tune with tftune optimize on this machine."
    )
