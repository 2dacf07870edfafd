"""The rewrites as code on the user's own lines (`tuner.output.emit` puts them in the diff).

- a cache: ``.cache()`` right after the map call at its line (``.cache("FILE")`` for a
  file cache);
- a shuffle moved: where the maps and the shuffle are consecutive statements that each
  reassign one name (``ds = ds.map(f)`` then ``ds = ds.shuffle(n)``), the shuffle's
  statement moves above the maps; else ``.shuffle(...)`` leaves its call and goes in
  right before the first map's;
- a filter moved: the filter after a map moved above it, as a shuffle is;
- files read at once: ``.flat_map(f)`` as ``.interleave(f, cycle_length=N,
  num_parallel_calls=N)``;
- a map made over batches: the batch after it moved above it (statements or a chain,
  as for a shuffle), its function through ``tf.vectorized_map`` where that is the way;
- one iterator in Keras ``fit``: ``x.repeat()`` with ``steps_per_epoch=N``, and the
  validation data likewise where its length is known (`RewriteFacts.fit`); a custom loop
  has no one line to change: `iterator_snippet` says what to write;
- the compute switches: Keras compile's ``jit_compile``, ``steps_per_execution`` and
  ``run_eagerly`` set on its call; an eager step of a custom loop decorated with
  ``@tf.function`` (``jit_compile=True`` for XLA) above its ``def``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tftune.core.learning import LearningRateScale, OptimizerSeen
from tftune.tuner.fixes.training_calls import CompileCall, FitCall, StepFunction
from tftune.tuner.output.rate_code import rate_edits
from tftune.tuner.output.source_edits import Edit, find_calls, keyword_added, op_of, span, tf_alias
from tftune.tuner.searchspace.config import (
    AUTOTUNE,
    CACHE_MEMORY,
    COMPILE_XLA,
    VECTORIZE_PFOR,
    Config,
)


@dataclass(frozen=True, slots=True)
class RewriteFacts:
    """What the rewrites' code needs beyond the config: the maps each moved shuffle
    goes above (shuffle site -> map sites), the training ``fit`` call, and the training
    loop's place and epoch length."""

    crosses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fit: FitCall | None = None
    loop_place: str | None = None
    epoch_length: int | None = None
    compiled: CompileCall | None = None  # the training model's Keras compile call
    step: StepFunction | None = None  # the custom loop's eager step function
    # The learning check's scaled learning rate, and the optimizers it applies to.
    scale: LearningRateScale | None = None
    optimizers: tuple[OptimizerSeen, ...] = ()


def _line(site: str) -> tuple[str, int] | None:
    path, _, line = site.rpartition(":")
    return (path, int(line)) if line.isdigit() else None


def rewrite_files(config: Config, facts: RewriteFacts) -> set[str]:
    """The files the rewrites of `config` edit (relative paths)."""
    files = {
        key.rpartition(":")[0]
        for key, s in config.sites.items()
        if s.cache or s.shuffle_first or s.filter_first or s.vectorize or s.files_at_once
    }
    if config.one_iterator and facts.fit is not None and facts.fit.place:
        files.add(facts.fit.place.rpartition(":")[0])
    if facts.scale is not None:
        files |= {o.site.rpartition(":")[0] for o in facts.optimizers if o.site}
    for where in (_compile_place(config, facts), _step_site(config, facts)):
        if where is not None:
            files.add(where.rpartition(":")[0])
    return files


def _compile_place(config: Config, facts: RewriteFacts) -> str | None:
    """The Keras compile call the config's compute switches change, if any."""
    switched = config.jit_compile is not None or config.steps_per_execution is not None
    if facts.compiled is None or not (switched or config.compile_step is not None):
        return None
    return facts.compiled.place


def _step_site(config: Config, facts: RewriteFacts) -> str | None:
    """The ``def`` line of the eager step the config compiles, if any."""
    if config.compile_step is None or facts.step is None or facts.compiled is not None:
        return None
    return facts.step.site


def rewrite_edits(
    tree: ast.Module,
    source: bytes,
    starts: Sequence[int],
    rel: str,
    config: Config,
    facts: RewriteFacts,
) -> list[Edit]:
    """The edits of `config`'s rewrites in the file `rel` (module docstring)."""
    edits: list[Edit] = []
    for key, site in config.sites.items():
        where = _line(key)
        if where is None or where[0] != rel:
            continue
        if site.cache:
            edits += _cache(tree, starts, where[1], site.cache, key)
        if site.shuffle_first:
            lines = [w[1] for s in facts.crosses.get(key, ()) if (w := _line(s)) and w[0] == rel]
            edits += _moved_shuffle(tree, source, starts, where[1], lines)
        if site.vectorize:
            edits += _vectorized(tree, source, starts, where[1], site.vectorize)
        if site.filter_first:
            edits += _moved_filter(tree, source, starts, where[1])
        if site.files_at_once:
            edits += _interleaved(tree, starts, where[1], site.files_at_once)
    fit = facts.fit
    if config.one_iterator and fit is not None and fit.place:
        where = _line(fit.place)
        if where is not None and where[0] == rel:
            edits += _fit(tree, starts, where[1], fit)
    place = _compile_place(config, facts)
    if place is not None and (where := _line(place)) is not None and where[0] == rel:
        edits += _compile(tree, starts, where[1], config)
    step_site = _step_site(config, facts)
    if step_site is not None and (where := _line(step_site)) is not None and where[0] == rel:
        edits += _decorated(tree, source, starts, where[1], config)
    return edits + _rate(tree, source, starts, rel, facts)


