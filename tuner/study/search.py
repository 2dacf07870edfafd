"""The search loop: `run_study`, as named phases.

The study runs the user's script under sampled configs through a `Runner` (the measured
trial runner; tests inject a fake one). Its phases run in a fixed order:

1. open (or resume) the study, and recover a dead worker's trials (`storage`);
2. as written (role ``as_written``): the reference every winner must beat;
3. baselines: the analysis-guided guess, AUTOTUNE everywhere, the #cores heuristic and
   the pipeline screen's seeds, enqueued within the budget (`baselines`); a reference
   baseline the guess leads far is measured over one window (`objective.cut_short`);
4. search: TPE (multivariate, seeded) until the budget or `stopping.auto_stop`;
   clearly worse trials are pruned from the runner's per-repeat reports (`objective`);
   where a new best points past itself (a larger batch, a full pool), a ladder's rung next;
5. final round: the winner, re-measured beside the baselines (`winner`);
6. outcome: everything frozen into a `StudyOutcome`.

``--trials N`` is the number of finished trials the *study* should hold, so a resumed or
shared study (several workers on one storage) stops at N in total and never reruns a
finished trial. A failed trial is stored as PRUNED and flagged (`records.FAILED_ATTR`),
so that TPE learns from it; a knob value that keeps failing is skipped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tftune.core.errors import ScriptError
from tftune.core.vocabulary import Phase, TrialState
from tftune.probes.advice.findings import NOT_THE_LIMIT
from tftune.tuner.study.baselines import baseline_params, baseline_roles, guided_params
from tftune.tuner.study.batch_limits import ran_out_batches
from tftune.tuner.study.best import store_decision
from tftune.tuner.study.contract import Role, Runner, StudyOutcome, StudySettings, TrialRecord
from tftune.tuner.study.ladder import next_rungs
from tftune.tuner.study.learning_check import check_learning
from tftune.tuner.study.objective import measure_trial, put_knob_words, skip_if_dead
from tftune.tuner.study.opening import open_study
from tftune.tuner.study.records import (
    SEED_ATTR,
    as_written_of,
    baselines_of,
    final_runs,
    importances,
    record_of,
    trial_runs,
)
from tftune.tuner.study.stopping import auto_stop
from tftune.tuner.study.storage import (
    QUEUED_BY_ATTR,
    booked,
    enqueue_internal,
    fail_stale_trials,
    finished,
    queued,
    queued_by_another,
    queuer,
    retry_interrupted,
    study_lock,
    used,
    wait_for_others,
)
from tftune.tuner.study.winner import FinalVerdict, choose_winner, pareto_front, run_final_round
from tftune.tuner.trial.crashes import find_instability

if TYPE_CHECKING:
    import optuna

    from tftune.tuner.searchspace.space import KnobValue, SearchSpace

# Another worker measuring the as-written trial is waited for this long, polling; after
# that (a killed worker's trial stays RUNNING in a journal file) it is measured again.
AS_WRITTEN_WAIT_S = 600.0
AS_WRITTEN_POLL_S = 2.0
# A failing as-written trial is retried this often before the script is declared broken
# (the first may fail for a transient reason, e.g. an OOM caused by another job).
AS_WRITTEN_ATTEMPTS = 2

TrialCallback = Callable[[TrialRecord, TrialRecord | None], None]


def run_study(
    space: SearchSpace,
    runner: Runner,
    settings: StudySettings,
    *,
    on_trial: TrialCallback | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    on_phase: Callable[[Phase], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StudyOutcome:
    """Run (or resume) the study and choose the winner. See the module docstring.
    ``on_phase`` is told when the final round begins."""
    import optuna

    # Optuna logs every failed trial with a traceback; our status line has the reason.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    t0 = clock()
    study, storage_name = open_study(space, settings)
    s = Search(space, runner, settings, study, on_trial, on_note, clock, sleep, t0)
    s.recover()  # phase 1
    if on_start is not None:
        on_start(used(study), settings.n_trials)
    s.ensure_as_written()  # phase 2
    s.enqueue_baselines(s.as_written_or_raise())  # phase 3
    s.feed(study, None)  # the first seed, where no baseline waits
    s.search()  # phase 4
    recs = s.records()
    aw = as_written_of(recs)
    assert aw is not None  # it completed in phase 2, and a finished trial stays so
    best = choose_winner(recs, aw, settings.objective)
    verdict = FinalVerdict(best, None, (), ())
    if settings.confirm and best.role is not Role.AS_WRITTEN:  # phase 5
        if on_phase is not None:
            on_phase(Phase.FINAL_ROUND)
        verdict = run_final_round(recs, aw, best, runner, space, settings, on_note)
        verdict = check_learning(verdict, recs, aw, runner, space, settings, on_note)
        for note in verdict.notes:
            s.tell(note)
    if settings.confirm:  # the winner, for `tftune status` (`best.stored_decision`)
        store_decision(study, verdict.best, verdict.confirm, verdict.final)
    return s.outcome(storage_name, recs, aw, verdict)  # phase 6


class Search:
    """One worker's run of one study: what its phases share (the study, the runner, the
    clock, the notes so far). Live and single-threaded; `StudyOutcome` is its frozen
    result."""

    def __init__(
        self,
        space: SearchSpace,
        runner: Runner,
        settings: StudySettings,
        study: optuna.Study,
        on_trial: TrialCallback | None,
        on_note: Callable[[str], None] | None,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        t0: float,
    ) -> None:
        self.space, self.runner, self.settings, self.study = space, runner, settings, study
        self.on_trial, self.on_note = on_trial, on_note
        self.clock, self.sleep, self.t0 = clock, sleep, t0
        self.timeout_s = settings.timeout_s or 0.0
        self.deadline = None if settings.timeout_s is None else t0 + settings.timeout_s
        self.ran = 0
        self.pending: list[tuple[int, dict[str, KnobValue]]] = []  # seeds not yet enqueued
        self.notes: list[str] = []
        self.said_ran_out: set[tuple[str, int]] = set()  # (`ran_out`) said once each
        self.stop_reason, self.searching = "", False  # searching: phase 4 has begun

    def tell(self, note: str) -> None:
        """A note for the outcome, shown as it is made (once)."""
        self.notes.append(note)
        if self.on_note is not None:
            self.on_note(note)

    def records(self) -> list[TrialRecord]:
        return [record_of(t, self.space) for t in finished(self.study)]

    def past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    # --- phase 1: recover ---------------------------------------------------------------

    def recover(self) -> None:
        dead = fail_stale_trials(self.study)
        if dead:
            self.tell(
                f"trial(s) {', '.join(map(str, dead))} of a worker that died were marked failed"
            )
        again = retry_interrupted(self.study)
        if again:
            self.tell(f"interrupted trial(s) {', '.join(map(str, again))} will run again")

    # --- phase 2: as written ------------------------------------------------------------

    def _as_written_trials(self) -> list[optuna.trial.FrozenTrial]:
        return [
            t
            for t in self.study.get_trials(deepcopy=False)
            if t.user_attrs.get("role") == Role.AS_WRITTEN.value
        ]

    def ensure_as_written(self) -> None:
        """Measure the script as written unless the study has it. Another worker may be
        measuring it right now, or have just queued it: wait for that (bounded, since a
        killed worker leaves its trial RUNNING in a journal file forever), and re-run it
        if it failed."""
        import optuna

        ts = optuna.trial.TrialState
        waited, runs = 0.0, 0
        while runs < AS_WRITTEN_ATTEMPTS:
            mine = self._as_written_trials()
            states = {t.state for t in mine}
            seen = [(t.number, t.state) for t in mine]
            if ts.COMPLETE in states or self.past_deadline():
                return
            now = time.time()  # wall time, as the worker records (`queued_by_another`)
            free = [t for t in mine if t.state is ts.WAITING and not queued_by_another(t, now)]
            if not free:  # none queued, or queued by a live worker that takes it next
                if states & {ts.RUNNING, ts.WAITING} and waited < AS_WRITTEN_WAIT_S:
                    self.sleep(AS_WRITTEN_POLL_S)
                    waited += AS_WRITTEN_POLL_S
                    if fail_stale_trials(self.study):  # its worker died: measure it here
                        retry_interrupted(self.study)
                    continue
                if ts.WAITING not in states and not self._enqueue_as_written(seen):
                    continue
            self.run_some(1)
            runs += 1

    def _enqueue_as_written(self, seen: list[tuple[int, Any]]) -> bool:
        """Enqueue the script as written unless another worker enqueued or ran it since
        `seen`; whether this worker did."""
        with self.enqueue_lock():
            latest = [(t.number, t.state) for t in self._as_written_trials()]
            if latest == seen:
                attrs = {"role": Role.AS_WRITTEN.value}
                params, by = self.space.as_written_params(), {QUEUED_BY_ATTR: queuer()}
                enqueue_internal(self.study, params, attrs, by)
        return latest == seen

    def as_written_or_raise(self) -> TrialRecord:
        recs = self.records()
        aw = as_written_of(recs)
        if aw is not None:
            return aw
        failed = [r for r in recs if r.role is Role.AS_WRITTEN]
        why = failed[-1].reason if failed else "it was not measured (timeout?)"
        crash = failed[-1].crash if failed else None
        if crash is not None and crash.headline not in (why or ""):
            why = f"{why} ({crash.headline})"
        raise ScriptError(f"the script as written could not be measured: {why}")

    # --- phase 3: baselines and the guided guess ----------------------------------------

    def enqueue_lock(self) -> contextlib.AbstractContextManager[None]:
        """Check-then-enqueue must not interleave between workers, or two of them enqueue
        the same baseline and it runs twice: a lock file beside a journal (or SQLite)
        file, an advisory lock on PostgreSQL."""
        return study_lock(self.settings.storage, self.settings.study_name)

    def _room(self, trials: Sequence[optuna.trial.FrozenTrial]) -> int:
        """Trials the budget still has room for, enqueued ones counted: a trial enqueued
        past it would wait in the study forever (other workers may have used it up)."""
        waiting = sum(1 for t in trials if t.state.name == "WAITING")
        return self.settings.n_trials - booked(trials) - waiting

    def _enqueue(self, key: str, value: object, params: Mapping[str, KnobValue]) -> None:
        """Enqueue `params` once per study: not where a trial has user attribute `key` =
        `value`, nor (a seed, a rung) where a trial with these params waits to run; and
        only within the budget."""
        trials = self.study.get_trials(deepcopy=False)
        again = key != "role" and queued(trials, params)  # a baseline runs by its role
        taken = again or any(t.user_attrs.get(key) == value for t in trials)
        if not taken and self._room(trials) > 0:
            attrs = {key: value} if key == "role" else {"role": Role.SEARCH.value, key: value}
            self.study.enqueue_trial(dict(params), user_attrs=attrs)

    def enqueue_baselines(self, aw: TrialRecord) -> None:
        cores = self.space.cores
        hint, seeds = self.settings.hint, list(self.settings.seeds)
        guided, guided_why = guided_params(self.space, aw, cores, hint, seeds)
        if seeds and guided == dict(seeds[0]):  # the screen's best is the guided trial
            seeds = [*seeds[1:], guided_params(self.space, aw, cores, hint)[0]]
        baselines = {
            role: baseline_params(self.space, role, cores)
            for role in baseline_roles(screened=self.settings.screened)
        }
        before = [*baselines.values(), dict(aw.params)]
        before += [guided] if self.settings.guided else []
        with self.enqueue_lock():  # the guided guess first: a reference baseline it leads
            if self.settings.guided:  # far is then measured over one window (`cut_short`)
                self._enqueue("role", Role.GUIDED.value, guided)
            for role, params in baselines.items():
                self._enqueue("role", role.value, params)
        # The seeds are fed one at a time (`feed`), so that a batch ladder's rung runs
        # as soon as it is found; one that repeats a config before it is left out.
        for i, seed in enumerate(seeds):
            if dict(seed) not in before:
                self.pending.append((i, dict(seed)))
                before.append(dict(seed))
        if self.settings.guided:
            self.tell(f"guided guess: {guided_why}")
        if hint is not None and hint.next_moves:  # the analysis gives them when not input-bound
            # Said before any trial is spent on pipeline knobs, as `tftune analyze` says it.
            moves = "; ".join(f"{i}) {m}" for i, m in enumerate(hint.next_moves, 1))
            self.tell(f"{NOT_THE_LIMIT.strip()} Next moves for the step: {moves}")

    # --- phase 4: search ----------------------------------------------------------------

    def search(self) -> None:
        """TPE until the study holds --trials; then wait for other workers' trials."""
        n = self.settings.n_trials
        self.searching = True  # the baselines are queued (`_stop_when_done`)
        self._stop_when_done(self.study, None)  # a resumed study may be done already
        while not self.stop_reason:  # skipped trials (`dead_values`) leave budget
            started = len(self.study.get_trials(deepcopy=False))
            self.run_some(n - booked(self.study.get_trials(deepcopy=False)))
            if len(self.study.get_trials(deepcopy=False)) == started:
                break
        if not self.stop_reason:
            self.stop_reason = self._budget_words()
        # Other workers' trials still running are part of the result every worker reports.
        wait_for_others(
            lambda: self.study.get_trials(deepcopy=False),
            clock=self.clock,
            sleep=self.sleep,
            deadline=self.deadline,
            poll_s=AS_WRITTEN_POLL_S,
        )

    def run_some(self, n: int) -> None:
        if n <= 0 or self.past_deadline():
            return
        self.study.optimize(
            self.objective,
            n_trials=n,
            callbacks=[
                self._report,
                self._say_ran_out,
                self._stop_at_deadline,
                self._stop_at_budget,
                self._booked,
                self._stop_when_done,
                self._climb,  # what runs next: enqueued only while the search goes on
                self.feed,
            ],
        )

    def best_so_far(self) -> TrialRecord | None:
        recs = self.records()
        aw = as_written_of(recs)
        if aw is None:
            return None
        return choose_winner(recs, aw, self.settings.objective)

    def _report(self, _study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
        if self.on_trial is not None:
            self.on_trial(record_of(t, self.space), self.best_so_far())

    def _say_ran_out(self, _study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Batches the script ran out of data with are left out: why, said once (`ran_out`).
        for left in ran_out_batches(self.study.get_trials(deepcopy=False)).values():
            if (left.knob, left.floor) not in self.said_ran_out:
                self.said_ran_out.add((left.knob, left.floor))
                self.tell(left.note())

    def _climb(self, _study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # The latest best points past itself: the ladders' rungs run next (`ladder`).
        if self.stop_reason:
            return
        for attr, start, params in next_rungs(self.records(), self.space, self.settings.objective):
            with self.enqueue_lock():
                self._enqueue(attr, start, params)

    def feed(self, _study: optuna.Study, _t: optuna.trial.FrozenTrial | None) -> None:
        # The next of the screen's seeds once no trial waits (`enqueue_baselines`).
        trials = self.study.get_trials(deepcopy=False)
        if self.stop_reason or any(t.state.name == "WAITING" for t in trials):
            return
        while self.pending:
            index, seed = self.pending.pop(0)
            with self.enqueue_lock():
                trials = self.study.get_trials(deepcopy=False)
                if any(t.user_attrs.get(SEED_ATTR) == index for t in trials):
                    continue  # another worker's
                self._enqueue(SEED_ATTR, index, seed)
                return

    def _booked(self, study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Other workers' running trials will finish too: one more would pass --trials.
        if booked(study.get_trials(deepcopy=False)) >= self.settings.n_trials:
            study.stop()

    def _stop_at_deadline(self, study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Checked after each trial (a running trial is never cut short), on the injected
        # clock so that tests can drive it.
        if self.past_deadline():
            self.stop_reason = self.stop_reason or f"stopped at --timeout {self.timeout_s:g} s"
            study.stop()

    def _stop_when_done(self, study: optuna.Study, _t: optuna.trial.FrozenTrial | None) -> None:
        # --trials auto (`stopping.auto_stop`); the space counts as measured only once the
        # baselines and the screen's seeds queued have run.
        patience = self.settings.patience
        if patience is None or self.stop_reason:
            return
        waiting = any(t.state.name == "WAITING" for t in study.get_trials(deepcopy=False))
        queued, size = waiting or bool(self.pending) or not self.searching, self.space.size()
        self.stop_reason = auto_stop(
            self.records(), self.settings.objective, patience, size, queued
        )
        if self.stop_reason and _t is not None:  # Optuna's stop: only inside optimize
            study.stop()

    def _budget_words(self) -> str:
        n = self.settings.n_trials
        if self.settings.patience is None:
            return f"ran the {n} trials asked for (--trials {n})"
        return f"reached the most trials --trials auto runs ({n}) while still gaining"

    def _stop_at_budget(self, study: optuna.Study, _t: optuna.trial.FrozenTrial) -> None:
        # Like Optuna's MaxTrialsCallback over finished trials, but an interrupted trial
        # uses no budget. Shared workers stop at N in total.
        if used(study) >= self.settings.n_trials:
            study.stop()

    # --- one trial: Optuna's objective (`objective`) ------------------------------------

    def objective(self, trial: optuna.Trial) -> float | tuple[float, float]:
        role = Role(trial.user_attrs.get("role", Role.SEARCH.value))
        params: dict[str, KnobValue] = {
            k.name: trial.suggest_categorical(k.name, k.choices)  # type: ignore[misc]
            for k in self.space.knobs
        }
        put_knob_words(trial, params)
        if role is Role.SEARCH:
            skip_if_dead(trial, self.study.get_trials(deepcopy=False), params, self.settings)
        self.ran += 1
        return measure_trial(
            trial, role, params, self.records(), self.space, self.runner, self.settings, self.study
        )

    # --- phase 6: outcome ---------------------------------------------------------------

    def outcome(
        self,
        storage_name: str,
        recs: list[TrialRecord],
        aw: TrialRecord,
        verdict: FinalVerdict,
    ) -> StudyOutcome:
        settings, done = self.settings, finished(self.study)
        best = verdict.best
        best_config = self.space.config(best.params, apply_fixed=best.role is not Role.AS_WRITTEN)
        if verdict.scale is not None:
            best_config = replace(
                best_config,
                learning_rate_scale=verdict.scale.factor,
                learning_rate_warmup=verdict.scale.warmup_steps or None,
            )
        imp, withheld = importances(self.study)
        kind = next(
            (
                str(t.user_attrs["utilization_kind"])
                for t in done
                if t.user_attrs.get("utilization_kind")
            ),
            "duty_cycle",
        )
        return StudyOutcome(
            study_name=settings.study_name,
            storage=storage_name,
            objective=settings.objective,
            utilization_kind=kind,
            records=tuple(recs),
            baselines={r.role: r for r in baselines_of(recs)},
            best=best,
            best_config=best_config,
            confirm=verdict.confirm,
            final=verdict.final,
            instability=find_instability([*trial_runs(done), *final_runs(verdict.runs, aw)]),
            pareto=pareto_front([r for r in recs if r.state is TrialState.COMPLETE and r.feasible]),
            importances=imp,
            importances_withheld=withheld,
            wall_s=self.clock() - self.t0,
            ran_this_session=self.ran,
            notes=tuple(self.notes),
            stop_reason=self.stop_reason,
            learning=verdict.learning,
        )
