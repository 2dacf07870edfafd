"""The files users hand tftune and the files it writes for them.

`read_json` reads a JSON file (a saved analysis or tuning JSON, a config, a space file)
and fails with one line naming the file. `write_text_atomic` writes every report, config
and JSON: the text goes to a temporary file in the target's folder, then `os.replace` puts it in
place, so a reader (or a crash) never sees half a file and a failed write leaves the old
file whole and no temporary file behind. Failures are one-line user errors naming the path.

Where a command takes an output path, `check_writable` fails before any work starts, and
`write_output` takes `-` (`STDOUT`) for standard output, as Unix tools do.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tftune.core.errors import UserError


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


def read_json(
    path: str | os.PathLike[str], error: type[UserError] = UserError, what: str | None = None
) -> Any:
    """Parse the JSON file at `path`; raise `error` (one line naming it) on failure.
    `what` names the kind of file a missing one should have been ("config file")."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{p}: {what} does not exist" if what else f"{p}: no such file") from None
    except IsADirectoryError:
        raise error(f"{p}: is a directory, expected a JSON file") from None
    except UnicodeDecodeError:
        raise error(f"{p}: not a JSON file (binary content)") from None
    except OSError as exc:
        raise error(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno})") from None


STDOUT = "-"  # an output path that means standard output


def check_writable(
    path: str | os.PathLike[str], flag: str, error: type[UserError] = UserError
) -> None:
    """`error` unless a file can be written at `path` (its folder exists and is writable,
    and it is not a folder itself); `-` (standard output) always can."""
    if str(path) == STDOUT:
        return
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise error(f"{flag} {path}: is a directory, expected a file name")
    if not folder.is_dir():
        raise error(f"{flag} {path}: cannot write: no such directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise error(f"{flag} {path}: cannot write: permission denied")


def write_output(
    path: str | os.PathLike[str], text: str, error: type[UserError] = UserError
) -> None:
    """`text` to standard output for `-`, else to the file at `path`, atomically."""
    if str(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(path, text, error)
