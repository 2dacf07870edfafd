"""``%load_ext tftune``: the ``%%tftune`` cell magic, modelled on pyinstrument's.

    %%tftune --logdir logs/
    model.fit(ds, epochs=1)

runs the cell in the kernel's own process between TensorFlow's profiler start and stop,
analyzes the trace as `tftune.analyze` does, and returns the `Analysis`: the cell shows
its report inline, as an analysis on a cell's last line does, and ``_`` holds it. The
trace goes into ``--logdir`` (kept, for TensorBoard or ``tftune analyze``), or into a
temporary folder removed once read.

Bad usage (an unknown option, an empty cell, no TensorFlow in the kernel, a profiler
already running) is one line, IPython's `UsageError`, with no traceback; so is a trace
tftune cannot analyze. A cell that raises shows its own traceback, then one line saying
that nothing was analyzed; the cell fails, as it would without the magic (a notebook's
"run all" stops there).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

if TYPE_CHECKING:
    from tftune.probes.advice.analysis import Analysis

MAGIC = "%%tftune"


@magics_class
class ProfileMagics(Magics):  # type: ignore[misc]
    """The ``%%tftune`` cell magic (module docstring)."""

    @magic_arguments()  # type: ignore[misc,untyped-decorator,no-untyped-call]
    @argument(  # type: ignore[misc,untyped-decorator,no-untyped-call]
        "--logdir",
        metavar="DIR",
        help="Write the trace here and keep it (default: a temporary folder, removed).",
    )
    @cell_magic  # type: ignore[misc,untyped-decorator,no-untyped-call]
    def tftune(self, line: str, cell: str) -> Analysis:
        """Profile the training steps this cell runs and show tftune's analysis of them.

        %%tftune [--logdir DIR]
        """
        args = parse_argstring(self.tftune, line)  # type: ignore[no-untyped-call]
        if not cell.strip():
            raise UsageError(f"{MAGIC}: the cell is empty: put the training code below {MAGIC}")
        profiler = _profiler()
        logdir = args.logdir or tempfile.mkdtemp(prefix="tftune-cell-")
        try:
            self._run_profiled(profiler, cell, logdir)
            return _analysis(logdir)
        finally:
            if not args.logdir:
                shutil.rmtree(logdir, ignore_errors=True)

    def _run_profiled(self, profiler: Any, cell: str, logdir: str) -> None:
        """Run the cell as IPython runs any cell (its own traceback shown where it
        raises), under the profiler."""
        try:
            profiler.start(logdir)
        except Exception as exc:  # another profiler runs, or the folder is not writable
            words = f"{MAGIC}: TensorFlow's profiler did not start: {_line(exc)}"
            raise UsageError(words) from None
        shell = self.shell
        assert shell is not None  # a registered magic runs in its shell
        try:
            result = shell.run_cell(cell)  # type: ignore[no-untyped-call]
        finally:
            profiler.stop()
        if not result.success:
            failed = result.error_in_exec or result.error_before_exec
            raise UsageError(f"{MAGIC}: the cell raised {type(failed).__name__}: nothing analyzed")


def _profiler() -> Any:
    """TensorFlow's profiler, imported in the kernel; no TensorFlow is bad usage."""
    try:
        import tensorflow as tf
    except ImportError:
        words = f"{MAGIC} needs TensorFlow in this kernel: pip install tensorflow"
        raise UsageError(words) from None
    return tf.profiler.experimental


def _analysis(logdir: str) -> Analysis:
    """The cell's trace analyzed, or one line saying why not."""
    import tftune
    from tftune.core.errors import UserError

    try:
        return tftune.analyze(logdir)
    except UserError as exc:
        raise UsageError(f"{MAGIC}: no analysis of the cell: {exc}") from None


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def register(ipython: Any) -> None:
    """Register the magic in an IPython shell (``%load_ext tftune``)."""
    ipython.register_magics(ProfileMagics)
