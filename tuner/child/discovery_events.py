"""What a discovery run of the script writes to its file, as typed events.

Discovery's child (`tuner.child.bootstrap`, mode ``discover``) writes the clock file's
events it shares (`probes.live.clock_events`: the script started, a stream found, a stream
found training) and its own, in the same line format through the same codec
(`encode_event`, `decode_event` with `DISCOVERY_EVENTS`): a call site of a tf.data
transformation (`SiteFound`), a dataset iterated (`PipelineIterated`), the elements each
stream delivered (`ElementCounts`), Keras imported (`KerasImported`), and Keras'
``fit``, ``compile`` and the eager step function as the script made them. The parent
(`tuner.trial.discovery`) matches on the types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tftune.core.document_reading import Reader
from tftune.probes.live.clock_events import ScriptStarted, StreamFound, TrainingFound
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.child.state import IterationInfo, SiteCall
from tftune.tuner.fixes.training_calls import CompileCall, FitCall, StepFunction
from tftune.tuner.searchspace.config import config_from_json


@dataclass(frozen=True, slots=True)
class SiteFound:
    """The script called a tf.data transformation (once per call)."""

    kind: ClassVar[Literal["site"]] = "site"
    call: SiteCall

    def payload(self) -> dict[str, Any]:
        c = self.call
        return {
            "site": c.site,
            "op": c.op,
            "function": c.function,
            "as_written": c.as_written.to_json(),
        }

    @classmethod
    def from_payload(cls, r: Reader) -> SiteFound:
        site, written = r.required_string("site"), r.required_obj("as_written").mapping()
        config = config_from_json({"sites": {site: dict(written)}}, "the discovery file")
        call = SiteCall(site, r.required_string("op"), config.sites[site], r.string("function"))
        return cls(call)


@dataclass(frozen=True, slots=True)
class PipelineIterated:
    """A loop iterates a dataset: the dataset as the script built it."""

    kind: ClassVar[Literal["iterate"]] = "iterate"
    info: IterationInfo

    def payload(self) -> dict[str, Any]:
        i = self.info
        return {
            "site": i.site,
            "final_prefetch": i.final_prefetch,
            "batched": i.batched,
            "threadpool_size": i.threadpool_size,
            "deterministic": i.deterministic,
            "stream": i.stream,
            "lineage": list(i.lineage),
            "chain": [s.to_json() for s in i.chain],
            "loop": i.loop,
        }

    @classmethod
    def from_payload(cls, r: Reader) -> PipelineIterated:
        stages = [PipelineStage.from_json(s) for s in r.items("chain")]
        if any(s is None for s in stages):
            raise r.error("chain", "must be a list of pipeline stages")
        info = IterationInfo(
            r.string("site"),
            bool(r.boolean("final_prefetch")),
            bool(r.boolean("batched")),
            r.integer("threadpool_size"),
            r.boolean("deterministic"),
            r.integer("stream"),
            r.strings("lineage"),
            tuple(s for s in stages if s is not None),
            r.string("loop"),
        )
        return cls(info)


@dataclass(frozen=True, slots=True)
class ElementCounts:
    """The elements each stream delivered so far (for a discovery that finds no training)."""

    kind: ClassVar[Literal["elements"]] = "elements"
    counts: tuple[tuple[int, int], ...]  # (stream, elements), by stream

    def payload(self) -> dict[str, Any]:
        return {"counts": {str(stream): n for stream, n in self.counts}}

    @classmethod
    def from_payload(cls, r: Reader) -> ElementCounts:
        raw = r.required_obj("counts")
        try:
            return cls(tuple((int(k), raw.required_integer(k)) for k in raw.fields()))
        except ValueError:
            raise r.error("counts", "must map stream numbers to counts") from None


@dataclass(frozen=True, slots=True)
class KerasImported:
    """The script imported Keras (this module of it)."""

    kind: ClassVar[Literal["keras"]] = "keras"
    module: str

    def payload(self) -> dict[str, Any]:
        return {"module": self.module}

    @classmethod
    def from_payload(cls, r: Reader) -> KerasImported:
        return cls(r.required_string("module"))


@dataclass(frozen=True, slots=True)
class FitFound:
    """A Keras ``fit`` call, as the script made it."""

    kind: ClassVar[Literal["fit"]] = "fit"
    call: FitCall

    def payload(self) -> dict[str, Any]:
        return self.call.to_json()

    @classmethod
    def from_payload(cls, r: Reader) -> FitFound:
        return cls(FitCall.from_json(r.mapping()))


@dataclass(frozen=True, slots=True)
class CompileFound:
    """A Keras ``compile`` call, as the script made it."""

    kind: ClassVar[Literal["compile"]] = "compile"
    call: CompileCall

    def payload(self) -> dict[str, Any]:
        return self.call.to_json()

    @classmethod
    def from_payload(cls, r: Reader) -> CompileFound:
        return cls(CompileCall.from_json(r.mapping()))


@dataclass(frozen=True, slots=True)
class StepFunctionFound:
    """The script's function that applied the first update eagerly."""

    kind: ClassVar[Literal["step_function"]] = "step_function"
    step: StepFunction

    def payload(self) -> dict[str, Any]:
        return self.step.to_json()

    @classmethod
    def from_payload(cls, r: Reader) -> StepFunctionFound:
        return cls(StepFunction.from_json(r.mapping()))


DiscoveryEvent = (
    ScriptStarted
    | StreamFound
    | TrainingFound
    | SiteFound
    | PipelineIterated
    | ElementCounts
    | KerasImported
    | FitFound
    | CompileFound
    | StepFunctionFound
)
DISCOVERY_TYPES: tuple[type[DiscoveryEvent], ...] = (
    ScriptStarted,
    StreamFound,
    TrainingFound,
    SiteFound,
    PipelineIterated,
    ElementCounts,
    KerasImported,
    FitFound,
    CompileFound,
    StepFunctionFound,
)
DISCOVERY_EVENTS: Mapping[str, Callable[[Reader], DiscoveryEvent]] = {
    t.kind: t.from_payload for t in DISCOVERY_TYPES
}
