"""The analysis document's advice: the verdict, the bottlenecks, the fixes and the next
moves for the step.

Part types of `core.analysis_document.AnalysisDocument`. Each is frozen; `to_json` writes
its JSON object as docs/json.md describes it (it computes nothing) and `read` reads one
back through a strict, path-aware `Reader`. `evidence` is a flat, free-form object of what
was measured (docs/json.md), typed as the JSON values it holds (`jsonable` makes a
producer's values so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tftune.core.document_reading import JsonValue, Reader, share
from tftune.core.vocabulary import Band, input_band


def jsonable(value: Any) -> Any:
    """`value` as JSON holds it: tuples as lists, keys as strings, bytes as text, any
    other object as its mapping or its text; what `to_json` writes reads back equal."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return jsonable(dict(value))
    except (TypeError, ValueError):
        return str(value)


Evidence = Mapping[str, JsonValue]


def _evidence(r: Reader) -> Evidence:
    found = r.obj("evidence")
    return dict(found.mapping()) if found is not None else {}


@dataclass(frozen=True, slots=True)
class Verdict:
    """How input-bound the run is: the document's `input_bound`, `input_share` (input
    wait + host-to-device, a fraction of step time) and `verdict` (the share's band,
    `level`, and the sentence that says it). `None`: no step was found, so the input wait
    was not measured."""

    input_bound: bool | None
    input_share: float | None
    level: Band | None
    sentence: str

    def to_json(self) -> dict[str, Any]:
        """The document's three fields: `input_bound`, `input_share` and `verdict`."""
        level = None if self.level is None else self.level.value
        return {
            "input_bound": self.input_bound,
            "input_share": self.input_share,
            "verdict": {"level": level, "sentence": self.sentence},
        }

    @classmethod
    def read(cls, r: Reader) -> Verdict:
        """The three fields from the document's top level `r`; a document without
        `verdict` gets the one its figures say (`derived`)."""
        input_bound = r.boolean("input_bound")
        input_share = share(r, "input_share")
        v = r.obj("verdict")
        if v is None:
            return cls.derived(input_bound, input_share)
        v.raw("level", required=True)  # present; null where no step was found
        level = v.string("level")
        if level is not None and level not in {b.value for b in Band}:
            raise v.error("level", f"must be one of {', '.join(b.value for b in Band)}")
        band = Band(level) if level is not None else None
        return cls(input_bound, input_share, band, v.required_string("sentence"))

    @classmethod
    def derived(cls, input_bound: bool | None, input_share: float | None) -> Verdict:
        """The verdict of an older document without one: what its numbers say, in the
        input-bound bands."""
        if input_share is None:
            sentence = "Input wait was not measured: no training steps were found."
            return cls(input_bound, None, Band.LOW, sentence)
        band = input_band(input_share)
        if band is Band.LOW and input_bound:  # the analysis said so, whatever the share
            band = Band.MODERATE
        words = band.words[:1].upper() + band.words[1:]
        sentence = f"{words}: {input_share * 100:.0f}% of step time waits for input."
        return cls(input_bound, input_share, band, sentence)


@dataclass(frozen=True, slots=True)
class Fix:
    """One fix as the document writes it (`recommendations[]`, a bottleneck's
    `recommendation`): what to change, as words and as code, its idea (`kind`), what it
    is for, and, in the ranked list, `expected_gain` (the estimated fraction of step time
    saved; `None` in a bottleneck's own, where the JSON has no such field)."""

    summary: str
    code: str | None
    kind: str | None
    category: str | None
    stage: str | None
    evidence: Evidence = field(default_factory=dict)
    expected_gain: float | None = None
    # What `tftune optimize` measures of it, in words (None: a change of code it cannot
    # try; `probes.advice.ideas.OPTIMIZE_MEASURES`).
    optimize: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "summary": self.summary,
            "code": self.code,
            "kind": self.kind,
            "category": self.category,
            "stage": self.stage,
            "evidence": dict(self.evidence),
        }
        if self.expected_gain is not None:
            out["expected_gain"] = self.expected_gain
        if self.optimize is not None:
            out["optimize"] = self.optimize
        return out

    @classmethod
    def read(cls, r: Reader) -> Fix:
        return cls(
            summary=r.string("summary") or "",
            code=r.string("code"),
            kind=r.string("kind"),
            category=r.string("category"),
            stage=r.string("stage"),
            evidence=_evidence(r),
            expected_gain=r.number("expected_gain"),
            optimize=r.string("optimize"),
        )


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """One bottleneck as the document writes it (`bottlenecks[]`): its category and share
    of step time, where it is (stage, call site, functions), the evidence and its best
    fix. `rank` is its place in the list, 1 first (the list's order, not a field)."""

    rank: int
    category: str
    share: float | None
    stage: str | None
    call_site: str | None
    functions: tuple[str, ...]
    evidence: Evidence
    recommendation: Fix | None

    def to_json(self) -> dict[str, Any]:
        fix = self.recommendation
        return {
            "category": self.category,
            "share": self.share,
            "stage": self.stage,
            "call_site": self.call_site,
            "functions": list(self.functions),
            "evidence": dict(self.evidence),
            "recommendation": fix.to_json() if fix is not None else None,
        }

    @classmethod
    def read(cls, b: Reader, rank: int) -> Bottleneck:
        rec = b.obj("recommendation")
        return cls(
            rank=rank,
            category=b.required_string("category"),
            share=share(b, "share"),
            stage=b.string("stage"),
            call_site=b.string("call_site"),
            functions=b.strings("functions"),
            evidence=_evidence(b),
            recommendation=Fix.read(rec) if rec is not None else None,
        )


@dataclass(frozen=True, slots=True)
class NextMove:
    """One ranked move for the step when the input pipeline is not the limit
    (`next_moves[]`): its idea (`kind`: precision, xla, batch_size,
    steps_per_execution), the words and the code, and `score`, the estimated fraction of
    step time saved (for ranking only)."""

    kind: str
    summary: str
    code: str | None
    score: float | None
    evidence: Evidence = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "summary": self.summary,
            "code": self.code,
            "score": self.score,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def read(cls, m: Reader) -> NextMove:
        return cls(
            kind=m.string("kind") or "",
            summary=m.string("summary") or "",
            code=m.string("code"),
            score=m.number("score"),
            evidence=_evidence(m),
        )
