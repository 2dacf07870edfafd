"""The rewrites in the reports: a tuning JSON's rows read back to the same JSON, and
each shows in the terminal and on the page with where it stands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repo_paths import FIXTURES

from tftune.core.tuning_document import TuningDocument
from tftune.core.tuning_rewrites import Equivalence, RewriteKind, RewriteRow, RewriteState
from tftune.reports import render_report_json
from tftune.reports.rewrite_rows import rewrite_lines, rewrites_section
from tftune.reports.tuning_terminal import render

ROWS = (
    RewriteRow(
        RewriteKind.CACHE,
        "train.py:63",
        "train.py:63/cache",
        RewriteState.MEASURED,
        "cache() after the map at train.py:63",
        Equivalence(True, 256, "in order, on two passes"),
        560_888,
        trials=3,
        alone_examples_per_s=8439.9,
        alone_gain=2.806,
        in_winner=True,
    ),
    RewriteRow(
        RewriteKind.ORDER,
        "train.py:64",
        "train.py:64/shuffle_first",
        RewriteState.REFUSED,
        "random op RandomUniform in the map at line 63: a shuffle is never moved above a "
        "random map",
    ),
    RewriteRow(
        RewriteKind.ITERATOR,
        None,
        None,
        RewriteState.NOT_APPLICABLE,
        "the epoch's length is unknown to tf.data",
    ),
)


def _with_rows(rows: tuple[RewriteRow, ...]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "tuning_latency.json").read_text())
    data["rewrites"] = [r.to_json() for r in rows]
    return data


def test_the_rows_read_back_to_the_same_json() -> None:
    data = _with_rows(ROWS)
    doc = TuningDocument.from_json(data)
    assert doc.run is not None and doc.run.rewrites == ROWS
    assert doc.to_json()["rewrites"] == data["rewrites"]
    older = json.loads((FIXTURES / "tuning_latency.json").read_text())
    assert "rewrites" not in TuningDocument.from_json(older).to_json()


def test_the_terminal_says_where_each_rewrite_stands() -> None:
    doc = TuningDocument.from_json(_with_rows(ROWS))
    lines = rewrite_lines(doc)
    assert lines[0] == "pipeline rewrites:"
    cache, order, iterator = lines[1:]
    assert "train.py:63" in cache and "3 trial(s)" in cache and "alone 2.8×" in cache
    assert "in the winner" in cache
    assert "refused: random op RandomUniform" in order
    assert "does not apply: the epoch's length is unknown" in iterator
    text = render(doc, width=200)
    assert "pipeline rewrites:" in text and cache.strip() in text


def test_the_page_has_a_table_of_the_rewrites(tmp_path: Path) -> None:
    page = render_report_json(_with_rows(ROWS), generated_at="2026-12-05 00:00 UTC", source="t")
    assert '<section id="rewrites">' in page
    assert "equal to the script&#x27;s own over 256 elements" in page
    assert "refused" in page and "does not apply" in page
    none = TuningDocument.from_json(_with_rows(()))
    assert "allows none of the rewrites" in rewrites_section(none)
    older = json.loads((FIXTURES / "tuning_latency.json").read_text())
    assert '<section id="rewrites">' not in render_report_json(older, generated_at="x", source="t")