def _rate(
    tree: ast.Module, source: bytes, starts: Sequence[int], rel: str, facts: RewriteFacts
) -> list[Edit]:
    """The learning check's scaled learning rate on each optimizer line in `rel`."""
    scale, edits = facts.scale, []
    if scale is None:
        return []
    for seen in facts.optimizers:
        if seen.site and (where := _line(seen.site)) is not None and where[0] == rel:
            edits += rate_edits(tree, source, starts, where[1], seen, scale, tf_alias(tree))
    return edits


def _compile(tree: ast.Module, starts: Sequence[int], line: int, config: Config) -> list[Edit]:
    """Keras compile's compute arguments set on its call."""
    calls = find_calls(tree, line, ("compile",))
    if len(calls) != 1:
        return []
    call, wanted = calls[0], {}
    if config.compile_step is not None:
        wanted["run_eagerly"] = "False"
        if config.compile_step == COMPILE_XLA:
            wanted["jit_compile"] = "True"
    if config.jit_compile is not None:
        wanted["jit_compile"] = str(config.jit_compile)
    if config.steps_per_execution is not None:
        wanted["steps_per_execution"] = str(config.steps_per_execution)
    edits = []
    for name, text in wanted.items():
        kw = next((k for k in call.keywords if k.arg == name), None)
        if kw is not None:
            edits.append(Edit(*span(kw.value, starts), text))
        else:
            edits.append(keyword_added(call, name, text, starts))
    return edits


def _decorated(
    tree: ast.Module, source: bytes, starts: Sequence[int], line: int, config: Config
) -> list[Edit]:
    """``@tf.function`` (with XLA where the config says) above the step's ``def``."""
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno == line]
    if len(defs) != 1:
        return []
    node = defs[0]
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    at = starts[first - 1]
    indent = " " * node.col_offset
    alias = tf_alias(tree)
    xla = "(jit_compile=True)" if config.compile_step == COMPILE_XLA else ""
    return [Edit(at, at, f"{indent}@{alias}.function{xla}\n")]


def _cache(tree: ast.Module, starts: Sequence[int], line: int, where: str, key: str) -> list[Edit]:
    calls = find_calls(tree, line, ("map", "interleave"))
    if not calls:
        return []
    call = max(calls, key=lambda c: span(c, starts)[1])
    end = span(call, starts)[1]
    if where == CACHE_MEMORY:
        return [Edit(end, end, ".cache()")]
    name = key.replace("/", "_").replace(":", "-")
    return [Edit(end, end, f".cache({where.rstrip('/') + '/tftune-cache-' + name!r})")]


