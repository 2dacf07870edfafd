"""tftune: find and fix tf.data input-pipeline bottlenecks.

The public API lives here; the command line is `tftune.cli` (which nothing imports).
Nothing heavy is imported at package import: each function imports what it needs, and
the exported types (`Analysis`, `OptimizeOptions`, `OptimizeResult`, `Config`,
`UserError`) are imported on first use (`__getattr__`). `dir(tftune)` lists the public
API only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tftune.core.errors import UserError
    from tftune.core.run_record import Environment
    from tftune.probes.advice.analysis import Analysis
    from tftune.tuner.optimize import HtmlRenderer, OptimizeResult, PhaseCallback, TrialCallback
    from tftune.tuner.options import OptimizeOptions
    from tftune.tuner.searchspace.config import Config
    from tftune.tuner.study import Runner


def _checkout_layers() -> None:
    """In a checkout of tftune's source, this folder holds only the front package, and
    the layers (`core`, `probes`, `tuner`, `reports`) are its siblings, mapped under
    `tftune.` by setuptools' package-dir. Where Python imports this folder rather than
    an install (the checkout is the current folder of `python -m tftune`, `python -c`,
    a notebook, and the package is installed from it as a wheel), a finder maps the
    four layers to those folders, as an editable install's does; installed, they are
    inside this folder and nothing is added."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if os.path.isdir(os.path.join(here, "probes")) or not os.path.isfile(
        os.path.join(root, "probes", "__init__.py")
    ):
        return
    from importlib.machinery import ModuleSpec
    from importlib.util import spec_from_file_location

    layers = {f"tftune.{n}": os.path.join(root, n) for n in ("core", "probes", "tuner", "reports")}

    class _CheckoutLayers:
        """Finds `tftune.<layer>` in the checkout (its subpackages then by `__path__`)."""

        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
            folder = layers.get(name)
            if folder is None:
                return None
            init = os.path.join(folder, "__init__.py")
            return spec_from_file_location(name, init, submodule_search_locations=[folder])

    sys.meta_path.append(_CheckoutLayers())


_checkout_layers()


def _installed_version() -> str:
    """This install's version, read from its metadata where importlib.metadata finds it
    (the first `sys.path` entry with a `tftune-*.dist-info`, else a `tftune.egg-info`)
    without importing importlib.metadata: 30 ms at every start, of every command."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [n for n in names if n.startswith("tftune-") and n.endswith(".dist-info")]
        found = [os.path.join(n, "METADATA") for n in found]
        found += [os.path.join(n, "PKG-INFO") for n in names if n == "tftune.egg-info"]
        for meta in found:
            version = _version_in(os.path.join(entry, meta))
            if version is not None:
                return version
    from importlib import metadata

    try:
        return metadata.version("tftune")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


def _version_in(path: str) -> str | None:
    """The `Version:` header of a metadata file."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line[len("Version:") :].strip()
                if not line.strip():
                    return None  # the headers ended without one
    except OSError:
        pass
    return None


__version__ = _installed_version()

__all__ = [
    "Analysis",
    "Config",
    "OptimizeOptions",
    "OptimizeResult",
    "UserError",
    "__version__",
    "analyze",
    "apply",
    "keras",
    "optimize",
    "profile",
    "report",
]


def __dir__() -> list[str]:
    # The public API only: what `dir(tftune)` and a notebook's completion offer.
    return sorted(__all__)


def analyze(
    path: str | os.PathLike[str],
    run: str | None = None,
    host: str | None = None,
    xprof: bool = False,
) -> Analysis:
    """Analyze a profiler logdir (or run folder, or `.xplane.pb`): the newest run by default.
    A logdir in object storage is a URL (``gs://``, ``s3://``, any fsspec one; the
    ``remote`` extra).

    Returns a frozen `Analysis`; `analysis.to_json()` is the documented JSON contract.
    `xprof=True` also runs XProf's own input-pipeline analyzer on the analyzed host's
    file and puts its step time and input share beside tftune's (the JSON's `xprof`
    object; XProf's failures are a note in it, never an exception).
    Raises `tftune.core.errors.TraceError` (a `UserError`) on unreadable input.
    Does not import TensorFlow.
    """
    from dataclasses import replace

    from tftune._notebook import inline
    from tftune.probes.advice.analysis import analyze as _analyze
    from tftune.probes.traces.remote import is_url

    where = path if is_url(path) else Path(path)
    found = _analyze(where, run=run, host=host, tool_version=__version__, xprof=xprof)
    return replace(found, inline=inline)


def profile(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    steps: tuple[int, int] = (20, 40),
    logdir: str | os.PathLike[str] = "tftune-profile",
    config: str | os.PathLike[str] | Config | None = None,
    timeout_s: float | None = None,
    step_timeout_s: float | None = None,
    progress: bool | None = None,
) -> Analysis:
    """Profile training steps ``steps[0]`` to ``steps[1] - 1`` of an unmodified script
    into `logdir` and analyze them: ``tftune profile`` then ``tftune analyze``, in one
    call. ``config``: a tuned config (a path or a `Config`) applied while profiling;
    ``progress``: as `optimize`'s (the steps taken and the phase). Raises `UserError`
    (one line) on bad steps, and a `ScriptError` with the reason where no profile was
    captured. TensorFlow is imported only in the script's process."""
    from tftune._notebook_progress import shown
    from tftune.core.errors import ConfigError, ScriptError
    from tftune.tuner.searchspace.config import Config, load_config
    from tftune.tuner.trial import profile_script

    start, stop = steps
    if not 0 <= start < stop:
        raise ConfigError(f"steps={steps!r}: expected (START, STOP) with 0 <= START < STOP")
    chosen = config if isinstance(config, Config) or config is None else load_config(config)
    tracing = f"trace steps {start}-{stop - 1}"
    with shown(f"tftune profile {script}", "steps", progress) as view:

        def step(done: int) -> None:  # `done` steps taken: step `done` is next
            view.step(done)
            if done >= start and view.state.phase != tracing:
                view.phase(tracing)

        view.start(0, stop)
        view.phase(f"run to step {start}")
        found = profile_script(
            script,
            args,
            start,
            stop,
            logdir,
            config=chosen,
            timeout_s=timeout_s,
            step_timeout_s=step_timeout_s,
            on_step=step,
        )
        if not found.captured:
            raise ScriptError(f"{script}: no profile captured: {found.reason}")
        view.phase("analysis")
        return analyze(found.logdir)


