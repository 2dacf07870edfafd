"""What a script's own code could do, read from its text before it runs.

`local_modules(script)`: the script and every module it imports from its own folder,
recursively: the code that is the user's. `names_in(tree)`: the identifiers and attribute
names a module uses (never its strings or comments).

How long a run waits for the first optimizer update before it takes the busiest dataset
loop instead of training (a pipeline benchmark updates nothing): `fallback_s(path)`.

- `shows_training(path)`: the code calls what trains (`SHOWN_TRAINING`: Keras ``fit``, a
  ``GradientTape``, ``apply_gradients``, ``minimize``, an optimizer class). Such a script
  trains, however long it builds a vocabulary, counts its data or calls ``adapt`` first:
  no fallback at all, the run waits for the first update up to the first-step deadline.
- `may_train(path)`: the code names anything that could train (`TRAINING_NAMES`, or a name
  containing one of `TRAINING_PARTS`: ``train``, ``optimi``...), or a file is unreadable:
  `watch.FALLBACK_S` of iterating with no update. The process can still show training
  (``fit`` called, a tape entered: `tuner.child.roles.Roles.expect_training`), which
  lifts the fallback too.
- Neither: a script whose code names nothing that trains cannot reach a first step, so
  the short `watch.KNOWN_BUSIEST_S`.

What a module imported from elsewhere (an installed package) does is not read: a script
that hands training to one still names it (``trainer.train()``, ``fit``, ``run_training``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tftune.tuner.trial.watch import FALLBACK_S, KNOWN_BUSIEST_S

# Names whose call trains: a script that uses one trains for sure.
SHOWN_TRAINING = frozenset(
    {
        "fit",
        "fit_generator",
        "train_on_batch",
        "apply_gradients",
        "minimize",
        "GradientTape",
        "Optimizer",
        "optimizers",
        "train_and_evaluate",
    }
)
# Names that train, or call what trains, in the TF/Keras ecosystem and in users' own
# helpers. A false "may train" costs the long wait; a false "cannot" ends discovery
# after `KNOWN_BUSIEST_S` on a counting loop: this list errs towards "may train".
TRAINING_NAMES = SHOWN_TRAINING | {
    "gradients",
    "optimizer",
    "assign_add",
    "assign_sub",
    "compile",
    "Estimator",
    "estimator",
    "Trainer",
    "Checkpoint",
}
# Any name containing one of these (``train``, ``train_step``, ``run_training``).
TRAINING_PARTS = ("train", "optimi", "backward", "grad")
MAX_MODULES = 50  # the local modules read, at most; more: assume it may train


def fallback_s(script: Path) -> float | None:
    """How long a run of `script` iterates with no update before it takes the busiest
    loop; None: never, it trains (module docstring)."""
    if shows_training(script):
        return None
    return FALLBACK_S if may_train(script) else KNOWN_BUSIEST_S


def shows_training(script: Path) -> bool:
    """Whether the script or its local modules call what trains (`SHOWN_TRAINING`)."""
    modules = local_modules(script)
    for path in modules[: MAX_MODULES + 1]:
        tree = parse_module(path)
        if tree is not None and names_in(tree) & SHOWN_TRAINING:
            return True
    return False


def may_train(script: Path) -> bool:
    """False only when the script and its local modules name nothing that trains."""
    modules = local_modules(script)
    if len(modules) > MAX_MODULES:
        return True
    for path in modules:
        tree = parse_module(path)
        if tree is None or any(_trains(name) for name in names_in(tree)):
            return True
    return False


def local_modules(script: Path) -> list[Path]:
    """The script and the modules it imports from its own folder, recursively (at most
    `MAX_MODULES` + 1 of them), the script first. A file that does not parse is listed
    but not followed."""
    root = script.resolve().parent
    seen: list[Path] = []
    todo = [script.resolve()]
    while todo and len(seen) <= MAX_MODULES:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        tree = parse_module(path)
        if tree is not None:
            todo.extend(_local_imports(tree, path.parent, root))
    return seen


def parse_module(path: Path) -> ast.AST | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _trains(name: str) -> bool:
    return name in TRAINING_NAMES or any(p in name.lower() for p in TRAINING_PARTS)


def names_in(tree: ast.AST) -> set[str]:
    """Every identifier and attribute name used or defined in `tree`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.update(node.name.split("."))
    return out


def _local_imports(tree: ast.AST, here: Path, root: Path) -> list[Path]:
    """The files of the modules `tree` imports that live beside the script (or beside
    the importing module, for a relative import)."""
    out: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            base = root
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            names = [f"{mod}.{a.name}" if mod else a.name for a in node.names] + [mod]
            base = here if node.level else root
        else:
            continue
        for name in filter(None, names):
            parts = name.split(".")
            for n in range(1, len(parts) + 1):
                stem = base.joinpath(*parts[:n])
                for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                    if candidate.is_file():
                        out.append(candidate.resolve())
    return out
