"""One run's analysis: locate → load → steps → breakdown → stages → findings → `Analysis`.

`Analysis` is frozen; `Analysis.document()` is what it says as the analysis document
(`core.analysis_document`, schema 1, see docs/json.md), built from the computation types
here, and `Analysis.to_json()` writes it. With `xprof=True`, XProf's own step time and
input share of the analyzed host's file sit beside tftune's (`probes.traces.xprof_check`, the
JSON's optional `xprof` object; absent otherwise). Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tftune.core.analysis_advice import Bottleneck, Fix, NextMove, jsonable
from tftune.core.analysis_document import AnalysisDocument
from tftune.core.analysis_steps import StepSummary
from tftune.core.analysis_trace import (
    RunMetadata,
    SkippedFile,
    StageRow,
    Timeline,
    ToolInfo,
    TraceFile,
    TraceSource,
    XProfCheck,
)
from tftune.core.sizing import Sizing
from tftune.core.training import TrainingTime
from tftune.core.units import NS_PER_MS, PS_PER_MS
from tftune.core.vocabulary import TRAINING_LOOP
from tftune.probes.advice.findings import Findings, FoundBottleneck, dedupe, find
from tftune.probes.advice.ideas import OPTIMIZE_MEASURES, STEP_IDEAS
from tftune.probes.advice.next_moves import StepFacts, moves_from, step_facts
from tftune.probes.advice.recommendations import Recommendation
from tftune.probes.advice.service_sizing import trace_sizing
from tftune.probes.live.training_record import read_clock_file
from tftune.probes.traces.breakdown import Breakdown, compute_breakdown, extract_timeline
from tftune.probes.traces.callsites import read_sites
from tftune.probes.traces.locate import locate
from tftune.probes.traces.loop_work import find_loop_work
from tftune.probes.traces.remote import fetched, is_url
from tftune.probes.traces.stages import Stage, StageTree, build_stage_tree
from tftune.probes.traces.steps import FUNCTION_CALL_RE, Steps, detect_steps
from tftune.probes.traces.trace import HostTrace, RunTrace
from tftune.probes.traces.trace_file import load_run
from tftune.probes.traces.xprof_check import compare_with_xprof


def _ms(ps: int | None) -> float | None:
    return None if ps is None else round(ps / PS_PER_MS, 3)


@dataclass(frozen=True, slots=True, eq=False)
class Analysis:
    """Everything `tftune analyze` says about one run (one host analyzed in depth)."""

    logdir: Path
    run: RunTrace
    host: HostTrace
    device: str
    steps: Steps
    breakdown: Breakdown
    stages: StageTree
    findings: Findings
    timeline: Timeline | None
    tool_version: str
    notes: tuple[str, ...] = ()
    xprof: XProfCheck | None = None  # only when asked for (`analyze --xprof`)
    facts: StepFacts | None = None  # what the trace says about the step itself
    # The step clock's figures of the whole profiled run, where `tftune profile` wrote
    # them beside the trace: an epoch-start stall that steady profiled steps never show.
    training: TrainingTime | None = None
    # Worked out once, when the analysis is made (`analyze_run`), so that `document` only
    # converts: the fixes, one per idea; the next moves for the step (`_moves`; `tftune
    # optimize` reads them from its guided profile, `step_advice`); the service sizing.
    recommendations: tuple[Recommendation, ...] = ()
    moves: tuple[NextMove, ...] = ()
    service_sizing: Sizing | None = None
    # What draws it in a notebook cell (`tftune.analyze` hands it in: probes/ may not
    # import reports/); None: the cell shows `__repr__`.
    inline: Callable[[AnalysisDocument], str] | None = field(default=None, compare=False)
    # The URL of a logdir in object storage, analyzed from a local copy (`probes.traces.remote`),
    # and each copied file's URL by its name: the JSON names them, not the copy.
    origin: str | None = None
    origin_files: tuple[tuple[str, str], ...] = ()
    # The TensorFlow version the trace was taken with, where `tftune profile` recorded it
    # beside the trace (`probes.traces.callsites`): the trace itself does not say.
    tf_version: str | None = None

    def __repr__(self) -> str:
        """One line: the run, the verdict, the top bottleneck and the step time."""
        f = self.findings
        share = self.input_share
        wait = "input wait not measured" if share is None else f"{share:.0%} waiting for input"
        bound = f.verdict.input_bound
        verdict = "no verdict" if bound is None else ("" if bound else "not ") + "input-bound"
        top = f.bottlenecks[0] if f.bottlenecks else None
        where = top.call_site or top.stage if top is not None else None
        top_words = f"; top: {top.category} ({top.share:.0%})" if top is not None else ""
        top_words += f" at {where}" if where else ""
        step = self.steps.summary().get("mean_ms")
        step_words = f"; {step:,.1f} ms/step" if isinstance(step, (int, float)) else ""
        text = f"<tftune Analysis {self.run.name}: {verdict}, {wait}"
        return (text + top_words + step_words)[:290] + ">"

    def _repr_html_(self) -> str | None:
        return self.inline(self.document()) if self.inline is not None else None

    def _where(self, p: Path) -> str:
        """`p` as the JSON names it: for a copy of a logdir in object storage, the URL
        the file was copied from."""
        return dict(self.origin_files).get(p.name, str(p)) if self.origin else str(p)

    @property
    def input_share(self) -> float | None:
        return self.breakdown.input_share

    @property
    def input_bound(self) -> bool | None:
        return self.findings.verdict.input_bound

    @property
    def bottlenecks(self) -> tuple[Any, ...]:
        return self.findings.bottlenecks

    def to_json(self) -> dict[str, Any]:
        return self.document().to_json()

    def document(self) -> AnalysisDocument:
        """The analysis JSON as its document, from what this analysis computed."""
        f = self.findings
        env = self.host.task_environment
        start, stop = env.get("profile_start_time"), env.get("profile_stop_time")
        if isinstance(start, int) and isinstance(stop, int) and stop > start:
            duration_ms: float | None = round((stop - start) / NS_PER_MS, 3)
        else:
            lo, hi = self.host.span_ps
            duration_ms = _ms(hi - lo)
        cores = self.stages.root_knobs.get("cpu_budget")
        notes = [*self.steps.notes, *self.notes, *f.notes]
        notes += [f"host {s.host} skipped: {s.reason}" for s in self.run.skipped]
        if len(self.run.hosts) > 1:
            notes.append(
                f"{len(self.run.hosts)} hosts in this run; analyzed {self.host.host} "
                "(choose another with --host)"
            )
        source = TraceSource(
            logdir=self.origin or str(self.logdir.resolve()),
            files=tuple(
                TraceFile(h.host, self._where(h.path), h.size_bytes) for h in self.run.hosts
            ),
            skipped=tuple(
                SkippedFile(s.host, self._where(s.path), s.reason) for s in self.run.skipped
            ),
        )
        devices = tuple(p.name for p in self.host.planes if p.name.startswith("/"))
        return AnalysisDocument(
            tool=ToolInfo("tftune", self.tool_version),
            run=self.run.name,
            hosts=tuple(h.host for h in self.run.hosts),
            host=self.host.host,
            device=self.device,
            source=source,
            metadata=RunMetadata(
                self.tf_version, devices, duration_ms, cores if isinstance(cores, int) else None
            ),
            step_detection=self.steps.detection,
            steps=StepSummary(**self.steps.summary()),
            verdict=f.verdict,
            breakdown=tuple(self.breakdown.fractions().items()),
            input_categories=tuple(f.category_shares.items()),
            per_step=self.breakdown.step_table(),
            bottlenecks=tuple(_bottleneck(b, i) for i, b in enumerate(f.bottlenecks, 1)),
            recommendations=tuple(_fix(r, round(r.gain, 4)) for r in self.recommendations),
            stages=tuple(_stage_row(s) for s in self.stages.stages),
            timeline=self.timeline,
            next_moves=tuple(replace(m, evidence=jsonable(m.evidence)) for m in self.moves),
            notes=tuple(notes),
            training=self.training,
            xprof=self.xprof,
            service_sizing=self.service_sizing,
        )


def _moves(findings: Findings, facts: StepFacts | None, bd: Breakdown) -> tuple[NextMove, ...]:
    """The next moves for the step (precision policy, XLA, a larger batch, Keras'
    steps_per_execution), from what the trace shows. Empty while the run is input-bound,
    has no steps, or its training loop's own work outside tf.data is the top bottleneck.
    A move whose idea is already among the fixes (a compute-bound step's fix is its best
    move) is not offered again. Pure: the same analysis gives the same moves."""
    if facts is None or any(b.category == TRAINING_LOOP for b in findings.bottlenecks[:1]):
        return ()
    fixed = {r.kind for r in findings.recommendations if r.stage is None}
    moves = moves_from(facts, bd.fractions(), bd.input_share)
    return tuple(m for m in moves if m.kind not in fixed)


def step_advice(doc: AnalysisDocument) -> tuple[str, ...]:
    """The moves for the step in words, best first, from an analysis document, for
    `tftune optimize` to say when the input pipeline is not the limit: the top fix where
    it is one for the step itself (compile an eager step, several steps per call, the
    best move of a compute-bound step), then the next moves. Empty for an input-bound
    run."""
    if doc.verdict.input_bound is not False:
        return ()
    recs = doc.recommendations
    top = recs[:1] if recs and recs[0].kind in STEP_IDEAS else ()
    said = [(f.summary, f.code) for f in top] + [(m.summary, m.code) for m in doc.next_moves]
    return tuple(f"{summary} ({code})" if code else summary for summary, code in said if summary)


def _fix(r: Recommendation, expected_gain: float | None = None) -> Fix:
    """A fix as the document writes it; `expected_gain` in the ranked list only."""
    evidence = jsonable(r.evidence)
    measured = OPTIMIZE_MEASURES.get(r.kind)
    kind = r.kind or None
    return Fix(r.summary, r.code, kind, r.category, r.stage, evidence, expected_gain, measured)


def _bottleneck(b: FoundBottleneck, rank: int) -> Bottleneck:
    fix = _fix(b.recommendation) if b.recommendation is not None else None
    evidence = jsonable(b.evidence)
    return Bottleneck(rank, b.category, b.share, b.stage, b.call_site, b.functions, evidence, fix)


def _stage_row(s: Stage) -> StageRow:
    k = s.knobs
    return StageRow(
        id=s.id,
        parent_id=s.parent_id,
        name=s.name,
        op=s.op,
        depth=s.depth,
        calls=s.calls,
        total_ms=_ms(s.total_ps),
        self_ms=_ms(s.self_ps),
        self_per_call_ms=round(s.self_ps / s.calls / PS_PER_MS, 4) if s.calls else None,
        work_ms=_ms(s.work_ps),
        active_ms=_ms(s.active_ps),
        wait_ms=_ms(s.wait_ps),
        function_ms=_ms(s.function_ps) if s.function_calls else None,
        function_calls=s.function_calls,
        top_ops=tuple((op, _ms(ps)) for op, ps in s.ops_ps[:5]),
        is_async=s.is_async,
        blocking=s.blocking,
        bottleneck=s.bottleneck,
        parallelism=k.get("parallelism"),
        buffer_limit=k.get("buffer_limit"),
        autotune=k.get("autotune"),
        batch_size=k.get("batch_size"),
        threadpool_size=k.get("threadpool_size"),
        cpu_budget=k.get("cpu_budget"),
        ram_budget_megabytes=k.get("ram_budget_megabytes"),
        capped_by=s.capped_by,
        udf_concurrency=s.udf_concurrency,
    )


def _busiest_functions(host: HostTrace, limit: int = 2) -> tuple[str, ...]:
    """The tf.functions the consumer spent most time in (`__inference_<name>_<n>` calls)."""
    plane = host.host_plane
    if plane is None:
        return ()
    totals: dict[str, int] = {}
    for line, idx in plane.find(lambda n: FUNCTION_CALL_RE.match(n) is not None):
        for mid in set(line.metadata_id[idx].tolist()):
            m = FUNCTION_CALL_RE.match(plane.event_names[mid])
            if m:
                sel = idx[line.metadata_id[idx] == mid]
                totals[m.group(1)] = totals.get(m.group(1), 0) + int(line.duration_ps[sel].sum())
    return tuple(sorted(totals, key=lambda k: -totals[k])[:limit])


def _pick_host(run: RunTrace) -> HostTrace:
    """The host with the most tf.data activity (the input pipeline lives there)."""

    def weight(h: HostTrace) -> int:
        p = h.host_plane
        return 0 if p is None else sum(len(ln) for ln in p.lines)

    return max(run.hosts, key=weight)


def analyze_run(logdir: Path, run: RunTrace, tool_version: str, xprof: bool = False) -> Analysis:
    """Analyze the busiest host of a loaded run; `xprof`: also run XProf's converter on
    that host's file, for the `xprof` cross-check."""
    host = _pick_host(run)
    device = "GPU" if host.gpu_planes else "CPU_ONLY"
    steps = detect_steps(host)
    bd = compute_breakdown(host, steps)
    window = (int(steps.start_ps.min()), int(steps.end_ps.max())) if len(steps) else None
    tree = build_stage_tree(host, window)
    fractions = bd.fractions()
    wait_share = fractions.get("input_wait")
    notes: list[str] = []
    root = tree.root
    if not len(steps) and root is not None and tree.window_ps > 0:
        # Without steps there is no step time; the consumer's time inside the root
        # iterator over the profile window still says what the pipeline made it wait for.
        wait_share = min(1.0, root.total_ps / tree.window_ps)
        notes.append(
            "no steps: bottleneck shares are fractions of the profile window "
            f"(consumers spent {100 * wait_share:.0f}% of it inside the tf.data iterator)"
        )
    record = read_sites(run.path)
    sites = record.sites
    if record.note is not None:
        notes.append(record.note)
    facts = step_facts(host, steps, "GPU" if device == "GPU" else "CPU")
    training = read_clock_file(run.path)
    findings = find(
        tree,
        input_wait_share=wait_share,
        input_share=bd.input_share,
        fractions=fractions,
        device="GPU" if device == "GPU" else "CPU",
        detection=steps.detection,
        compute_functions=_busiest_functions(host),
        sites=sites,
        loop=find_loop_work(host, steps),
        facts=facts,
        epoch_stall=training is not None and training.stall is not None,
    )
    timeline = extract_timeline(host, steps) if len(steps) else None
    check = compare_with_xprof(host.path, steps, bd) if xprof else None
    # When one host is not enough (probes/advice/service_sizing.py): tf.data CPU vs step time.
    cores = tree.root_knobs.get("cpu_budget")
    sizing = trace_sizing(host, steps, fractions.get("input_wait"), cores, findings.unsized)
    return Analysis(
        logdir,
        run,
        host,
        device,
        steps,
        bd,
        tree,
        findings,
        timeline,
        tool_version,
        tuple(notes),
        check,
        facts,
        training,
        dedupe(findings.recommendations),
        _moves(findings, facts, bd),
        sizing,
        tf_version=record.tf_version,
    )


def analyze(
    path: Path | str,
    run: str | None = None,
    host: str | None = None,
    tool_version: str = "0",
    xprof: bool = False,
) -> Analysis:
    """Analyze the newest run under `path` (or `run`), optionally one `host` only;
    `xprof`: put XProf's own step time and input share beside tftune's. `path` may be a
    URL (``gs://``, ``s3://``, any fsspec one: `probes.traces.remote`)."""
    if is_url(path):
        with fetched(str(path), run, host) as (local, urls):
            found = analyze(local, None, host, tool_version, xprof)
        return replace(found, origin=str(path), origin_files=urls)
    p = Path(path)
    info = locate(p, run=run, host=host)
    loaded = load_run(info.name, info.path, [(h.host, h.path) for h in info.hosts])
    return analyze_run(p, loaded, tool_version, xprof=xprof)