def report(obj: object, path: str | os.PathLike[str] | None = None) -> str | Path:
    """The self-contained HTML report of an `Analysis`, an `OptimizeResult`, a JSON
    mapping or the path of a saved analysis or tuning JSON: returned as text, or
    written to `path` (atomically; ``"-"`` is standard output) and its path returned.
    In a notebook, an `Analysis` or `OptimizeResult` as a cell's last line shows this
    report inline. Does not import TensorFlow."""
    from tftune._notebook import report as _report

    return _report(obj, path)


def apply(config: str | os.PathLike[str] | Config) -> None:
    """Apply a tuned config to this process: ``import tftune; tftune.apply("best.json")``.

    Call it at the top of the training script, before the pipeline and the model are
    built. Call sites in the config are relative to the folder of the script being run
    (``sys.argv[0]``). It does what ``tftune run --config`` does, in-process.
    """
    from tftune.tuner.child.patcher import activate
    from tftune.tuner.searchspace.config import Config, load_config

    loaded = config if isinstance(config, Config) else load_config(config)
    if not isinstance(config, Config):
        import warnings

        from tftune.tuner.output.repro import environment_differences, mismatch_warning

        diffs = environment_differences(loaded.meta)
        if diffs:
            warnings.warn(mismatch_warning(str(config), diffs), RuntimeWarning, stacklevel=2)
    main = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else ""
    script_dir = os.path.dirname(os.path.abspath(main)) if main else os.getcwd()
    activate(loaded, script_dir)


def optimize(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    options: OptimizeOptions | None = None,
    *,
    on_trial: TrialCallback | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    on_phase: PhaseCallback | None = None,
    progress: bool | None = None,
    invocation: Sequence[str] | None = None,
    runner: Runner | None = None,
    environment: Callable[[], Environment] | None = None,
    **overrides: Any,
) -> OptimizeResult:
    """Tune an unmodified script's tf.data pipeline (and batch size, precision, a tf.data
    service); returns a frozen `OptimizeResult` (winner, baselines, diff, command).

    The run's options are one `OptimizeOptions` (``tftune.OptimizeOptions``; its fields
    are the options of ``tftune optimize --help``): ``options``, or the defaults, with
    ``overrides`` applied by field name, e.g. ``tftune.optimize("train.py", trials=5)``.
    An unknown name is a `TypeError` naming it; a bad value a `UserError` naming the
    option. ``html_file``: the HTML report. ``on_*``: progress callbacks; ``progress``:
    show it (None: where IPython runs; live in a Jupyter cell, plain lines elsewhere);
    ``invocation``: the command line for the record; ``runner``, ``environment``: test
    doubles. TensorFlow is imported only in the child processes."""
    from tftune._notebook import inline, tuning_page
    from tftune._notebook_progress import both, shown
    from tftune.tuner.optimize import OptimizeHooks
    from tftune.tuner.optimize import optimize as _optimize
    from tftune.tuner.options import with_overrides

    chosen = with_overrides(options, overrides, "tftune.optimize")
    # The tuner draws no page (it never imports reports): it is handed the renderer.
    render_html: HtmlRenderer | None = tuning_page if chosen.html_file is not None else None
    if chosen.tensorboard is not None:  # fail now, not after the study
        import importlib.util

        from tftune.core.errors import ConfigError

        if importlib.util.find_spec("tensorboard") is None:
            raise ConfigError(
                f"--tensorboard {chosen.tensorboard}: needs TensorBoard: pip install tensorboard"
            )
    with shown(f"tftune optimize {script}", "trials", progress) as view:
        hooks = OptimizeHooks(
            inline=inline,
            on_trial=both(on_trial, view.trial),
            on_start=both(on_start, view.start),
            on_note=both(on_note, view.note),
            on_phase=both(on_phase, view.phase),
            render_html=render_html,
            invocation=invocation,
            runner=runner,
            environment=environment,
        )
        result = _optimize(script, args, chosen, hooks)
    if chosen.tensorboard is not None:
        from tftune.reports.hparams import write_hparams

        write_hparams(result.document, chosen.tensorboard)
    return result


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext tftune`` in IPython: the ``%%tftune`` cell magic (`tftune._magic`)."""
    from tftune._magic import register

    register(ipython)


def __getattr__(name: str) -> object:
    # The exported types, imported on first use: `import tftune` stays light.
    if name == "Analysis":
        from tftune.probes.advice.analysis import Analysis

        return Analysis
    if name == "OptimizeResult":
        from tftune.tuner.optimize import OptimizeResult

        return OptimizeResult
    if name == "OptimizeOptions":
        from tftune.tuner.options import OptimizeOptions

        return OptimizeOptions
    if name == "Config":
        from tftune.tuner.searchspace.config import Config

        return Config
    if name == "keras":  # tftune.keras.Profile: imports Keras, so only when asked for
        import importlib

        return importlib.import_module("tftune.keras")
    if name == "UserError":
        from tftune.core.errors import UserError

        return UserError
    raise AttributeError(name)
