"""Crashes explained: a failed trial keeps its stderr and crash, a script that crashes on
its own is said to, and its crashes are blamed on no knob value (fake runner, no TF)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES
from rich.console import Console
from stderr_samples import GLIBC_ABORT, TF_NOISE
from studykit import (
    SITES,
    latency_bound,
    outcome_json,
    render_table,
    settings,
    space,
    trial_line,
)

from tftune.core.errors import ScriptError
from tftune.core.failures import FailureKind
from tftune.core.tuning_document import TuningDocument
from tftune.core.vocabulary import TrialState
from tftune.reports import render_report_json
from tftune.reports.tuning_model import TuningReport, build_tuning_model
from tftune.testing import Failure, FakeRunner, FigureLike
from tftune.tuner.searchspace.bounds import Ceiling
from tftune.tuner.searchspace.config import Config
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.study import (
    Role,
    StudyOutcome,
    open_storage,
    run_study,
)
from tftune.tuner.study.records import CRASH_ATTR, DEAD_AFTER, STDERR_TAIL_ATTR, dead_values
from tftune.tuner.trial.crashes import STORED_TAIL_CHARS, STORED_TAIL_LINES

# What the runner keeps of a crashed run: up to 200 lines, the crash at the end.
LONG_TAIL = "".join(f"step {i}: loss 0.{i:03d}\n" for i in range(180)) + GLIBC_ABORT
CORES = 2


def crashing(
    crash_calls: set[int],
    *,
    crashes: Callable[[Config], bool] = lambda c: False,
    nan: Callable[[Config], bool] = lambda c: False,
) -> FakeRunner:
    """The fake runner, where some runs crash in native code (glibc abort) whatever their
    config (`crash_calls`: indices of the runner's calls), and some configs fail."""
    calls = itertools.count()

    def script(config: Config) -> FigureLike:
        if next(calls) in crash_calls or crashes(config):
            return Failure("killed by signal 6", stderr_tail=LONG_TAIL, returncode=-6)
        if nan(config):
            # The runner stops a NaN run itself (SIGTERM): an attributable failure.
            return Failure(
                "NaN loss under mixed_bfloat16",
                stderr_tail=TF_NOISE,
                returncode=-15,
                kind=FailureKind.NAN,
            )
        return latency_bound(config)

    return FakeRunner(script)


def _bf16() -> SearchSpace:
    bf16 = build_space(SITES, cores=CORES, flags={"avx512_bf16"}, uses_keras=True)
    assert "mixed_precision" in bf16.names
    return bf16


def _json(out: StudyOutcome, sp: SearchSpace) -> dict[str, Any]:
    return outcome_json(out, script="train.py", searched=sp)  # as written to the file


def _stored(tmp_path: Path) -> list[Any]:
    import optuna

    storage = open_storage(str(tmp_path / "study.journal"))[0]
    return optuna.load_study(study_name="t", storage=storage).get_trials()


def test_a_crashed_trial_keeps_its_stderr_and_an_unstable_script_is_said_to_be(
    tmp_path: Path,
) -> None:
    # The script as written crashes on its first run, and two search runs crash too.
    runner = crashing({0, 6, 9})
    sp = space()
    out = run_study(sp, runner, settings(tmp_path, n_trials=12))
    first = out.records[0]
    assert first.role is Role.AS_WRITTEN and first.state is TrialState.FAILED
    assert first.reason == "killed by signal 6"
    assert first.crash is not None and first.crash.headline == "corrupted double-linked list"
    assert "Fatal Python error: Aborted" in first.stderr_tail
    assert len(first.stderr_tail) <= STORED_TAIL_CHARS
    assert len(first.stderr_tail.splitlines()) <= STORED_TAIL_LINES
    assert "step 0:" not in first.stderr_tail  # the start of a long tail is dropped
    # ... in the study itself, for `tftune status` and later runs.
    stored = _stored(tmp_path)[0]
    assert stored.user_attrs[STDERR_TAIL_ATTR] == first.stderr_tail
    assert stored.user_attrs[CRASH_ATTR]["signal"] == "SIGABRT"
    # The retry of the script as written ran through, so the study went on.
    assert out.baselines[Role.AS_WRITTEN].state is TrialState.COMPLETE

    inst = out.instability
    assert inst is not None and inst.as_written == 1
    assert inst.crashed == 3 and inst.runs == len(runner.configs)  # the final round too
    assert inst.sentence == (
        f"the script is unstable on its own: it crashed in 3 of {len(runner.configs)} runs, "
        "the script as written among them; its message: corrupted double-linked list"
    )

    data = _json(out, sp)
    assert data["instability"]["sentence"] == inst.sentence
    assert data["instability"]["trials"] == list(inst.trials)
    row = data["trials_detail"][0]
    assert row["state"] == "failed" and row["reason"] == "killed by signal 6"
    assert row["stderr_tail"] == first.stderr_tail
    assert row["crash"]["key_lines"][:2] == [
        "corrupted double-linked list",
        "Fatal Python error: Aborted",
    ]
    assert all(r["stderr_tail"] is None for r in data["trials_detail"] if r["state"] != "failed")

    console = Console(width=200, record=True)
    console.print(render_table(out, Ceiling(300.0, 9000.0)))
    shown = console.export_text()
    assert f"warning: {inst.sentence}" in shown and "no knob value is blamed" in shown
    line = trial_line(first, None)
    assert line.splitlines()[0].endswith("]") and "failed: killed by signal 6" in line
    assert line.splitlines()[1:3] == [
        "    corrupted double-linked list",
        "    Fatal Python error: Aborted",
    ]
    assert line.splitlines()[-1] == "    at /home/u/train.py:41 in train"


def test_a_stable_script_has_no_instability(tmp_path: Path) -> None:
    runner = crashing(set())
    sp = space()
    out = run_study(sp, runner, settings(tmp_path, n_trials=12))
    assert out.instability is None and _json(out, sp)["instability"] is None
    console = Console(width=200, record=True)
    console.print(render_table(out, None))
    assert "unstable" not in console.export_text()


def _policy(config: Config) -> bool:
    return config.mixed_precision is not None


def test_a_value_failing_only_beside_an_unstable_script_is_not_excluded(tmp_path: Path) -> None:
    """The policy's runs crash (glibc abort), as the script as written did: the crash is
    the script's, so the policy is measured again and never skipped."""
    runner = crashing({0}, crashes=_policy)
    out = run_study(_bf16(), runner, settings(tmp_path, n_trials=20))
    tried = [c for c in runner.configs if _policy(c)]
    assert len(tried) > DEAD_AFTER
    assert not [r for r in out.records if (r.reason or "").startswith("skipped:")]
    assert dead_values(_stored(tmp_path)) == {}
    assert out.instability is not None and out.instability.as_written == 1


def test_an_attributable_failure_is_still_excluded_beside_an_unstable_script(
    tmp_path: Path,
) -> None:
    """A NaN loss under the policy is the policy's, whatever else crashes."""
    runner = crashing({0}, nan=_policy)
    out = run_study(_bf16(), runner, settings(tmp_path, n_trials=20))
    assert len([c for c in runner.configs if _policy(c)]) == DEAD_AFTER
    skipped = [r for r in out.records if (r.reason or "").startswith("skipped:")]
    assert skipped and all("mixed_precision=mixed_bfloat16" in (r.reason or "") for r in skipped)
    assert out.instability is not None
    assert out.best_config.mixed_precision is None


def test_a_crash_that_follows_a_value_is_blamed_on_it_when_the_script_is_stable(
    tmp_path: Path,
) -> None:
    runner = crashing(set(), crashes=_policy)
    out = run_study(_bf16(), runner, settings(tmp_path, n_trials=20))
    assert len([c for c in runner.configs if _policy(c)]) == DEAD_AFTER
    assert any((r.reason or "").startswith("skipped:") for r in out.records)
    assert out.instability is None  # the crashes share the policy


def test_a_script_as_written_that_always_crashes_says_its_message(tmp_path: Path) -> None:
    runner = crashing({0, 1})
    with pytest.raises(ScriptError, match=r"signal 6 \(corrupted double-linked list\)"):
        run_study(space(), runner, settings(tmp_path, n_trials=12))


# --- the report ---------------------------------------------------------------------

FIXTURE = FIXTURES / "tuning_latency.json"
WHEN = "2026-11-30 03:40 UTC"


def _model(data: dict[str, Any]) -> TuningReport:
    """The report model of a saved tuning JSON, as `tftune report` makes it."""
    return build_tuning_model(TuningDocument.from_json(data), generated_at=WHEN, data=data)


def _with_crash() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    failed = next(t for t in data["trials_detail"] if t["state"].lower().startswith("fail"))
    failed["reason"] = "killed by signal 6"
    failed["stderr_tail"] = "noise <b>\ncorrupted double-linked list\nFatal Python error: Aborted"
    failed["crash"] = {
        "kind": "native",
        "headline": "corrupted double-linked list",
        "key_lines": [
            "corrupted double-linked list",
            "Fatal Python error: Aborted",
            "at /home/u/train.py:60 in <module>",
        ],
    }
    data["instability"] = {
        "sentence": "the script is unstable on its own: it crashed in 4 of 12 runs, the script "
        "as written among them; its message: corrupted double-linked list <&>",
        "trials": [0, failed["number"]],
    }
    return data


def test_the_report_model_reads_the_crash_and_the_instability() -> None:
    data = _with_crash()
    m = _model(data)
    failed = next(t for t in m.trials if t.crash)
    assert failed.crash[0] == "corrupted double-linked list"
    assert failed.stderr_tail is not None and failed.stderr_tail.endswith("Aborted")
    assert m.instability is not None and m.instability.trials[0] == 0
    assert all(not t.crash and t.stderr_tail is None for t in m.trials if t is not failed)
    # Older JSON (no crash, no instability) still reads.
    plain = _model(json.loads(FIXTURE.read_text()))
    assert plain.instability is None and all(not t.crash for t in plain.trials)


def test_the_html_report_shows_the_crash_lines_escaped() -> None:
    page = render_report_json(_with_crash(), generated_at=WHEN, source="tuning JSON")
    assert '<section id="instability">' in page
    assert "The script is unstable on its own: it crashed in 4 of 12 runs" in page
    assert "corrupted double-linked list &lt;&amp;&gt;" in page
    assert '<pre class="crash">' in page
    assert "Fatal Python error: Aborted\nat /home/u/train.py:60 in &lt;module&gt;</pre>" in page
    assert "noise &lt;b&gt;" in page and "<b>\ncorrupted" not in page
    assert "in <module>" not in page.split('id="tftune-data"')[0]
    assert page.index('id="instability"') < page.index('id="comparison"')


def test_the_report_keeps_only_a_few_stderr_tails() -> None:
    from tftune.reports.tuning_model import MAX_STDERR_TAILS

    data = json.loads(FIXTURE.read_text())
    row = dict(data["trials_detail"][0], state="FAIL", stderr_tail="x" * 4000)
    data["trials_detail"] = [dict(row, number=i) for i in range(MAX_STDERR_TAILS + 10)]
    m = _model(data)
    assert sum(1 for t in m.trials if t.stderr_tail) == MAX_STDERR_TAILS
    assert len(m.data_json) < len(json.dumps(data)) - 9 * 4000


def counts_its_steps(config: Config) -> FigureLike:
    """A script that counts its steps from its own --batch-size (32): with a larger
    dataset batch, its `next()` runs past the data and it dies with StopIteration."""
    if _batch(config) > 32:
        return Failure("raised StopIteration")
    return latency_bound(config)


def test_a_batch_the_script_runs_out_of_data_with_leaves_out_larger_ones(
    tmp_path: Path,
) -> None:
    """One run out of data at a batch is enough: that batch and every larger one are
    skipped from then on (a larger batch makes fewer batches still), the budget is spent
    on configs that run, and the run says why and what to do instead."""
    runner = FakeRunner(counts_its_steps)
    out = run_study(space(), runner, settings(tmp_path, n_trials=16))
    larger = [c for c in runner.configs if _batch(c) > 32]
    assert 1 <= len(larger) <= 2  # the floor can fall once: 128 first, then 64
    skipped = [r for r in out.records if (r.reason or "").startswith("skipped:")]
    assert skipped and all("ran out of data" in (r.reason or "") for r in skipped)
    assert len(out.records) - len(skipped) == 16
    said = [n for n in out.notes if "ran out of data" in n]
    assert said and "-- --batch-size" in said[0] and "fix the batch with --batch-size" in said[0]
    assert _batch(out.best_config) <= 32


def _batch(config: Config) -> int:
    site = config.sites.get(SITES[1].site)
    return (site.batch_size if site is not None else None) or 32


def test_a_batch_that_ran_through_is_never_left_out() -> None:
    """A StopIteration at batch 64 with a run through at 128 is not the batch's doing."""
    import optuna

    from tftune.tuner.study.batch_limits import ran_out_batches
    from tftune.tuner.study.records import FAILED_ATTR

    knob = f"{SITES[1].site}/batch_size"
    dist = {knob: optuna.distributions.CategoricalDistribution([16, 32, 64, 128])}

    def trial(number: int, batch: int, failed: bool) -> optuna.trial.FrozenTrial:
        attrs = {FAILED_ATTR: True, "reason": "raised StopIteration"} if failed else {}
        state = optuna.trial.TrialState.PRUNED if failed else optuna.trial.TrialState.COMPLETE
        return optuna.trial.create_trial(
            state=state,
            value=None if failed else 1.0,
            params={knob: batch},
            distributions=dist,
            user_attrs=attrs,
        )

    ran_out = [trial(0, 32, False), trial(1, 128, True), trial(2, 64, True)]
    (left,) = ran_out_batches(ran_out).values()
    assert left.floor == 64 and left.covers(128) and not left.covers(32)
    assert ran_out_batches([*ran_out, trial(3, 128, False)]) == {}
