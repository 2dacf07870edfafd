"""The shape of the package: module sizes, the longest functions and the import graph.

    python scripts/shape_report.py            # a Markdown table of the package's shape
    python scripts/shape_report.py --check    # exit 1 if a limit is broken (tests do this)

Limits (docs/ARCHITECTURE.md, "The layering rule"): a module at most 500 lines, a
function at most 80 (data tables are not functions), no import cycle between the
package's modules, dependencies that point one way; one name per thing: no two modules
share a file name, no two share a top-level class name; no default spelled in the click
options of tftune/cli.py (a default is the options' own: tuner/options.py and
tuner/option_defaults.py); the child's events are matched on their types: no event kind
is compared as text outside the codec (`EVENT_CODECS`); every field of a dataclass in
core/ (the documents' types) is a typed value: none is annotated ``Mapping[str, Any]``
or ``dict[str, Any]``, directly or through an alias of its module. Reads the source
with `ast`; imports nothing of the package.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The source folders and the package each installs as (pyproject's package-dir).
PACKAGES = {
    "tftune": "tftune",
    "core": "tftune.core",
    "probes": "tftune.probes",
    "tuner": "tftune.tuner",
    "reports": "tftune.reports",
}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def modules() -> Iterator[tuple[str, Path]]:
    for folder, package in PACKAGES.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([package, *parts]), path


def functions(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of every function, nested ones included."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The package modules this one imports, at any level (lazy imports count too)."""
    out: set[str] = set()
    base = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                target = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in out if m == "tftune" or m.startswith("tftune.")}


