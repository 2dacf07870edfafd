"""The files users hand tftune and the files it writes for them.

`read_json` reads a JSON file (a saved analysis or tuning JSON, a config, a space file)
and fails with one line naming the file. `write_text_atomic` (`write_bytes_atomic`) writes
every report, config, JSON and event file: the bytes go to a temporary file in the
target's folder, then `os.replace` puts it in place, so a reader (or a crash) never sees
half a file and a failed write leaves the old file whole and no temporary file behind.
Failures are one-line user errors naming the path.

Where a command takes an output path, `check_writable` fails before any work starts, and
`write_output` takes `-` (`STDOUT`) for standard output, as Unix tools do. `json_text` is
the text of a JSON file tftune writes (`json.dumps(data, indent=1)` and a newline); a
document's large table may reach it as `JsonRows`, held column by column and written
without an object per row.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import Any, overload

from tftune.core.errors import UserError


def write_text_atomic(
    path: str | os.PathLike[str], text: str, error: type[UserError] = UserError
) -> Path:
    """Write `text` to `path` atomically; raise `error` (one line naming it) on failure."""
    return write_bytes_atomic(path, text.encode("utf-8"), error)


def write_bytes_atomic(
    path: str | os.PathLike[str], data: bytes, error: type[UserError] = UserError
) -> Path:
    """Write `data` to `path` atomically; raise `error` (one line naming it) on failure."""
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
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
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


_SCALARS = frozenset((str, int, float, bool, type(None)))
_ENCODERS: dict[int, json.JSONEncoder] = {}
# Items of one column, as the C encoder writes them: a newline only ever separates them
# (it escapes newlines inside strings).
_COLUMN = json.JSONEncoder(separators=("\n", ": "))


@dataclass(frozen=True, slots=True, eq=False)
class JsonRows(Sequence[dict[str, Any]]):
    """A JSON list of objects with the same `keys`, held as one column of scalars per
    key. As a sequence it is those objects (each made when asked for); `json_text`
    writes it as `json.dumps` writes the list, byte for byte, encoding each column in
    one call and never making a row's object."""

    keys: tuple[str, ...]
    columns: tuple[Sequence[Any], ...]  # one per key, each as long as the table

    def __post_init__(self) -> None:
        if len(self.columns) != len(self.keys) or len(set(map(len, self.columns))) > 1:
            raise ValueError("JsonRows needs one column per key, all of one length")

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return list(_objects(self.keys, (c[index] for c in self.columns)))
        return {k: c[index] for k, c in zip(self.keys, self.columns, strict=True)}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _objects(self.keys, self.columns)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


def _objects(keys: tuple[str, ...], columns: Iterable[Sequence[Any]]) -> Iterator[dict[str, Any]]:
    """The objects of columns of one length (checked by `JsonRows`): no check a row."""
    return map(dict, map(zip, repeat(keys), zip(*columns, strict=False)))


def json_text(data: Any) -> str:
    """`json.dumps(data, indent=1) + "\n"`, byte for byte, several times faster.

    With an indent, `json` encodes in pure Python, a call per value. Here the C encoder
    writes each container of scalars, and each list of such containers (a document's
    table: `per_step`), in one call whose item separator is the newline and indent of its
    depth; Python only adds the brackets' newlines. A newline the C encoder writes can
    only be a separator (it escapes those in strings), so a separator between two rows
    is found by text. A dict with a key that is not a string is left to `json.dumps`.
    """
    out: list[str] = []
    _json_value(data, 0, out)
    out.append("\n")
    return "".join(out)


def _encoder(depth: int) -> json.JSONEncoder:
    """The compact C encoder, its items separated by a newline and `depth` spaces."""
    enc = _ENCODERS.get(depth)
    if enc is None:
        enc = _ENCODERS[depth] = json.JSONEncoder(separators=(",\n" + " " * depth, ": "))
    return enc


def _scalars(values: Iterable[Any]) -> bool:
    return set(map(type, values)) <= _SCALARS


