"""The training loop as discovery saw it, in the child, for the parent: how it iterates
its dataset (`LOOP_*`), the Keras ``fit`` and ``compile`` calls as the script made them
(`FitCall`, `CompileCall`), and the script's own step function (`StepFunction`). The
rewrites read them (`rewrites.consider`, `consider_compute`), the child applies them
(``tuner/child/rewrite_apply.py``, ``compute.py``) and the winner's diff names their
lines (``tuner/output/rewrite_code.py``); they travel in discovery's events
(``tuner/child/discovery_events.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How the training loop iterates its dataset (`tuner.child.state.IterationInfo.loop`).
LOOP_FIT = "fit"  # Keras fit, no steps_per_epoch given
LOOP_FIT_STEPS = "fit_steps"  # Keras fit given steps_per_epoch
LOOP_EAGER = "eager"  # the script's own loop, eagerly (for x in ds, iter(ds))
LOOP_GRAPH = "graph"  # inside a tf.function
LOOP_OTHER = "other"  # a library's (tf.distribute, Keras evaluate, ...)


@dataclass(frozen=True, slots=True)
class FitCall:
    """A Keras ``fit`` call as the script made it (discovery sees the training one):
    where, and the datasets' lengths where tf.data knows them (None: not a dataset, or
    not known and finite), and whether it gave their steps itself."""

    place: str | None
    x_elements: int | None
    validation_elements: int | None
    steps_given: bool
    validation_steps_given: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "place": self.place,
            "x_elements": self.x_elements,
            "validation_elements": self.validation_elements,
            "steps_given": self.steps_given,
            "validation_steps_given": self.validation_steps_given,
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> FitCall:
        def count(key: str) -> int | None:
            value = raw.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        place = raw.get("place")
        return FitCall(
            place if isinstance(place, str) else None,
            count("x_elements"),
            count("validation_elements"),
            bool(raw.get("steps_given")),
            bool(raw.get("validation_steps_given")),
        )


@dataclass(frozen=True, slots=True)
class CompileCall:
    """A Keras ``compile`` call as the script made it: where, and its compute settings."""

    place: str | None
    run_eagerly: bool
    jit_compile: bool | str | None  # True, False, "auto" (Keras' default), None: not read
    steps_per_execution: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "place": self.place,
            "run_eagerly": self.run_eagerly,
            "jit_compile": self.jit_compile,
            "steps_per_execution": self.steps_per_execution,
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> CompileCall:
        jit = raw.get("jit_compile")
        spe = raw.get("steps_per_execution")
        place = raw.get("place")
        return CompileCall(
            place if isinstance(place, str) else None,
            bool(raw.get("run_eagerly")),
            jit if isinstance(jit, (bool, str)) else None,
            spe if isinstance(spe, int) and not isinstance(spe, bool) else None,
        )


@dataclass(frozen=True, slots=True)
class StepFunction:
    """The script's own function that applies its optimizer's update, as the first
    update found it: its name and its ``def`` line (None: the update is in the loop's
    own body), and whether it ran eagerly (not inside a ``tf.function``)."""

    name: str | None
    site: str | None
    eager: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "site": self.site, "eager": self.eager}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> StepFunction:
        name, site = raw.get("name"), raw.get("site")
        return StepFunction(
            name if isinstance(name, str) else None,
            site if isinstance(site, str) else None,
            bool(raw.get("eager")),
        )
