"""Atomic file writes: every report, config and JSON that tftune writes goes through here.

The text goes to a temporary file in the target's folder, then `os.replace` puts it in
place, so a reader (or a crash) never sees half a file and a failed write leaves the old
file whole and no temporary file behind. Failures are one-line user errors naming the path.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tftune.probes.errors import UserError


def write_text_atomic(
    path: str | os.PathLike[str], text: str, error: type[UserError] = UserError
) -> Path:
    """Write `text` to `path` atomically; raise `error` (one line naming it) on failure."""
    target = Path(path)
    if target.is_dir():
        raise error(f"{path}: cannot write (is a directory, expected a file name)")
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.",
            suffix=".tmp",
            dir=target.parent if str(target.parent) else ".",
        )
    except OSError as exc:
        raise error(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a report is for reading
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise error(f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
