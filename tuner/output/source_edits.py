"""Edits of the user's own source, by byte offsets: what the emitted diff is made of.

`tuner.output.emit` (the knobs' arguments, the tf.data service's cut) and
`tuner.output.rewrite_code`
(the rewrites: a ``cache()`` inserted, a shuffle moved, ``fit`` given one iterator) find
the calls at a call site's line (`find_calls`) and say what to put where (`Edit`);
`apply_edits` makes the new text. Offsets are into the file's bytes (`line_starts`
turns an AST node's line and column into one: `span`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

# A PyDataset's site is its subclass's ``super().__init__(...)`` line.
_OP_OF_CALLEE = {"__init__": "PyDataset"}


@dataclass(frozen=True, slots=True)
class Edit:
    start: int  # byte offsets into the file
    end: int
    text: str


def line_starts(source: bytes) -> list[int]:
    """The byte offset of each line's start (line 1 at index 0)."""
    starts = [0]
    for i, b in enumerate(source):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def span(node: ast.AST, starts: Sequence[int]) -> tuple[int, int]:
    """A node's byte offsets: where it starts and where it ends."""
    line: int = getattr(node, "lineno", 1)
    col: int = getattr(node, "col_offset", 0)
    end_line = getattr(node, "end_lineno", None) or line
    end_col = getattr(node, "end_col_offset", None)
    end_col = col if end_col is None else end_col
    return starts[line - 1] + col, starts[end_line - 1] + end_col


def keyword_added(call: ast.Call, name: str, text: str, starts: Sequence[int]) -> Edit:
    """``name=text`` added to `call` before its closing parenthesis."""
    close = span(call, starts)[1] - 1  # the ")"
    sep = ", " if call.args or call.keywords else ""
    return Edit(close, close, f"{sep}{name}={text}")


def callee(call: ast.Call) -> str | None:
    """The name a call calls: ``ds.map(...)`` -> map, ``TFRecordDataset(...)`` (imported
    by name) -> TFRecordDataset."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def op_of(call: ast.Call) -> str | None:
    name = callee(call)
    return _OP_OF_CALLEE.get(name, name) if name is not None else None


def find_calls(tree: ast.Module, line: int, ops: Sequence[str]) -> list[ast.Call]:
    """Every ``.op(...)`` call at a call site's line. A config applies to each call on
    that line that takes the knob (``ds.map(f).map(g)`` shares one key), and the line of
    a call is that of its method name (a chain split over lines)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and op_of(node) in ops
        and line in (node.lineno, node.func.end_lineno)
    ]


def tf_alias(tree: ast.Module) -> str:
    """The name the file imports TensorFlow as (``tf`` where it does not say)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "tensorflow":
                    return a.asname or "tensorflow"
    return "tf"


def apply_edits(source: bytes, edits: Sequence[Edit]) -> bytes:
    """`source` with `edits` made, from the end of the file back; edits at one place
    land in their given order."""
    new = source
    order = sorted(enumerate(edits), key=lambda ie: (ie[1].start, ie[1].end, ie[0]))
    for _, e in reversed(order):
        new = new[: e.start] + e.text.encode() + new[e.end :]
    return new