def graph() -> dict[str, set[str]]:
    known = {name: path for name, path in modules()}
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = imports(tree, name, path.name == "__init__.py")
        edges[name] = {t for t in targets if t in known and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _package_parents(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges without the package-to-submodule ones that `import a.b` implies."""
    return {m: {t for t in ts if not m.startswith(f"{t}.")} for m, ts in edges.items()}


# Which layer may import which (docs/ARCHITECTURE.md, "The layering rule"): dependencies
# point one way.
LAYERS = {
    "tftune.core": set(),
    "tftune.probes": {"tftune.core"},
    "tftune.reports": {"tftune.core", "tftune.probes"},
    "tftune.tuner": {"tftune.core", "tftune.probes"},
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return (
        ".".join(parts[:2])
        if len(parts) > 1 and parts[1] in {"core", "probes", "reports", "tuner"}
        else "tftune"
    )


def layer_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in edges.items():
        for t in targets:
            a, b = layer_of(m), layer_of(t)
            if a != b:
                out.setdefault(a, set()).add(b)
    return out


def layer_problems(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for m, targets in sorted(edges.items()):
        for t in sorted(targets):
            if t == "tftune.cli" and m != "tftune.__main__":
                problems.append(f"{m} imports tftune.cli (nothing may)")
            a, b = layer_of(m), layer_of(t)
            if a in LAYERS and b != a and b not in LAYERS[a]:
                problems.append(f"{m} imports {t}: {a} may import only {sorted(LAYERS[a])}")
    return problems


def name_problems() -> list[str]:
    """A file name or a top-level class name used by two modules (`__init__` aside)."""
    files: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for name, path in modules():
        if path.name != "__init__.py":
            files.setdefault(path.name, []).append(name)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(name)
    problems = [f"file name {f} used by {', '.join(m)}" for f, m in files.items() if len(m) > 1]
    problems += [f"class {c} defined in {', '.join(m)}" for c, m in classes.items() if len(m) > 1]
    return sorted(problems)


# What no field of a dataclass in core/ may be: a JSON object the document cannot type.
_UNTYPED_BASES = frozenset({"Mapping", "MutableMapping", "dict", "Dict"})


def _is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _annotation(node: ast.expr) -> ast.expr:
    """`node`, or the expression a string annotation holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return node
    return node


def _untyped(
    node: ast.expr, aliases: dict[str, ast.expr], seen: frozenset[str] = frozenset()
) -> bool:
    """Whether an annotation holds ``Mapping[str, Any]`` (or ``dict[str, Any]``) anywhere:
    in a union, an ``X | None``, a string, or an alias the module defines."""
    for sub in ast.walk(_annotation(node)):
        if isinstance(sub, ast.Subscript):
            base = sub.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            args = ast.unparse(sub.slice).replace(" ", "").strip("()")
            if name in _UNTYPED_BASES and args in ("str,Any", "str,typing.Any"):
                return True
        elif (
            isinstance(sub, ast.Name)
            and sub.id in aliases
            and sub.id not in seen
            and _untyped(aliases[sub.id], aliases, seen | {sub.id})
        ):
            return True
    return False


def untyped_fields(path: Path, module: str) -> list[str]:
    """The fields of the dataclasses in `path` annotated as a free JSON object."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                aliases[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            aliases[node.target.id] = node.value  # `X: TypeAlias = ...`
    problems = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or not _is_dataclass(cls):
            continue
        for stmt in cls.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and _untyped(stmt.annotation, aliases)
            ):
                problems.append(
                    f"{module}:{cls.name}.{stmt.target.id} is "
                    f"{ast.unparse(stmt.annotation)}: a document's field is a typed value"
                )
    return problems


# The command-line modules whose click options take their defaults from elsewhere.
NO_LITERAL_DEFAULTS = ("tftune/cli.py", "tftune/_optimize_flags.py")


def literal_defaults(source: str, where: str) -> list[str]:
    """Each ``default=`` of a click option (``click.option(...)``, ``option(...)``) in
    `source` that is a value written there (a number, a string, a tuple of them) rather
    than a name; None (no default) is allowed."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name != "option":
            continue
        for kw in node.keywords:
            if kw.arg != "default":
                continue
            try:
                value = ast.literal_eval(kw.value)
            except ValueError:
                continue  # a name or a call: the default comes from where it is defined
            if value is not None:
                flag = next((a.value for a in node.args if isinstance(a, ast.Constant)), "?")
                problems.append(
                    f"{where}:{kw.value.lineno}: {flag}'s default {value!r} is spelled here; "
                    "take it from the options (tuner/options.py, tuner/option_defaults.py)"
                )
    return problems


# The modules that define the child's events (each type's ``kind: ClassVar[Literal[...]]``)
# and their codec: the only places a kind's text may be compared.
EVENT_CODECS = ("probes/live/clock_events.py", "tuner/child/discovery_events.py")


def event_kinds() -> set[str]:
    """The kinds the codec modules declare: ``kind: ClassVar[Literal["epoch"]] = "epoch"``."""
    kinds: set[str] = set()
    for rel in EVENT_CODECS:
        path = ROOT / rel  # a codec moved without this list: fail, never pass silently
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "kind"
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                kinds.add(node.value.value)
    return kinds


def _is_kind(node: ast.expr) -> bool:
    """``x.kind``, ``kind``, ``x["kind"]`` or ``x.get("kind")``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "kind"
    )


def _texts(node: ast.AST) -> set[str]:
    """The string literals of a constant, or of a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        }
    if isinstance(node, ast.MatchValue):
        return _texts(node.value)
    if isinstance(node, ast.MatchOr):
        return {t for p in node.patterns for t in _texts(p)}
    return set()


def kind_comparisons(source: str, kinds: set[str]) -> list[tuple[int, str]]:
    """(line, kind) of each comparison of an event kind's text with a kind-like value:
    ``e.kind == "epoch"``, ``row.get("kind") in ("stream", "training")``, a ``case``
    of ``match e.kind``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_kind(o) for o in operands):
                found += [(node.lineno, k) for o in operands for k in sorted(_texts(o) & kinds)]
        elif isinstance(node, ast.Match) and _is_kind(node.subject):
            for case in node.cases:
                found += [(case.pattern.lineno, k) for k in sorted(_texts(case.pattern) & kinds)]
    return sorted(found)


def event_kind_problems() -> list[str]:
    kinds = event_kinds()
    codecs = {(ROOT / rel).resolve() for rel in EVENT_CODECS}
    return [
        f"{name}:{line}: the event kind {kind!r} compared as text (match on the type)"
        for name, path in modules()
        if path.resolve() not in codecs
        for line, kind in kind_comparisons(path.read_text(encoding="utf-8"), kinds)
    ]


def report() -> tuple[str, list[str]]:
    rows, problems = [], []
    longest: list[tuple[int, str]] = []
    for name, path in modules():
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        rows.append((lines, name))
        if lines > MAX_MODULE_LINES:
            problems.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
        for fn, size in functions(ast.parse(text)):
            longest.append((size, f"{name}:{fn}"))
            if size > MAX_FUNCTION_LINES:
                problems.append(f"{name}:{fn}: {size} lines (at most {MAX_FUNCTION_LINES})")
        if layer_of(name) == "tftune.core":
            problems += untyped_fields(path, name)
    edges = _package_parents(graph())
    found = cycles(edges)
    problems += [f"import cycle: {' <-> '.join(c)}" for c in found]
    problems += layer_problems(edges)
    problems += name_problems()
    for rel in NO_LITERAL_DEFAULTS:
        problems += literal_defaults((ROOT / rel).read_text(encoding="utf-8"), rel)
    problems += event_kind_problems()
    rows.sort(reverse=True)
    longest.sort(reverse=True)
    out = ["| module | lines |", "|---|---|"]
    out += [f"| `{n}` | {lines} |" for lines, n in rows[:15]]
    out += ["", "| function | lines |", "|---|---|"]
    out += [f"| `{n}` | {size} |" for size, n in longest[:10]]
    out += ["", "| layer | imports |", "|---|---|"]
    for layer, targets in sorted(layer_graph(edges).items()):
        out.append(f"| `{layer}` | {', '.join(f'`{t}`' for t in sorted(targets))} |")
    total = sum(lines for lines, _ in rows)
    over = sum(1 for lines, _ in rows if lines > MAX_MODULE_LINES)
    long_fns = sum(1 for size, _ in longest if size > MAX_FUNCTION_LINES)
    out += [
        "",
        f"{len(rows)} modules, {total} lines; {over} over {MAX_MODULE_LINES} lines, "
        f"{long_fns} functions over {MAX_FUNCTION_LINES} lines, {len(found)} import cycles",
    ]
    return "\n".join(out), problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a limit is broken")
    parser.add_argument("--root", type=Path, help="another checkout (e.g. a `git worktree`)")
    args = parser.parse_args()
    if args.root is not None:
        global ROOT
        ROOT = args.root.resolve()
    table, problems = report()
    if args.check:
        for p in problems:
            print(p)
        return 1 if problems else 0
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
