"""`tftune status`: where a (shared) study stands, read from its storage alone.

No TensorFlow, no script and no search space are needed: the counts, the running trials
and the best result come from the trials' states, parameters and attributes, which
every worker writes (`tuner.study.storage`, `tuner.study.objective`), and from what the
last worker to finish decided (`tuner.study.best`). The best is read by the rule `tftune
optimize` reports it by (`best.best_result`): the same winner, figure and speed-up.
Optuna is imported on use.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tftune.core.errors import UserError
from tftune.core.vocabulary import AS_WRITTEN_WORD
from tftune.tuner.searchspace.space import KnobValue, value_words


class StudyNotFound(UserError):
    """No such study (or no study at all) in the storage."""


@dataclass(frozen=True, slots=True)
class RunningTrial:
    number: int
    role: str
    params: Mapping[str, KnobValue]
    since: dt.datetime | None
    worker: str | None = None  # host:pid


@dataclass(frozen=True, slots=True)
class BestTrial:
    number: int
    role: str
    examples_per_s: float  # the final round's figure where it gave one (`best.best_result`)
    utilization: float | None
    params: Mapping[str, KnobValue]
    speedup: float | None  # against the script as written
    decided: bool = True  # a worker's final round chose it; False: the search's best so far

    @property
    def summary(self) -> str:
        return summarize_params(self.params)


@dataclass(frozen=True, slots=True)
class StudyStatus:
    study_name: str
    storage: str
    target: int | None  # --trials of the workers (None: a study not made by tftune)
    objective: str | None
    script: str | None
    counts: Mapping[str, int]  # complete, pruned, failed, running, waiting
    running: tuple[RunningTrial, ...]
    best: BestTrial | None
    as_written_examples_per_s: float | None

    @property
    def finished(self) -> int:
        return self.counts["complete"] + self.counts["pruned"] + self.counts["failed"]

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "schema": 1,
            "study": self.study_name,
            "storage": self.storage,
            "script": self.script,
            "objective": self.objective,
            "target": self.target,
            "finished": self.finished,
            "trials": dict(self.counts),
            "running": [
                {
                    "number": r.number,
                    "role": r.role,
                    "params": dict(r.params),
                    "since": r.since.isoformat() if r.since else None,
                    "worker": r.worker,
                }
                for r in self.running
            ],
            "as_written_examples_per_s": self.as_written_examples_per_s,
            "best": None
            if best is None
            else {
                "number": best.number,
                "role": best.role,
                "examples_per_s": best.examples_per_s,
                "utilization": best.utilization,
                "speedup": best.speedup,
                "decided": best.decided,
                "config": dict(best.params),
                "summary": best.summary,
            },
        }


def summarize_params(params: Mapping[str, KnobValue]) -> str:
    """``site/knob=value`` pairs in the reports' words (`value_words`), the knobs left
    as written (``None``) left out."""
    kept = (f"{n}={value_words(params[n])}" for n in sorted(params) if params[n] is not None)
    return ", ".join(kept) or AS_WRITTEN_WORD


def study_status(storage: str | None, study_name: str | None = None) -> StudyStatus:
    """Read one study's status. `study_name` may be omitted when the storage holds
    exactly one study."""
    import optuna

    from tftune.tuner.study.records import FAILED_ATTR
    from tftune.tuner.study.storage import (
        WORKER_ATTR,
        StorageError,
        describe_storage_path,
        internal_attr,
        open_storage,
    )

    journal = describe_storage_path(storage)
    if journal is not None and not journal.is_file():
        raise StorageError(f"--storage {journal}: no such journal file")
    if storage is not None and storage.startswith("sqlite:///"):
        db = storage.removeprefix("sqlite:///")
        if db and db != ":memory:" and not Path(db).is_file():
            raise StorageError(f"--storage {storage}: no such database file")
    store, shown = open_storage(storage)
    names = sorted(s.study_name for s in store.get_all_studies())
    if not names:
        raise StudyNotFound(f"{shown}: holds no study")
    if study_name is None:
        if len(names) > 1:
            raise StudyNotFound(
                f"{shown} holds {len(names)} studies; pick one with --study-name: "
                + ", ".join(names)
            )
        study_name = names[0]
    elif study_name not in names:
        raise StudyNotFound(
            f"--study-name {study_name}: not in {shown}; its studies: " + ", ".join(names)
        )
    study = optuna.load_study(study_name=study_name, storage=store)
    attrs = study.user_attrs
    ts = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)
    counts = {"complete": 0, "pruned": 0, "failed": 0, "running": 0, "waiting": 0}
    key = {
        ts.COMPLETE: "complete",
        ts.PRUNED: "pruned",
        ts.FAIL: "failed",
        ts.RUNNING: "running",
        ts.WAITING: "waiting",
    }
    for t in trials:
        counts["failed" if t.user_attrs.get(FAILED_ATTR) else key[t.state]] += 1
    running = tuple(
        RunningTrial(
            t.number,
            str(t.user_attrs.get("role", "search")),
            dict(t.params),
            t.datetime_start,
            _worker(internal_attr(t, WORKER_ATTR)),
        )
        for t in trials
        if t.state is ts.RUNNING
    )
    best = _best(study, [t for t in trials if t.state in (ts.COMPLETE, ts.PRUNED, ts.FAIL)])
    target = attrs.get("n_trials")
    return StudyStatus(
        study_name=study_name,
        storage=shown,
        target=int(target) if isinstance(target, int) else None,
        objective=attrs.get("objective"),
        script=attrs.get("target") or None,
        counts=counts,
        running=running,
        best=best[0] if best is not None else None,
        as_written_examples_per_s=best[1] if best is not None else None,
    )


def _worker(w: Any) -> str | None:
    """``host:pid`` of the worker that runs a trial (`tuner.study.storage.heartbeat` records it)."""
    if isinstance(w, dict) and w.get("host"):
        return f"{w['host']}:{w.get('pid')}"
    return None


def _best(study: Any, done: list[Any]) -> tuple[BestTrial, float | None] | None:
    """(the study's best, the script as written's examples/s it is compared with), by
    the rule `tftune optimize` reports by (`best.best_result`): the winner the last
    worker's final round decided (`best.stored_decision`), else the search's best so far
    (`winner.choose_winner`); None until the script as written has completed."""
    from tftune.tuner.study.best import best_result, stored_decision
    from tftune.tuner.study.contract import Objective
    from tftune.tuner.study.records import as_written_of, record_of
    from tftune.tuner.study.winner import choose_winner

    records = [record_of(t) for t in done]
    aw = as_written_of(records)
    if aw is None:
        return None
    decision = stored_decision(study, records)
    if decision is not None:
        winner = next(r for r in records if r.number == decision.winner)
        result = best_result(winner, aw, decision.confirm, decision.final)
    else:
        objective = study.user_attrs.get("objective")
        known = objective in {o.value for o in Objective}
        chosen = choose_winner(records, aw, Objective(objective) if known else Objective.THROUGHPUT)
        result = best_result(chosen, aw, decided=False)
    figure, base = result.figure, result.as_written
    best = BestTrial(
        number=result.trial.number,
        role=result.trial.role.value,
        examples_per_s=float(figure.examples_per_s or 0.0),
        utilization=figure.utilization,
        params=dict(result.trial.params),
        speedup=result.speedup,
        decided=result.decided,
    )
    return best, base.examples_per_s if base is not None else None


def render_status(s: StudyStatus, now: dt.datetime | None = None) -> str:
    """Plain text for the terminal; `now` is injected for tests."""
    now = now or dt.datetime.now()
    target = f" of {s.target}" if s.target is not None else ""
    lines = [
        f"study {s.study_name!r} in {s.storage}" + (f" ({s.script})" if s.script else ""),
        f"progress: {s.finished}{target} trials finished: {s.counts['complete']} complete, "
        f"{s.counts['pruned']} pruned, {s.counts['failed']} failed; "
        f"{s.counts['running']} running, {s.counts['waiting']} queued",
    ]
    for r in s.running:
        since = ""
        if r.since is not None:
            since = f" since {r.since:%H:%M:%S} ({max(0.0, (now - r.since).total_seconds()):.0f} s)"
        where = f" on {r.worker}" if r.worker else ""
        lines.append(
            f"  running: trial {r.number} ({r.role}){where}{since}: {summarize_params(r.params)}"
        )
    if s.as_written_examples_per_s is not None:
        lines.append(f"as written: {s.as_written_examples_per_s:,.1f} examples/s")
    if s.best is None:
        lines.append("best: none yet")
    else:
        b = s.best
        gain = f", {b.speedup:.2f}x as written" if b.speedup else ""
        util = f", utilization {b.utilization:.0%}" if b.utilization is not None else ""
        lines.append(
            f"best: trial {b.number} ({b.role}): {b.examples_per_s:,.1f} examples/s{gain}{util}"
            + ("" if b.decided else " (the search's so far; the final round re-measures it)")
        )
        lines.append(f"  config: {b.summary}")
    return "\n".join(lines)
