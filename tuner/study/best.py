"""The study's best result, by one rule for `tftune optimize` and `tftune status`.

The winner is the trial the study chose: the final round's (`winner.run_final_round`,
then `learning_check`), or, before any round, the search's best (`winner.choose_winner`).
Its figure is its final-round run where that completed, else its trial's (the search's
figure is the best of many noisy trials, so it is biased upwards), and its speed-up is
over the script as written's figure from the same round (`best_result`). The tuning
document's speed-up, and the comparison table drawn from its figures, come from it
(`tuner.output.assemble`).

`tftune status` has neither the space nor the runs, only the storage: so the worker that
chose a winner stores what it decided in the study (`store_decision`), and status reads
it back (`stored_decision`) into the same rule. Until a worker has decided, or once
trials finished after the decision, status gives the search's best so far, undecided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tftune.core.vocabulary import TrialState
from tftune.tuner.study.contract import Role, StudyOutcome, TrialRecord
from tftune.tuner.study.storage import finished

if TYPE_CHECKING:
    import optuna

# A study system attribute: the last decision of a worker's final round (`Decision`).
DECISION_ATTR = "tftune_decision"


@dataclass(frozen=True, slots=True)
class BestResult:
    """The study's winner with its figure and its speed-up over the script as written."""

    trial: TrialRecord  # the winner's trial
    figure: TrialRecord  # its figure: its final-round run where one completed, else the trial
    as_written: TrialRecord | None  # the script as written's figure from the same round
    decided: bool = True  # a worker chose it; False: the search's best so far

    @property
    def speedup(self) -> float | None:
        """examples/s over the script as written's, rounded as the document writes it."""
        base = self.as_written.examples_per_s if self.as_written is not None else None
        if not self.figure.examples_per_s or not base:
            return None
        return round(self.figure.examples_per_s / base, 3)


def remeasured(r: TrialRecord, final: Sequence[TrialRecord]) -> TrialRecord:
    """`r`'s figure from the final round (side by side with the winner's) where it
    completed there, else `r` itself."""
    again = next((f for f in final if f.number == r.number), None)
    return again if again is not None and again.state is TrialState.COMPLETE else r


def best_result(
    winner: TrialRecord,
    as_written: TrialRecord | None,
    confirm: TrialRecord | None = None,
    final: Sequence[TrialRecord] = (),
    *,
    decided: bool = True,
) -> BestResult:
    """The one rule (module doc): `winner`'s figure is `confirm` (its final-round figure,
    where the round gave one), else its run in the round `final`, else its trial's; the
    script as written's, its run in that round, else its trial's."""
    figure = confirm if confirm is not None and confirm.state is TrialState.COMPLETE else None
    return BestResult(
        trial=winner,
        figure=figure or remeasured(winner, final),
        as_written=remeasured(as_written, final) if as_written is not None else None,
        decided=decided,
    )


def outcome_best(outcome: StudyOutcome) -> BestResult:
    """The best result of what `tftune optimize` measured."""
    aw = outcome.baselines.get(Role.AS_WRITTEN)
    return best_result(outcome.best, aw, outcome.confirm, outcome.final)


# --- the decision, stored in the study ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """What a worker decided: the winner, and the final round's figures."""

    winner: int  # the winner's trial number
    confirm: TrialRecord | None  # the winner's final-round figure
    final: tuple[TrialRecord, ...]  # the final round as reported (repeat runs pooled)
    finished: int  # the study's finished trials when it was decided

    def to_json(self) -> dict[str, Any]:
        return {
            "winner": self.winner,
            "confirm": _figures(self.confirm) if self.confirm is not None else None,
            "final": [_figures(f) for f in self.final],
            "finished": self.finished,
        }

    @classmethod
    def from_json(cls, data: Any, records: Sequence[TrialRecord]) -> Decision | None:
        """The stored decision over the study's `records`; None where it is not one, or
        names a trial the study does not hold."""
        by_number = {r.number: r for r in records}
        try:
            confirm = data["confirm"]
            decision = cls(
                winner=int(data["winner"]),
                confirm=_record(confirm, by_number) if confirm is not None else None,
                final=tuple(_record(f, by_number) for f in data["final"]),
                finished=int(data["finished"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return decision if decision.winner in by_number else None


def _figures(r: TrialRecord) -> dict[str, Any]:
    return {
        "number": r.number,
        "state": r.state.value,
        "examples_per_s": r.examples_per_s,
        "utilization": r.utilization,
        "spread": r.spread,
    }


def _record(data: Mapping[str, Any], by_number: Mapping[int, TrialRecord]) -> TrialRecord:
    """A final-round figure as a record of the trial it re-measured (KeyError: none)."""
    return replace(
        by_number[int(data["number"])],
        role=Role.CONFIRM,
        state=TrialState(data["state"]),
        examples_per_s=data["examples_per_s"],
        utilization=data["utilization"],
        spread=data["spread"],
    )


def store_decision(
    study: optuna.Study,
    winner: TrialRecord,
    confirm: TrialRecord | None,
    final: Sequence[TrialRecord],
) -> None:
    """Store what this worker decided in the study, for `tftune status`."""
    decision = Decision(winner.number, confirm, tuple(final), len(finished(study)))
    study._storage.set_study_system_attr(study._study_id, DECISION_ATTR, decision.to_json())


def stored_decision(study: optuna.Study, records: Sequence[TrialRecord]) -> Decision | None:
    """The study's stored decision over its finished `records`; None where no worker
    decided yet, or where trials finished since, so that it is not over the whole study."""
    data = study._storage.get_study_system_attrs(study._study_id).get(DECISION_ATTR)
    decision = Decision.from_json(data, records) if data is not None else None
    return decision if decision is not None and decision.finished == len(records) else None
