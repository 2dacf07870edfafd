"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tftune.tuner.config import Config

try:
    __version__ = _metadata.version("tftune")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"

__all__ = ["__version__", "apply", "optimize"]


def apply(config: str | os.PathLike[str] | Config) -> None:
    """Apply a tuned config to this process: ``import tftune; tftune.apply("best.json")``.

    Call it at the top of the training script, before the pipeline and the model are
    built. Call sites in the config are relative to the folder of the script being run
    (``sys.argv[0]``). It does what ``tftune run --config`` does, in-process.
    """
    from tftune.tuner._patch import activate
    from tftune.tuner.config import Config, load_config

    loaded = config if isinstance(config, Config) else load_config(config)
    main = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else ""
    script_dir = os.path.dirname(os.path.abspath(main)) if main else os.getcwd()
    activate(loaded, script_dir)


def optimize(script: str | os.PathLike[str], args: Sequence[str] = (), **options: Any) -> Any:
    """Tune an unmodified training script's tf.data pipeline; returns an
    `OptimizeResult` (winner config, measured baselines, diff, command). Options are
    those of ``tftune optimize`` (see `tftune._optimize.optimize`)."""
    from tftune._optimize import optimize as _optimize

    return _optimize(script, args, **options)