def _statement_of(tree: ast.Module, call: ast.Call) -> tuple[list[ast.stmt], int] | None:
    """The body and index of the simple statement ``name = name.op(...)`` that is
    `call`, or None."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.Assign) and stmt.value is call and _reassigns(stmt):
                    return body, i
    return None


def _reassigns(stmt: ast.Assign) -> bool:
    value = stmt.value
    return (
        len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == stmt.targets[0].id
    )


def _moved_shuffle(
    tree: ast.Module, source: bytes, starts: Sequence[int], line: int, map_lines: Sequence[int]
) -> list[Edit]:
    shuffles = find_calls(tree, line, ("shuffle",))
    maps = [c for ml in map_lines for c in find_calls(tree, ml, ("map",))]
    if len(shuffles) != 1 or not maps:
        return []
    return _moved_above(tree, source, starts, shuffles[0], maps)


def _moved_filter(tree: ast.Module, source: bytes, starts: Sequence[int], line: int) -> list[Edit]:
    """The filter at `line` moved above the map whose result it filters (the map's own
    call: the filter's receiver, or the statement before that reassigns it)."""
    filters = find_calls(tree, line, ("filter",))
    if len(filters) != 1:
        return []
    maps = [
        c
        for c in ast.walk(tree)
        if isinstance(c, ast.Call) and op_of(c) == "map" and filters[0] in _calls_on(tree, c)
    ]
    return _moved_above(tree, source, starts, filters[0], maps[:1]) if maps else []


def _moved_above(
    tree: ast.Module,
    source: bytes,
    starts: Sequence[int],
    moving: ast.Call,
    above: Sequence[ast.Call],
) -> list[Edit]:
    """The call `moving` (``.shuffle(...)``, ``.batch(...)``) moved before the calls
    `above` it: its statement above theirs where each is a statement of its own, else
    its ``.op(...)`` taken out of its chain and put before the first of them."""
    first = min(above, key=lambda c: span(c, starts)[0])
    moved, top = _statement_of(tree, moving), _statement_of(tree, first)
    if moved is not None and top is not None and moved[0] is top[0]:
        body, i = moved
        if top[1] < i and i - top[1] == len(above):  # their statements, then its
            a = starts[body[i].lineno - 1]
            b = starts[body[i].end_lineno or body[i].lineno]
            at = starts[body[top[1]].lineno - 1]
            text = source[a:b].decode("utf-8", "replace")
            return [Edit(a, b, ""), Edit(at, at, text)]
    if not isinstance(moving.func, ast.Attribute) or not isinstance(first.func, ast.Attribute):
        return []
    receiver_end = span(moving.func.value, starts)[1]
    call_text = source[receiver_end : span(moving, starts)[1]].decode("utf-8", "replace")
    into = span(first.func.value, starts)[1]
    return [Edit(receiver_end, span(moving, starts)[1], ""), Edit(into, into, call_text)]


def _vectorized(
    tree: ast.Module, source: bytes, starts: Sequence[int], line: int, way: str
) -> list[Edit]:
    """``map(f).batch(b)`` as ``batch(b).map(f)``: the batch right after the map at `line`
    moved above it, and `f` through tf.vectorized_map where `way` says so."""
    maps = find_calls(tree, line, ("map",))
    if len(maps) != 1:
        return []
    batch = next((c for c in _calls_on(tree, maps[0]) if op_of(c) == "batch"), None)
    if batch is None:
        return []
    edits = _moved_above(tree, source, starts, batch, maps)
    fn = maps[0].args[0] if maps[0].args else None
    if edits and way == VECTORIZE_PFOR and fn is not None:
        a, b = span(fn, starts)
        text = source[a:b].decode("utf-8", "replace")
        wrapped = f"lambda *b: {tf_alias(tree)}.vectorized_map(lambda e: ({text})(*e), b)"
        edits.append(Edit(a, b, wrapped))
    return edits


def _interleaved(tree: ast.Module, starts: Sequence[int], line: int, files: int) -> list[Edit]:
    """``.flat_map(f)`` as ``.interleave(f, cycle_length=N, num_parallel_calls=N)``."""
    calls = find_calls(tree, line, ("flat_map",))
    if len(calls) != 1 or not isinstance(calls[0].func, ast.Attribute):
        return []
    call = calls[0]
    end = span(call.func, starts)[1]
    n = f"{tf_alias(tree)}.data.AUTOTUNE" if files == AUTOTUNE else str(files)
    return [
        Edit(end - len("flat_map"), end, "interleave"),
        keyword_added(call, "cycle_length", n, starts),
        keyword_added(call, "num_parallel_calls", n, starts),
    ]


def _calls_on(tree: ast.Module, call: ast.Call) -> list[ast.Call]:
    """The calls made on what `call` returns: chained on it (``call.batch(...)``), or on
    the name it is assigned to in the next statement (``ds = ds.batch(...)``)."""
    found = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.value is call
    ]
    where = _statement_of(tree, call)
    if where is not None:
        body, i = where
        after = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(after, ast.Assign)
            and isinstance(after.value, ast.Call)
            and _reassigns(after)
        ):
            found.append(after.value)
    return found


def _repeated(expr: ast.expr, starts: Sequence[int]) -> list[Edit]:
    a, b = span(expr, starts)
    simple = isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return [Edit(b, b, ".repeat()")] if simple else [Edit(a, a, "("), Edit(b, b, ").repeat()")]


def _fit(tree: ast.Module, starts: Sequence[int], line: int, fit: FitCall) -> list[Edit]:
    calls = find_calls(tree, line, ("fit",))
    if len(calls) != 1:
        return []
    call, edits = calls[0], []
    x = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "x"), None)
    if x is not None and fit.x_elements and not fit.steps_given:
        edits += _repeated(x, starts)
        edits.append(keyword_added(call, "steps_per_epoch", _length(x, fit.x_elements), starts))
    val = next((k.value for k in call.keywords if k.arg == "validation_data"), None)
    if val is not None and fit.validation_elements and not fit.validation_steps_given:
        edits += _repeated(val, starts)
        steps = _length(val, fit.validation_elements)
        edits.append(keyword_added(call, "validation_steps", steps, starts))
    return edits


def _length(expr: ast.expr, elements: int) -> str:
    """An epoch's steps as code: ``len(ds)`` for a dataset named by a variable (right at
    any batch size), else the count measured at the script's own."""
    return f"len({expr.id})" if isinstance(expr, ast.Name) else str(elements)


def iterator_snippet(config: Config, facts: RewriteFacts) -> list[str]:
    """The one-iterator rewrite of a custom loop, as lines to write (no one line of the
    script changes: its loop takes another shape)."""
    if not config.one_iterator or facts.fit is not None:
        return []
    at = f" (the loop at {facts.loop_place})" if facts.loop_place else ""
    written = f", {facts.epoch_length} as written" if facts.epoch_length else ""
    return [
        f"# one iterator across epochs{at}: each epoch reads one pass's elements from it",
        f"steps_per_epoch = len(ds)  # before repeat(){written}",
        "it = iter(ds.repeat())",
        "for epoch in range(epochs):",
        "    for step in range(steps_per_epoch):",
        "        element = next(it)",
    ]
