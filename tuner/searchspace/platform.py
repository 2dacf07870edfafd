"""What this machine and this script allow the search: the CPU's 16-bit support, the
platform's Keras precision policy, and whether the script (or a module of the user's it
imports) uses Keras at all. Read once per `tftune optimize`, before the space is built."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable
from pathlib import Path

CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags (empty where /proc/cpuinfo cannot be read)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def platform_policy(gpu_visible: bool, flags: Iterable[str]) -> tuple[str | None, str]:
    """The 16-bit Keras policy worth trying here, or None, and why."""
    if gpu_visible:
        return "mixed_float16", "GPU visible: float16 on tensor cores"
    have = CPU_BF16_FLAGS & set(flags)
    if have:
        return "mixed_bfloat16", f"CPU supports bfloat16 ({', '.join(sorted(have))})"
    return None, (
        "no GPU and the CPU lacks avx512_bf16/amx_bf16: 16-bit policies only emulate here "
        "(mixed_float16 measured 0.43x on CPU)"
    )


MAX_SCANNED_FILES = 200


def _local_imports(tree: ast.Module, here: Path, root: Path) -> list[Path]:
    names: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names += [(f"{base}.{a.name}" if base else a.name, node.level) for a in node.names]
            names.append((base, node.level))
    out = []
    for name, level in names:
        start = root if level == 0 else here.parents[level - 1]
        rel = Path(*name.split(".")) if name else Path()
        for cand in (start / rel.with_suffix(".py"), start / rel / "__init__.py"):
            if name and cand.is_file():
                out.append(cand)
    return out


def mentions_keras(script: str | os.PathLike[str]) -> bool:
    """Whether the script, or a module of the user's it imports (transitively, from the
    script's folder), mentions Keras. Importing TensorFlow loads Keras anyway, so
    discovery cannot tell; code that never names Keras builds no Keras model, and a Keras
    precision policy cannot change what it runs."""
    first = Path(script).resolve()
    root = first.parent
    todo: list[Path] = [first]
    seen: set[Path] = set()
    while todo and len(seen) < MAX_SCANNED_FILES:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            return True  # cannot tell: keep the knob
        if "keras" in text:
            return True
        todo += _local_imports(tree, path.parent, root)
    return len(seen) >= MAX_SCANNED_FILES  # too big to be sure: keep the knob
