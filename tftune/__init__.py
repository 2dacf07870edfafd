"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
"""

from __future__ import annotations

from importlib import metadata as _metadata
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

try:
    __version__ = _metadata.version("tftune")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"

__all__ = ["Analysis", "__version__", "analyze"]

if TYPE_CHECKING:
    from tftune.probes.analysis import Analysis


def analyze(path: str | PathLike[str], run: str | None = None, host: str | None = None) -> Analysis:
    """Analyze a profiler logdir (or run folder, or `.xplane.pb`): the newest run by default.

    Returns a frozen `Analysis`; `analysis.to_json()` is the documented JSON contract.
    Raises `tftune.probes.errors.TraceError` (a `UserError`) on unreadable input.
    Does not import TensorFlow.
    """
    from tftune.probes.analysis import analyze as _analyze

    return _analyze(Path(path), run=run, host=host, tool_version=__version__)


def __getattr__(name: str) -> object:
    if name == "Analysis":
        from tftune.probes.analysis import Analysis

        return Analysis
    raise AttributeError(name)