def _json_value(o: Any, depth: int, out: list[str]) -> None:
    if isinstance(o, JsonRows):
        out.append(_json_rows(o, depth))
        return
    is_dict = isinstance(o, dict)
    if not is_dict and not isinstance(o, (list, tuple)):
        out.append(_encoder(0).encode(o))
        return
    if not o:
        out.append("{}" if is_dict else "[]")
        return
    if is_dict and not all(type(k) is str for k in o):
        out.append(json.dumps(o, indent=1).replace("\n", "\n" + " " * depth))
        return
    inner = "\n" + " " * (depth + 1)
    if _scalars(o.values() if is_dict else o):
        text = _encoder(depth + 1).encode(o)
        out.append(f"{text[0]}{inner}{text[1:-1]}\n{' ' * depth}{text[-1]}")
        return
    if not is_dict and _json_table(o, depth, out):
        return
    key = json.encoder.encode_basestring_ascii
    items = ((key(k) + ": ", v) for k, v in o.items()) if is_dict else (("", v) for v in o)
    sep = "{" + inner if is_dict else "[" + inner
    for prefix, v in items:
        out.append(sep + prefix)
        sep = "," + inner
        _json_value(v, depth + 1, out)
    out.append("\n" + " " * depth + ("}" if is_dict else "]"))


def _json_table(rows: list[Any] | tuple[Any, ...], depth: int, out: list[str]) -> bool:
    """A list of non-empty dicts (or lists) of scalars, in one encoder call; False for
    any other list."""
    kind = type(rows[0])
    if kind not in (dict, list) or any(type(r) is not kind or not r for r in rows):
        return False
    # Every key a str, checked on the distinct keys (one set, not a test per cell).
    if kind is dict and not all(type(k) is str for k in set().union(*rows)):
        return False
    if not _scalars(
        chain.from_iterable(r.values() for r in rows) if kind is dict else chain.from_iterable(rows)
    ):
        return False
    o, c = ("{", "}") if kind is dict else ("[", "]")
    row, cell = "\n" + " " * (depth + 1), "\n" + " " * (depth + 2)
    text = _encoder(depth + 2).encode(rows)  # [{cells},<cell>{cells}]
    body = text[2:-2].replace(f"{c},{cell}{o}", f"{row}{c},{row}{o}{cell}")
    out.append(f"[{row}{o}{cell}{body}{row}{c}\n{' ' * depth}]")
    return True


def _json_rows(rows: JsonRows, depth: int) -> str:
    """`rows` as `json.dumps(list(rows), indent=1)` writes it at `depth`: each column's
    values encoded in one call (a column of one value, as in a CPU trace's device
    columns, once), then every cell and the text before it laid out in one list, column
    by column, and joined once."""
    n = len(rows)
    if not n:
        return "[]"
    row, cell = "\n" + " " * (depth + 1), "\n" + " " * (depth + 2)
    names = [json.encoder.encode_basestring_ascii(k) + ": " for k in rows.keys]
    width = 2 * len(names)  # a cell's text, and what comes before it
    parts = [""] * (width * n)
    for j, (name, column) in enumerate(zip(names, rows.columns, strict=True)):
        # The first column's cell also closes the row before and opens its own.
        before = row + "}," + row + "{" + cell + name if j == 0 else "," + cell + name
        parts[2 * j :: width] = [before] * n
        parts[2 * j + 1 :: width] = _column_texts(column, n)
    parts[0] = "{" + cell + names[0]
    return "[" + row + "".join(parts) + row + "}\n" + " " * depth + "]"


def _column_texts(column: Sequence[Any], n: int) -> list[str]:
    """Each value's JSON text (no newline: the C encoder escapes those in strings)."""
    first = column[0]
    kind = type(first)
    if set(map(type, column)) == {kind}:
        # Equal floats have one text but for 0.0 and -0.0: compared bit for bit.
        if kind is float:
            same = array("d", column).tobytes() == array("d", [first]).tobytes() * n
        else:
            same = column.count(first) == n
        if same:
            return [_COLUMN.encode([first])[1:-1]] * n
    return _COLUMN.encode(list(column))[1:-1].split("\n")
