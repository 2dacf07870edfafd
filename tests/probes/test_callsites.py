"""Matching a trace's tf.data stages to the call sites `tftune profile` recorded."""

from __future__ import annotations

import json
from pathlib import Path

from tftune.core.vocabulary import stage_kind
from tftune.probes.traces.callsites import (
    SITES_FILE,
    RecordedSite,
    SitesRecord,
    family,
    read_sites,
    site_for_stage,
    write_sites,
)
from tftune.probes.traces.stages import Stage

SITES = (
    RecordedSite("train.py:4", "TFRecordDataset"),
    RecordedSite("train.py:5", "map", "parse"),
    RecordedSite("train.py:6", "map", "augment"),
    RecordedSite("train.py:6", "batch"),
)


def _stage(name: str, depth: int) -> Stage:
    return Stage(
        name=name,
        kind=stage_kind(name),
        parent=None,
        depth=depth,
        id=None,
        parent_id=None,
        op=None,
        types=None,
        calls=1,
        total_ps=0,
        self_ps=0,
        work_ps=0,
        active_ps=0,
        wait_ps=None,
        function_ps=0,
        function_calls=0,
        ops_ps=(),
        op_nodes=(),
        python_frames=(),
        function_names=(),
        udf_concurrency=None,
        is_async=False,
        blocking=False,
        bottleneck=False,
    )


# Root > Prefetch > MapAndBatch (augment) > ParallelMapV2 (parse) > TFRecord
STAGES = tuple(
    _stage(name, depth)
    for depth, name in enumerate(
        (
            "Iterator::Root",
            "Iterator::Root::Prefetch",
            "Iterator::Root::Prefetch::MapAndBatch",
            "Iterator::Root::Prefetch::MapAndBatch::ParallelMapV2",
            "Iterator::Root::Prefetch::MapAndBatch::ParallelMapV2::TFRecord",
        )
    )
)
BY_NAME = {st.name: st for st in STAGES}


def test_stage_kinds_map_to_call_families() -> None:
    assert family("ParallelMapV2") == family("MapAndBatch") == family("Map") == "map"
    assert family("ParallelInterleaveV4") == family("Interleave") == "interleave"
    assert family("PaddedBatchV2") == family("BatchV2") == "batch"
    assert family("TFRecord") == "reader" and family("Prefetch") == "prefetch"
    assert family("Generator") == "py_dataset"  # Keras feeds a PyDataset via from_generator
    assert family("Shuffle") is None and family("Root") is None


def test_stages_match_calls_of_their_family_from_the_source_up() -> None:
    def site(name: str) -> str | None:
        found = site_for_stage(BY_NAME[name], STAGES, SITES)
        return None if found is None else found.site

    # Two maps: the one nearer the source is the call made first.
    assert site("Iterator::Root::Prefetch::MapAndBatch::ParallelMapV2") == "train.py:5"
    found = site_for_stage(BY_NAME["Iterator::Root::Prefetch::MapAndBatch"], STAGES, SITES)
    assert found == RecordedSite("train.py:6", "map", "augment")
    assert site("Iterator::Root::Prefetch::MapAndBatch::ParallelMapV2::TFRecord") == "train.py:4"
    # A stage TF added (this prefetch) or one of no family names no line.
    assert site("Iterator::Root::Prefetch") is None
    assert site("Iterator::Root") is None


def test_no_one_to_one_match_names_no_line() -> None:
    one_map = SITES[:2]  # the trace has two map stages, the record one map call
    assert site_for_stage(BY_NAME["Iterator::Root::Prefetch::MapAndBatch"], STAGES, one_map) is None
    assert site_for_stage(BY_NAME["Iterator::Root::Prefetch::MapAndBatch"], STAGES, ()) is None


def test_the_record_round_trips_and_a_broken_one_is_a_note(tmp_path: Path) -> None:
    assert read_sites(tmp_path) == SitesRecord()  # no record: nothing to say
    write_sites(tmp_path, "/w/train.py", [*SITES, SITES[1]])  # a site seen twice, kept once
    assert read_sites(tmp_path) == SitesRecord(SITES)
    assert json.loads((tmp_path / SITES_FILE).read_text())["script"] == "/w/train.py"
    write_sites(tmp_path, "/w/train.py", SITES, tf_version="2.21.0")
    assert read_sites(tmp_path) == SitesRecord(SITES, "2.21.0")
    (tmp_path / SITES_FILE).write_text("{not json")
    broken = read_sites(tmp_path)
    assert broken.sites == () and broken.tf_version is None and broken.note is not None
    assert SITES_FILE in broken.note and "call sites are not named" in broken.note
