"""Why a run of the script failed, in one line: from the exception the child reported,
its exit code and the end of its stderr (`classify_exit`). Pure text work.
"""

from __future__ import annotations

import signal

from tftune.core.failures import FailureKind
from tftune.probes.live.clock_events import ScriptRaised

OOM_MARKERS = ("ResourceExhaustedError", "MemoryError", "OOM when allocating", "out of memory")
OOM_EXCEPTIONS = frozenset({"ResourceExhaustedError", "MemoryError"})


def classify_exit(
    returncode: int, exception: ScriptRaised | None, stderr_tail: str
) -> tuple[FailureKind, str]:
    """Why a script that raised or exited non-zero failed, in one line."""
    if exception is not None:
        text = exception.text
        oom_class = any(b in OOM_EXCEPTIONS for b in exception.bases)
        if any(m in text for m in OOM_MARKERS) or oom_class:
            return FailureKind.OOM, f"out of memory: {text}"[:300]
        return FailureKind.EXCEPTION, f"raised {text}"[:300]
    if any(m in stderr_tail for m in OOM_MARKERS):
        return FailureKind.OOM, f"out of memory (exit code {returncode})"
    if returncode == -signal.SIGKILL:
        return FailureKind.OOM, "killed by SIGKILL (likely the kernel's out-of-memory killer)"
    if returncode < 0:
        return FailureKind.EXIT, f"killed by signal {-returncode}"
    last = stderr_tail.strip().splitlines()[-1] if stderr_tail.strip() else ""
    suffix = f": {last[:200]}" if last else ""
    return FailureKind.EXIT, f"exited with code {returncode}{suffix}"
