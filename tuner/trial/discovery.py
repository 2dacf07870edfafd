"""Discovery: run the script until a dataset is found training, and record on the way
the tf.data call sites (with the knob values as written), the pipelines iterated and
the streams seen (a counting loop, a peek, `adapt` come before training).

`discover(script, args)` → `Discovery`. The child (mode ``discover``) writes one typed
event per call site, iterated pipeline and stream to its discovery file
(`tuner.child.discovery_events`); this module reads them once the child has left (the
launch loop: `trial.launch.ChildRun`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tftune.core.errors import ScriptError
from tftune.core.training import StreamSeen
from tftune.core.vocabulary import PREAMBLE_SAID_S
from tftune.probes.live.clock_events import (
    ClockLineError,
    ScriptStarted,
    StreamFound,
    TrainingFound,
    decode_event,
)
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.child.datasets import OP_KNOBS  # the child's patching knows each op's knobs
from tftune.tuner.child.discovery_events import (
    DISCOVERY_EVENTS,
    CompileFound,
    DiscoveryEvent,
    ElementCounts,
    FitFound,
    KerasImported,
    PipelineIterated,
    SiteFound,
    StepFunctionFound,
)
from tftune.tuner.child.state import IterationInfo, SiteCall
from tftune.tuner.fixes.training_calls import CompileCall, FitCall, StepFunction
from tftune.tuner.option_defaults import FIRST_STEP_S
from tftune.tuner.searchspace.config import Config, SiteConfig
from tftune.tuner.trial.launch import ChildRun, RunnerDeps, check_script, child_spec, workdir
from tftune.tuner.trial.script_text import fallback_s
from tftune.tuner.trial.watch import FALLBACK_S, StreamWatch
from tftune.tuner.trial.watch import describe_streams as _describe_streams

if TYPE_CHECKING:
    from tftune.tuner.trial.spare import SparePool


@dataclass(frozen=True, slots=True)
class CallSite:
    """One call site of a tf.data transformation, with the knob values as written.

    `as_written` holds the knobs this op takes; ``None`` means the script did not pass
    one (map: sequential; interleave cycle_length: TF's default) or passed a tensor.
    """

    site: str
    op: str  # map | interleave | batch | padded_batch | prefetch
    knobs: tuple[str, ...]
    as_written: SiteConfig
    function: str | None
    calls: int

    def to_json(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "op": self.op,
            "knobs": list(self.knobs),
            "as_written": self.as_written.to_json(),
            "function": self.function,
            "calls": self.calls,
        }


@dataclass(frozen=True, slots=True)
class IteratedPipeline:
    site: str | None  # the call site of the last transformation before iteration
    final_prefetch: bool
    batched: bool
    threadpool_size: int | None
    deterministic: bool | None
    stream: int | None = None
    lineage: tuple[str, ...] = ()  # the user's call sites the dataset was built through
    # The pipeline stage by stage, source first, and how the loop iterates it
    # (`tuner.fixes.rewrites`' loop words): what the rewrites are considered from.
    chain: tuple[PipelineStage, ...] = ()
    loop: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "final_prefetch": self.final_prefetch,
            "batched": self.batched,
            "threadpool_size": self.threadpool_size,
            "deterministic": self.deterministic,
        }


@dataclass(frozen=True, slots=True)
class Discovery:
    script: str
    sites: tuple[CallSite, ...]
    pipelines: tuple[IteratedPipeline, ...]
    uses_keras: bool
    returncode: int | None
    stderr_tail: str
    streams: tuple[StreamSeen, ...] = ()
    timed_out: bool = False
    waited_s: float = 0.0
    # How long the child iterated with no update before it took the busiest loop:
    # `FALLBACK_S`, `KNOWN_BUSIEST_S` when the script's text names nothing that trains,
    # None when it shows training and the child waited for the first update
    # (`script_text.fallback_s`).
    fallback_s: float | None = FALLBACK_S
    # From the script's first line to the stream found training (child clock): what
    # every run of the script pays before its first training step. None: not seen.
    preamble_s: float | None = None
    fits: tuple[FitCall, ...] = ()  # the Keras fit calls made (the training one last)
    compiles: tuple[CompileCall, ...] = ()  # the Keras compile calls made
    # The script's function that applied the first update eagerly (None: none did).
    step_function: StepFunction | None = None

    @property
    def found(self) -> bool:
        return bool(self.sites) or bool(self.pipelines)

    @property
    def training(self) -> StreamSeen | None:
        """The stream found training (the run stopped there), or None."""
        return next((s for s in self.streams if s.training), None)

    @property
    def busiest_loop(self) -> bool:
        """Nothing was updated: the busiest loop stands in for training (`child.roles`)."""
        return self.training is not None and self.training.busiest

    def no_training(self) -> str:
        """Why no training was found, in one paragraph: for the user."""
        seen = _describe_streams(self.streams)
        if self.timed_out:
            return (
                f"no training step within {self.waited_s:.0f} s: no dataset fed an optimizer "
                f"update; {seen} (--step-timeout sets how long to wait)"
            )
        code = self.returncode
        if not self.found and code in (0, None):
            return (
                "no tf.data pipeline was built before the script ended, so there is nothing "
                "to tune (tftune profile and tftune analyze still work on any TF script)"
            )
        ended = "ended" if code in (0, None) else f"exited with code {code}"
        why = f"the script {ended} before any dataset fed an optimizer update; {seen}"
        tail = "\n".join(f"  {line}" for line in self.stderr_tail.splitlines()[-12:])
        return f"{why}\nits stderr ends with:\n{tail}" if tail.strip() else why

    def training_sites(self) -> frozenset[str] | None:
        """The call sites the training dataset was built through (its lineage), or None
        where no iterated pipeline of the training stream says."""
        trains = self.training
        if trains is None:
            return None
        found = {s for p in self.pipelines if p.stream == trains.stream for s in p.lineage}
        return frozenset(found) or None

    def elsewhere_sites(self) -> frozenset[str]:
        """The call sites that only datasets feeding no training update were built
        through (a validation set, an ``adapt`` sample, a counting loop): their knobs
        cannot change the training rate. Empty where the training lineage is unknown. A
        site on no iterated lineage (one inside an interleave's function) is not one."""
        training = self.training_sites()
        if training is None:
            return frozenset()
        trains = {s.stream for s in self.streams if s.training}
        found = {s for p in self.pipelines if p.stream not in trains for s in p.lineage}
        return frozenset(found - training)

    def training_pipeline(self) -> IteratedPipeline | None:
        """The training stream's pipeline as the loop that trains iterated it last."""
        trains = self.training
        if trains is None:
            return None
        mine = [p for p in self.pipelines if p.stream == trains.stream]
        return mine[-1] if mine else None

    def site_keys(self) -> frozenset[str]:
        return frozenset(s.site for s in self.sites)

    def to_json(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "sites": [s.to_json() for s in self.sites],
            "pipelines": [p.to_json() for p in self.pipelines],
            "uses_keras": self.uses_keras,
        }


def discover(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = FIRST_STEP_S,
    deps: RunnerDeps | None = None,
) -> Discovery:
    """Run the script until a dataset is found training; record the call sites and the
    datasets iterated on the way (a counting loop, a peek, `adapt` come before training).

    The child leaves once a stream feeds optimizer updates, or, where the script's code
    does not show training and nothing updates for `FALLBACK_S` of iterating
    (`KNOWN_BUSIEST_S` when it names nothing that trains: `script_text.fallback_s`), once
    the busiest loop is chosen instead. A script that
    never builds a pipeline yields an empty `Discovery` (``found`` is False); one that
    trains on no dataset has no `training` stream, and `no_training()` says what was seen.
    """
    path = check_script(script)
    with workdir() as work:
        out_file = work / "discovery.jsonl"
        spec = child_spec("discover", path, args, Config())
        fallback = fallback_s(path)
        spec.update(discovery_file=str(out_file), fallback_s=fallback)
        ended = ChildRun(deps or RunnerDeps(), work, spec, cwd=cwd).run(deadline_s=timeout_s)
        events = []
        if out_file.exists():
            for line in out_file.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ClockLineError):  # skipped, as the clock reader does
                    events.append(decode_event(line, DISCOVERY_EVENTS))
    found = parse_discovery(
        str(path),
        events,
        ended.returncode,
        ended.stderr_tail,
        timed_out=ended.timed_out,
        waited_s=timeout_s,
    )
    return replace(found, fallback_s=fallback)


def parse_discovery(
    script: str,
    events: Sequence[DiscoveryEvent],
    returncode: int | None,
    stderr_tail: str,
    *,
    timed_out: bool = False,
    waited_s: float = 0.0,
) -> Discovery:
    """A `Discovery` from the child's discovery events, in the order written."""
    watch = StreamWatch(0.0)
    sites: dict[tuple[str, str], SiteCall] = {}  # in order of first call
    calls: dict[tuple[str, str], int] = {}
    pipelines: list[IteratedPipeline] = []
    fits: list[FitCall] = []
    compiles: list[CompileCall] = []
    step: StepFunction | None = None
    uses_keras = False
    started: int | None = None
    preamble_s: float | None = None
    for e in events:
        if isinstance(e, ScriptStarted):
            started = e.at_ns
        elif isinstance(e, StreamFound | TrainingFound):
            watch.event(e)
            if isinstance(e, TrainingFound) and started is not None and e.at_ns is not None:
                preamble_s = preamble_s or (e.at_ns - started) / 1e9
        elif isinstance(e, ElementCounts):
            watch.elements = dict(e.counts)
        elif isinstance(e, SiteFound):
            key = (e.call.site, e.call.op)
            sites.setdefault(key, e.call)
            calls[key] = calls.get(key, 0) + 1
        elif isinstance(e, PipelineIterated):
            pipelines.append(_pipeline(e.info))
        elif isinstance(e, KerasImported):
            uses_keras = True
        elif isinstance(e, FitFound):
            fits.append(e.call)
        elif isinstance(e, CompileFound):
            compiles.append(e.call)
        elif isinstance(e, StepFunctionFound):
            step = e.step
    return Discovery(
        script,
        tuple(_call_site(call, calls[key]) for key, call in sites.items()),
        tuple(pipelines),
        uses_keras,
        returncode,
        stderr_tail,
        watch.streams(),
        timed_out,
        waited_s,
        preamble_s=preamble_s,
        fits=tuple(fits),
        compiles=tuple(compiles),
        step_function=step,
    )


def _pipeline(info: IterationInfo) -> IteratedPipeline:
    return IteratedPipeline(
        site=info.site,
        final_prefetch=info.final_prefetch,
        batched=info.batched,
        threadpool_size=info.threadpool_size,
        deterministic=info.deterministic,
        stream=info.stream,
        lineage=info.lineage,
        chain=info.chain,
        loop=info.loop,
    )


def _call_site(call: SiteCall, calls: int) -> CallSite:
    return CallSite(
        site=call.site,
        op=call.op,
        knobs=tuple(OP_KNOBS[call.op]),
        as_written=call.as_written,
        function=call.function,
        calls=calls,
    )


def discover_training(
    path: Path,
    args: Sequence[str],
    step_timeout_s: float | None,
    note: Callable[[str], None],
    spares: SparePool | None = None,
) -> Discovery:
    """Discovery, run until the script trains (from a warm spare where there are some);
    `ScriptError` with what was seen (streams, the script's exit code and stderr) when it
    never does."""
    note(f"discovering the tf.data call sites of {path.name} and its training loop ...")
    timeout = step_timeout_s if step_timeout_s is not None else FIRST_STEP_S
    found = discover(path, args, timeout_s=timeout, deps=RunnerDeps(spares=spares))
    trains = found.training
    if trains is None:
        raise ScriptError(f"{path.name}: {found.no_training()}")
    others = [s for s in found.streams if s.stream != trains.stream]
    if found.busiest_loop:
        waited = found.fallback_s or FALLBACK_S
        note(
            f"no optimizer update in {waited:.0f} s of iterating"
            + (" (its code names nothing that trains)" if waited < FALLBACK_S else "")
            + f": measuring the dataset loop that delivers the most ({trains.where()}), as a "
            "pipeline benchmark"
        )
    else:
        note(f"training loop: the dataset {trains.where()}")
        said = preamble_note(found.preamble_s)
        if said is not None:
            note(said)
    if others:
        note(
            "also iterated, not measured: "
            + "; ".join(f"{s.where()} ({s.elements:,} elements)" for s in others)
        )
    return found


def preamble_note(preamble_s: float | None) -> str | None:
    """What a long preamble costs the tuning, and why tftune cannot skip it."""
    if preamble_s is None or preamble_s < PREAMBLE_SAID_S:
        return None
    return (
        f"the script runs {preamble_s:.0f} s before its first training step (imports, "
        "counting or building a vocabulary, adapt): every trial pays it, and only training "
        "steps are measured. tftune cannot skip it: it runs in the script's own process, "
        "which holds TensorFlow's threads and so cannot be forked or checkpointed safely. "
        "Saving what it computes to a file and loading it when present shortens every run "
        "of the script, tftune's too"
    )
