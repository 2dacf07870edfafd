"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib import metadata as _metadata
from typing import Any

try:
    __version__ = _metadata.version("tftune")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"

__all__ = ["__version__", "optimize"]


def optimize(script: str | os.PathLike[str], args: Sequence[str] = (), **options: Any) -> Any:
    """Tune an unmodified training script's tf.data pipeline; returns an
    `OptimizeResult` (winner config, measured baselines, diff, command). Options are
    those of ``tftune optimize`` (see `tftune._optimize.optimize`)."""
    from tftune._optimize import optimize as _optimize

    return _optimize(script, args, **options)
