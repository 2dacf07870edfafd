"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
Nothing heavy is imported at package import: each function imports what it needs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import metadata as _metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tftune.probes.analysis import Analysis
    from tftune.tuner.config import Config

try:
    __version__ = _metadata.version("tftune")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"

__all__ = ["Analysis", "__version__", "analyze", "apply", "optimize"]


def analyze(
    path: str | os.PathLike[str],
    run: str | None = None,
    host: str | None = None,
    xprof: bool = False,
) -> Analysis:
    """Analyze a profiler logdir (or run folder, or `.xplane.pb`): the newest run by default.

    Returns a frozen `Analysis`; `analysis.to_json()` is the documented JSON contract.
    `xprof=True` also runs XProf's own input-pipeline analyzer on the analyzed host's
    file and puts its step time and input share beside tftune's (the JSON's `xprof`
    object; XProf's failures are a note in it, never an exception).
    Raises `tftune.core.errors.TraceError` (a `UserError`) on unreadable input.
    Does not import TensorFlow.
    """
    from tftune.probes.analysis import analyze as _analyze

    return _analyze(Path(path), run=run, host=host, tool_version=__version__, xprof=xprof)


def apply(config: str | os.PathLike[str] | Config) -> None:
    """Apply a tuned config to this process: ``import tftune; tftune.apply("best.json")``.

    Call it at the top of the training script, before the pipeline and the model are
    built. Call sites in the config are relative to the folder of the script being run
    (``sys.argv[0]``). It does what ``tftune run --config`` does, in-process.
    """
    from tftune.tuner.child.patcher import activate
    from tftune.tuner.config import Config, load_config

    loaded = config if isinstance(config, Config) else load_config(config)
    if not isinstance(config, Config):
        import warnings

        from tftune.tuner.record import environment_differences, mismatch_warning

        diffs = environment_differences(loaded.meta)
        if diffs:
            warnings.warn(mismatch_warning(str(config), diffs), RuntimeWarning, stacklevel=2)
    main = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else ""
    script_dir = os.path.dirname(os.path.abspath(main)) if main else os.getcwd()
    activate(loaded, script_dir)


def optimize(script: str | os.PathLike[str], args: Sequence[str] = (), **options: Any) -> Any:
    """Tune an unmodified training script's tf.data pipeline; returns an
    `OptimizeResult` (winner config, measured baselines, diff, command). Options are
    those of ``tftune optimize`` (see `tftune._optimize.optimize`)."""
    from tftune._optimize import optimize as _optimize

    return _optimize(script, args, **options)


def __getattr__(name: str) -> object:
    if name == "Analysis":
        from tftune.probes.analysis import Analysis

        return Analysis
    raise AttributeError(name)
