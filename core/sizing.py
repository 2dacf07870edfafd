"""When one host is not enough: the tf.data service sizing as both documents hold it
(the analysis JSON's ``service_sizing``, the tuning JSON's ``ceiling.service_sizing``).

`tftune.probes.advice.service_sizing` computes it (how many more hosts like this one the pipeline
needs, `ServiceSizing`, or why it is not sized, `NotSized`), rounds its figures as the
JSON writes them and words its sentence; `to_json` only serializes and `sizing_from_reader`
reads either back strictly (``"sized"`` tells them apart).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader


class Unsized(str, enum.Enum):
    """Why a pipeline gets no tf.data service sizing: more CPUs on other hosts would not
    make it faster."""

    PYTHON = "python"  # runs Python functions: service workers cannot run them at all
    WAITING = "waiting"  # its Python functions wait (I/O, sleeps): calls in flight, not cores
    IDLE_CORES = "idle_cores"  # at its best config it left this host's cores idle


@dataclass(frozen=True, slots=True)
class ServiceSizing:
    """How many more hosts like this one the pipeline needs to reach the model's rate.

    Rates are in `unit` per second (``examples`` from a tuning run, ``steps`` from a
    trace). `per_core_rate` is measured: what one busy core of the pipeline delivers.
    """

    unit: str
    per_core_rate: float
    busy_cores: float
    host_cores: int
    model_rate: float
    pipeline_rate: float  # as measured
    cores_needed: float  # model_rate / per_core_rate
    host_best_rate: float  # per_core_rate × host_cores: this host, every core busy
    saturated: bool  # the measured pipeline kept the host's cores busy
    more_workers: int  # 0: this host can reach the model's rate
    sentence: str  # what the reports print

    @property
    def enough(self) -> bool:
        return self.more_workers == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "sized": True,
            "unit": self.unit,
            "per_core_rate": self.per_core_rate,
            "busy_cores": self.busy_cores,
            "host_cores": self.host_cores,
            "model_rate": self.model_rate,
            "pipeline_rate": self.pipeline_rate,
            "cores_needed": self.cores_needed,
            "host_best_rate": self.host_best_rate,
            "saturated": self.saturated,
            "more_workers": self.more_workers,
            "sentence": self.sentence,
        }


@dataclass(frozen=True, slots=True)
class NotSized:
    """No tf.data service sizing for this pipeline, and why (`Unsized`): the figures it was
    measured with, and what to do instead of adding hosts (`sentence`)."""

    unit: str
    reason: Unsized
    busy_cores: float | None
    host_cores: int | None
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "sized": False,
            "unit": self.unit,
            "reason": self.reason.value,
            "busy_cores": self.busy_cores,
            "host_cores": self.host_cores,
            "more_workers": None,
            "sentence": self.sentence,
        }


Sizing = ServiceSizing | NotSized


def sizing_from_reader(r: Reader) -> Sizing:
    """Either sizing, by its ``sized`` field (which the first documents with a sizing
    lacked: they had only `ServiceSizing`)."""
    if r.boolean("sized") is not False:
        return ServiceSizing(
            unit=r.required_string("unit"),
            per_core_rate=r.required_number("per_core_rate"),
            busy_cores=r.required_number("busy_cores"),
            host_cores=r.required_integer("host_cores"),
            model_rate=r.required_number("model_rate"),
            pipeline_rate=r.required_number("pipeline_rate"),
            cores_needed=r.required_number("cores_needed"),
            host_best_rate=r.required_number("host_best_rate"),
            saturated=bool(r.boolean("saturated", required=True)),
            more_workers=r.required_integer("more_workers"),
            sentence=r.required_string("sentence"),
        )
    word = r.required_string("reason")
    if word not in {u.value for u in Unsized}:
        raise r.error("reason", f"must be one of {', '.join(u.value for u in Unsized)}")
    return NotSized(
        unit=r.required_string("unit"),
        reason=Unsized(word),
        busy_cores=r.number("busy_cores"),
        host_cores=r.integer("host_cores"),
        sentence=r.required_string("sentence"),
    )


def caption(sizing: Sizing | None) -> str | None:
    """A report's line of the sizing: its sentence when the host is not enough (more
    workers needed) or when the pipeline was not sized on purpose (what to do instead),
    else None (nothing to add)."""
    if isinstance(sizing, NotSized):
        return sizing.sentence
    if sizing is not None and sizing.more_workers > 0:
        return sizing.sentence
    return None
