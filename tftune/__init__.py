"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tftune")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"

__all__ = ["__version__"]
