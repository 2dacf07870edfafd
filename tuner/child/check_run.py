"""Child side: the check run `tftune optimize` makes before its study (its config's meta,
`equivalence.CHECK_META_KEY`), and the report it leaves (`CheckReport`).

The run goes as far into the script as the checks need, then leaves without training:

- where the training dataset is about to be iterated (`at_dataset`): the pipeline
  rewrites are checked on it (tuner/child/equivalence.py), and its examples per pass are
  counted where tf.data does not know them;
- Keras ``fit`` (`at_fit`): the same on its dataset, then the compute switches on the
  model, from a snapshot of its weights (tuner/child/compute_check.py);
- the script's own loop (`at_step`): at its first eager update, its step function is
  replaced by a probe that checks the compiled step over the next steps.

The report is rewritten after each check, so a run that ends early leaves what it had.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any, NoReturn

from tftune.core.tuning_rewrites import CheckReport, RewriteRow, RewriteState
from tftune.core.userfiles import write_text_atomic
from tftune.tuner.child.compute import compile_arguments, compiled
from tftune.tuner.child.compute_check import (
    CHECK_STEPS,
    COMPUTE_KINDS,
    StepProbe,
    keras_check,
    step_variables,
)
from tftune.tuner.child.elements import pass_examples
from tftune.tuner.child.equivalence import Checker, CheckSpec
from tftune.tuner.child.lineage import is_batched
from tftune.tuner.child.rewrite_apply import finite_length
from tftune.tuner.fixes.rewrites import Candidate
from tftune.tuner.searchspace.config import Config


class CheckRun:
    """The candidates of one check run, and the rows found so far."""

    def __init__(self, patcher: Any, spec: CheckSpec, iterate: Callable[[Any], Any]) -> None:
        self.patcher, self.spec, self.iterate = patcher, spec, iterate
        self.data = [c for c in spec.candidates if c.kind not in COMPUTE_KINDS]
        self.compute = [c for c in spec.candidates if c.kind in COMPUTE_KINDS]
        self.rows: list[RewriteRow] = []
        self.examples: int | None = None
        self.data_done = False

    def write(self) -> None:
        report = CheckReport(tuple(self.rows), self.examples)
        write_text_atomic(self.spec.out, json.dumps(report.to_json()))

    def leave(self) -> NoReturn:
        self.write()
        os._exit(0)

    def at_dataset(self, ds: Any, batched: bool, then_leave: bool = True) -> None:
        """The training dataset, about to be iterated: the pipeline rewrites."""
        import tensorflow as tf

        from tftune.tuner.child.state import Hooks

        if self.data_done:
            return
        self.data_done = True
        if tf.inside_function():
            why = "the training dataset is iterated inside a tf.function: it cannot be read here"
            self.rows += [_refused(c, why) for c in self.data]
            self.leave()
        hooks, self.patcher.hooks = self.patcher.hooks, Hooks()  # replays: no new sites
        self.examples = None if finite_length(ds) is not None else pass_examples(ds, self.iterate)
        self.write()
        checker = Checker(self.patcher, ds, batched, self.iterate)
        for candidate in self.data:
            self.rows.append(checker.run(candidate, self.spec.seconds))
            self.write()
        self.patcher.hooks = hooks
        if then_leave and not self.compute:
            self.leave()

    def at_fit(
        self,
        model: Any,
        arguments: MutableMapping[str, Any],
        fit: Callable[..., Any],
        compile_: Callable[..., Any],
    ) -> NoReturn:
        """Keras ``fit`` of the training data: every check, then the run leaves."""
        import tensorflow as tf

        x = arguments.get("x")
        if isinstance(x, tf.data.Dataset):
            self.at_dataset(x, bool(is_batched(x)), then_leave=False)
            batches = [b for _, b in zip(range(CHECK_STEPS), self.iterate(x), strict=False)]
        else:
            batches = []
        compiled_with: dict[str, Any] = dict(getattr(model, "_tftune_compiled_with", {}))

        def switched(config: Config) -> dict[str, Any]:
            out = dict(compiled_with)
            compile_arguments(out, config)
            return out

        if self.compute:
            self.rows += keras_check(
                model, batches, compiled_with, switched, self.compute, fit, compile_
            )
        self.leave()

    def at_step(
        self, where: MutableMapping[str, Any] | None, name: str | None, optimizers: Sequence[Any]
    ) -> None:
        """The first eager update of the script's own loop, in `name` (called by that
        name in `where`): the step is probed over the next calls (`StepProbe`)."""
        if not self.compute:
            return
        fn = where.get(name) if where is not None and name is not None else None
        if fn is None or where is None or name is None:
            why = "the update runs in the loop's own body, not in a function it calls"
            self.rows += [_refused(c, why) for c in self.compute]
            self.leave()

        def done(rows: list[RewriteRow]) -> None:
            self.rows += rows
            self.leave()

        def compiled_as(how: str) -> Callable[..., Any]:
            step: Callable[..., Any] = compiled(fn, how)
            return step

        where[name] = StepProbe(fn, self.compute, compiled_as, step_variables(optimizers), done)


def _refused(c: Candidate, why: str) -> RewriteRow:
    return c.row(RewriteState.REFUSED, why)
