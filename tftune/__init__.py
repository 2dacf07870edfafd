"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
"""

from __future__ import annotations

import os
import sys
from importlib import metadata as _metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tftune.tuner.config import Config

try:
    __version__ = _metadata.version("tftune")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"

__all__ = ["__version__", "apply"]


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
