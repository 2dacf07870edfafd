"""The pipeline rewrites, parent side (pure, no TensorFlow): which ones a training
pipeline allows (`tuner.fixes.rewrites.consider`), where a cache lives (`place_cache`), the
search space they add (`with_rewrites`, `rewrite_seeds`), the configs they make, their
rows' JSON, and the code the winner's diff shows (`tuner.output.rewrite_code`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tftune.core.document_reading import Reader
from tftune.core.errors import ConfigError
from tftune.core.tuning_rewrites import Equivalence, RewriteKind, RewriteRow, RewriteState
from tftune.probes.live.epoch_stall import PipelineStage
from tftune.tuner.fixes.rewrite_check import place_cache, rewrite_seeds, with_rewrites
from tftune.tuner.fixes.rewrites import Candidate, consider
from tftune.tuner.fixes.training_calls import LOOP_EAGER, LOOP_FIT, LOOP_GRAPH, FitCall
from tftune.tuner.output.emit import globals_snippet, rewrite_sources
from tftune.tuner.output.rewrite_code import RewriteFacts
from tftune.tuner.searchspace.config import CACHE_MEMORY, Config, SiteConfig, config_from_json
from tftune.tuner.searchspace.space import SearchSpace, config_from_values
from tftune.tuner.searchspace.space_build import build_space
from tftune.tuner.trial.discovery import CallSite

SRC = PipelineStage("source", None, elements=2000)
TOKENIZE = PipelineStage("map", "train.py:20", python=True, elements=2000)
SHUFFLE = PipelineStage("shuffle", "train.py:21", elements=2000)
BATCH = PipelineStage("batch", "train.py:22", elements=63)
PREFETCH = PipelineStage("prefetch", "train.py:23", elements=63)
AUGMENT = PipelineStage("map", "train.py:24", random="RandomUniform", elements=63)


def kinds(found: list[Candidate]) -> dict[RewriteKind, Candidate]:
    return {c.kind: c for c in found}


def test_a_shuffle_after_a_tokenizer_gets_a_cache_a_moved_shuffle_and_one_iterator() -> None:
    chain = (SRC, TOKENIZE, SHUFFLE, BATCH, PREFETCH)
    found, rows = consider(chain, LOOP_EAGER)
    got = kinds(found)
    assert got[RewriteKind.CACHE].param == "train.py:20/cache"
    assert got[RewriteKind.ORDER].param == "train.py:21/shuffle_first"
    assert got[RewriteKind.ORDER].crosses == ("train.py:20",)
    assert got[RewriteKind.ITERATOR].param == "one_iterator"
    assert rows == []


def test_a_cache_stays_above_a_random_map_and_the_shuffle() -> None:
    """The cache goes after the last map before anything an epoch sees anew: never below
    a random augmentation, whose draws it would freeze."""
    pure = PipelineStage("map", "train.py:19", elements=2000)
    chain = (SRC, pure, AUGMENT, TOKENIZE, SHUFFLE, BATCH)
    found, _ = consider(chain, LOOP_GRAPH)
    assert kinds(found)[RewriteKind.CACHE].site == "train.py:19"


def test_no_cache_below_a_shuffle_says_why() -> None:
    """A map that only comes after the shuffle cannot be cached: the cache would replay
    one epoch's order. The row says so; nothing is searched."""
    late = PipelineStage("map", "train.py:25", elements=63)
    chain = (SRC, SHUFFLE, BATCH, late)
    found, rows = consider(chain, LOOP_GRAPH)
    assert RewriteKind.CACHE not in kinds(found)
    (row,) = [r for r in rows if r.kind is RewriteKind.CACHE]
    assert row.state is RewriteState.NOT_APPLICABLE and "a shuffle" in row.reason
    assert row.param is None


def test_a_shuffle_is_never_moved_above_a_random_map() -> None:
    chain = (SRC, AUGMENT, SHUFFLE, BATCH)
    found, rows = consider(chain, LOOP_GRAPH)
    assert RewriteKind.ORDER not in kinds(found)
    (row,) = [r for r in rows if r.kind is RewriteKind.ORDER]
    assert row.state is RewriteState.REFUSED
    assert "RandomUniform" in row.reason and "line 24" in row.reason


def test_no_cache_where_one_follows_the_map_already() -> None:
    cached = PipelineStage("cache", "train.py:20", elements=2000)
    found, rows = consider((SRC, TOKENIZE, cached, SHUFFLE, BATCH), LOOP_GRAPH)
    assert RewriteKind.CACHE not in kinds(found) and rows == []


def test_one_iterator_needs_a_known_length_and_a_loop_it_can_keep() -> None:
    unknown = PipelineStage("batch", "train.py:22", elements=-2)
    _, rows = consider((SRC, TOKENIZE, unknown), LOOP_FIT)
    (row,) = [r for r in rows if r.kind is RewriteKind.ITERATOR]
    assert row.state is RewriteState.NOT_APPLICABLE and "length is unknown" in row.reason
    repeated = PipelineStage("repeat", "train.py:26", elements=-1)
    found, rows = consider((SRC, TOKENIZE, BATCH, repeated), LOOP_FIT)
    assert RewriteKind.ITERATOR not in kinds(found)  # one iterator already
    found, _ = consider((SRC, TOKENIZE, BATCH), LOOP_GRAPH)  # inside a tf.function
    assert RewriteKind.ITERATOR not in kinds(found)
    found, _ = consider((SRC, TOKENIZE, BATCH), LOOP_FIT)
    assert RewriteKind.ITERATOR in kinds(found)


def _checked_cache(size: int | None) -> RewriteRow:
    check = Equivalence(True, 256, "in order, on two passes")
    return RewriteRow(
        RewriteKind.CACHE, "t.py:1", "t.py:1/cache", RewriteState.CHECKED, "cache()", check, size
    )


def test_a_cache_lives_in_memory_within_the_budget_else_in_a_file_else_is_refused(
    tmp_path: Path,
) -> None:
    assert place_cache(_checked_cache(10**6), 4 * 10**6, None) == CACHE_MEMORY
    assert place_cache(_checked_cache(9 * 10**9), 6 * 10**9, str(tmp_path)) == str(tmp_path)
    refused = place_cache(_checked_cache(9_400_000_000), 6 * 10**9, None)
    assert isinstance(refused, RewriteRow) and refused.state is RewriteState.REFUSED
    assert "needs 9.4 GB, budget 6.0 GB" in refused.reason  # both figures
    unknown = place_cache(_checked_cache(None), 6 * 10**9, None)
    assert isinstance(unknown, RewriteRow) and "--cache-dir" in unknown.reason


def _space_with_rewrites() -> tuple[SearchSpace, list[Candidate]]:
    sites = [CallSite("train.py:20", "map", (), SiteConfig(), None, 1)]
    space = build_space(sites, cores=2)
    found, _ = consider((SRC, TOKENIZE, SHUFFLE, BATCH), LOOP_EAGER)
    rows = [c.row(RewriteState.CHECKED, "ok", None, 10**6) for c in found]
    return with_rewrites(space, rows, {"train.py:20/cache": CACHE_MEMORY}, found), found


def test_checked_rewrites_are_dimensions_and_a_cache_wins_over_a_moved_shuffle() -> None:
    space, _ = _space_with_rewrites()
    cache = space.knob("train.py:20/cache")
    assert cache.choices == (None, CACHE_MEMORY) and cache.as_written is None
    assert space.knob("one_iterator").choices == (None, True)
    written = space.as_written_params()
    assert space.config(written) == Config()
    both = {**written, "train.py:20/cache": CACHE_MEMORY, "train.py:21/shuffle_first": True}
    config = space.config(both)
    assert config.site("train.py:20") == SiteConfig(cache=CACHE_MEMORY)
    # A shuffle moved above a cached map would cache one epoch's order: the cache wins.
    assert config.site("train.py:21") is None
    alone = space.config({**written, "train.py:21/shuffle_first": True})
    assert alone.site("train.py:21") == SiteConfig(shuffle_first=True)


def test_a_refused_rewrite_is_left_out_with_its_reason() -> None:
    sites = [CallSite("train.py:20", "map", (), SiteConfig(), None, 1)]
    space = build_space(sites, cores=2)
    row = RewriteRow(
        RewriteKind.CACHE, "train.py:20", "train.py:20/cache", RewriteState.REFUSED, "differs"
    )
    out = with_rewrites(space, [row], {}, [])
    assert "train.py:20/cache" not in out.names
    assert ("train.py:20/cache", "refused: differs") in {(x.name, x.reason) for x in out.left_out}


def test_the_seeds_measure_each_rewrite_alone_then_all_over_the_screens_best() -> None:
    space, _ = _space_with_rewrites()
    best = {**space.as_written_params(), "train.py:20/num_parallel_calls": 4}
    alone, together = rewrite_seeds(space, [best])
    written = space.as_written_params()
    assert len(alone) == 3
    for seed in alone:
        assert len({k for k, v in seed.items() if v != written[k]}) == 1
    (all_of_them,) = together
    assert all_of_them["train.py:20/num_parallel_calls"] == 4
    assert all_of_them["one_iterator"] is True and all_of_them["train.py:20/cache"] == CACHE_MEMORY


def test_rewrite_configs_read_and_write_as_json_and_reject_bad_values() -> None:
    config = Config(
        sites={"t.py:3": SiteConfig(cache=CACHE_MEMORY), "t.py:4": SiteConfig(shuffle_first=True)},
        one_iterator=True,
    )
    data = config.to_json()
    assert data["one_iterator"] is True and data["sites"]["t.py:3"] == {"cache": "memory"}
    assert config_from_json(json.loads(json.dumps(data))) == config
    assert "one_iterator" not in Config().to_json()  # older files read and write as before
    with pytest.raises(ConfigError, match="cache must be"):
        config_from_json({"sites": {"t.py:3": {"cache": 3}}})
    with pytest.raises(ConfigError, match="one_iterator must be"):
        config_from_json({"one_iterator": "yes"})
    values = config_from_values({"t.py:3/cache": CACHE_MEMORY, "one_iterator": True})
    assert values.site("t.py:3") == SiteConfig(cache=CACHE_MEMORY) and values.one_iterator


def test_a_rewrite_row_reads_back_to_the_same_json() -> None:
    row = RewriteRow(
        RewriteKind.ORDER,
        "t.py:4",
        "t.py:4/shuffle_first",
        RewriteState.MEASURED,
        "moved",
        Equivalence(True, 256, "in order"),
        None,
        trials=3,
        alone_examples_per_s=1234.5,
        alone_gain=1.2,
        in_winner=True,
    )
    data = json.loads(json.dumps(row.to_json()))
    assert RewriteRow.from_reader(Reader(data, source="x")) == row
    data["state"] = "maybe"
    with pytest.raises(Exception, match="field 'state' must be one of"):
        RewriteRow.from_reader(Reader(data, source="x"))


SCRIPT = """\
import tensorflow as tf

ds = tf.data.Dataset.from_tensor_slices(paths)
ds = ds.map(tokenize)
ds = ds.shuffle(1500)
ds = ds.padded_batch(32)
model.fit(ds, validation_data=val_ds, epochs=3)
other = ds.map(f).batch(8)
"""


def test_the_diff_writes_each_rewrite_on_the_users_own_lines(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    config = Config(
        sites={"train.py:4": SiteConfig(cache=CACHE_MEMORY), "train.py:8": SiteConfig(cache="/c")},
        one_iterator=True,
    )
    fit = FitCall("train.py:7", 63, 10, False, False)
    ((_, after),) = rewrite_sources(script, config, RewriteFacts(fit=fit)).values()
    assert "ds = ds.map(tokenize).cache()\n" in after
    assert "other = ds.map(f).cache('/c/tftune-cache-train.py-8').batch(8)" in after
    assert (
        "model.fit(ds.repeat(), validation_data=val_ds.repeat(), epochs=3, "
        "steps_per_epoch=len(ds), validation_steps=len(val_ds))" in after
    )
    moved = Config(sites={"train.py:5": SiteConfig(shuffle_first=True)})
    facts = RewriteFacts(crosses={"train.py:5": ("train.py:4",)})
    ((_, after),) = rewrite_sources(script, moved, facts).values()
    lines = after.splitlines()
    assert lines[3:5] == ["ds = ds.shuffle(1500)", "ds = ds.map(tokenize)"]


def test_a_shuffle_in_a_chain_moves_inside_the_chain(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("ds = src.map(load).shuffle(100, seed=1).batch(8)\n")
    config = Config(sites={"train.py:1": SiteConfig(shuffle_first=True)})
    facts = RewriteFacts(crosses={"train.py:1": ("train.py:1",)})
    ((_, after),) = rewrite_sources(script, config, facts).values()
    assert after == "ds = src.shuffle(100, seed=1).map(load).batch(8)\n"


def test_one_iterator_in_a_custom_loop_is_a_snippet() -> None:
    facts = RewriteFacts(loop_place="train.py:40", epoch_length=63)
    snippet = globals_snippet(Config(one_iterator=True), facts=facts)
    assert "it = iter(ds.repeat())" in snippet and "range(steps_per_epoch)" in snippet
    assert "len(ds)  # before repeat(), 63 as written" in snippet
    fitted = RewriteFacts(fit=FitCall("train.py:7", 63, None, False, False))
    assert "iter(" not in globals_snippet(Config(one_iterator=True), facts=fitted)


def test_the_compute_switches_each_loop_allows() -> None:
    from tftune.tuner.fixes.rewrites import consider_compute
    from tftune.tuner.fixes.training_calls import LOOP_FIT_STEPS, CompileCall, StepFunction

    graph = CompileCall("train.py:30", False, "auto", 1)
    found, rows = consider_compute(LOOP_FIT, graph, None)
    assert {c.param for c in found} == {"jit_compile", "steps_per_execution"} and rows == []
    spe = next(c for c in found if c.param == "steps_per_execution")
    assert spe.choices == (None, 4, 16, 64) and spe.config().steps_per_execution == 4
    done = CompileCall("train.py:30", False, True, 16)
    assert consider_compute(LOOP_FIT_STEPS, done, None) == ([], [])
    eager = CompileCall("train.py:30", True, "auto", 1)
    graph_mode, xla = consider_compute(LOOP_FIT, eager, None)[0]  # each checked on its own
    assert {graph_mode.param, xla.param} == {"compile_step"}
    assert (graph_mode.value, xla.value) == ("function", "xla")
    own = StepFunction("train_step", "train.py:51", True)
    step, _ = consider_compute(LOOP_EAGER, None, own)[0]
    assert step.config().compile_step == "function" and step.site == "train.py:51"
    inline = StepFunction(None, "train.py:70", True)
    found, rows = consider_compute(LOOP_EAGER, None, inline)
    assert found == [] and rows[0].state is RewriteState.NOT_APPLICABLE
    compiled = StepFunction("train_step", "train.py:51", False)  # already a tf.function
    assert consider_compute(LOOP_EAGER, None, compiled) == ([], [])


STEP_SCRIPT = """\
import keras
import tensorflow as tf

model.compile(optimizer="adam", loss="mse", jit_compile=False)


# @tf.function
def train_step(x, y):
    return x
"""


def test_the_compute_switches_are_written_where_the_script_sets_them(tmp_path: Path) -> None:
    from tftune.tuner.fixes.training_calls import CompileCall, StepFunction

    script = tmp_path / "train.py"
    script.write_text(STEP_SCRIPT)
    keras_facts = RewriteFacts(compiled=CompileCall("train.py:4", False, False, 1))
    config = Config(jit_compile=True, steps_per_execution=16)
    ((_, after),) = rewrite_sources(script, config, keras_facts).values()
    assert (
        'model.compile(optimizer="adam", loss="mse", jit_compile=True, steps_per_execution=16)'
        in after
    )
    loop_facts = RewriteFacts(step=StepFunction("train_step", "train.py:8", True))
    ((_, after),) = rewrite_sources(script, Config(compile_step="xla"), loop_facts).values()
    assert "# @tf.function\n@tf.function(jit_compile=True)\ndef train_step(x, y):" in after


def test_a_switch_searches_the_values_that_passed_their_check() -> None:
    """compile_step is checked at "function" and at "xla" apart: where XLA changes the
    loss, only the tf.function is searched, and the XLA row says why not."""
    from tftune.tuner.fixes.rewrites import consider_compute
    from tftune.tuner.fixes.training_calls import StepFunction

    space = build_space([CallSite("train.py:20", "map", (), SiteConfig(), None, 1)], cores=2)
    found, _ = consider_compute(LOOP_EAGER, None, StepFunction("step", "train.py:9", True))
    function, xla = found
    rows = [function.row(RewriteState.CHECKED, "ok"), xla.row(RewriteState.REFUSED, "differs")]
    out = with_rewrites(space, rows, {}, found)
    assert out.knob("compile_step").choices == (None, "function")
    both = [function.row(RewriteState.CHECKED, "ok"), xla.row(RewriteState.CHECKED, "ok")]
    assert with_rewrites(space, both, {}, found).knob("compile_step").choices == (
        None,
        "function",
        "xla",
    )


def test_a_pass_too_long_to_see_the_end_of_gets_no_cache_and_no_iterator() -> None:
    """A source of 100 million elements (the bench's cases): a cache would fill over a
    pass no trial ends, and one iterator a pass makes is nothing; both are decided from
    the pipeline alone, so no check run is spent on them."""
    huge = PipelineStage("source", None, elements=100_000_000)
    read = PipelineStage("map", "train.py:20", python=True, elements=100_000_000)
    batch = PipelineStage("batch", "train.py:21", elements=12_500_000)
    found, rows = consider((huge, read, batch), LOOP_EAGER)
    assert found == []
    (row,) = [r for r in rows if r.kind is RewriteKind.CACHE]
    assert row.state is RewriteState.REFUSED
    assert "100,000,000 elements" in row.reason


def test_a_map_made_over_batches_is_written_as_batch_then_map(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("ds = ds.map(lambda v: v * 2)\nds = ds.batch(32)\nz = src.map(f).batch(8)\n")
    as_it_is = Config(sites={"train.py:1": SiteConfig(vectorize="batch")})
    ((_, after),) = rewrite_sources(script, as_it_is).values()
    assert after.splitlines()[:2] == ["ds = ds.batch(32)", "ds = ds.map(lambda v: v * 2)"]
    pfor = Config(sites={"train.py:3": SiteConfig(vectorize="vectorized_map")})
    ((_, after),) = rewrite_sources(script, pfor).values()
    assert after.splitlines()[2] == (
        "z = src.batch(8).map(lambda *b: tf.vectorized_map(lambda e: (f)(*e), b))"
    )


def test_a_map_is_made_over_batches_where_it_runs_no_python_and_draws_nothing() -> None:
    pure = PipelineStage("map", "train.py:20", elements=2000)
    found, rows = consider((SRC, pure, BATCH), LOOP_GRAPH)
    assert [(c.param, c.value) for c in found if c.kind is RewriteKind.VECTORIZE] == [
        ("train.py:20/vectorize", "batch"),
        ("train.py:20/vectorize", "vectorized_map"),
    ]
    _, rows = consider((SRC, TOKENIZE, BATCH), LOOP_GRAPH)
    assert [r.state for r in rows if r.kind is RewriteKind.VECTORIZE] == [
        RewriteState.NOT_APPLICABLE
    ]
    _, rows = consider((SRC, AUGMENT, BATCH), LOOP_GRAPH)
    (row,) = [r for r in rows if r.kind is RewriteKind.VECTORIZE]
    assert row.state is RewriteState.REFUSED and "RandomUniform" in row.reason


def test_a_flat_map_over_files_is_read_as_an_interleave(tmp_path: Path) -> None:
    files = PipelineStage("source", None, elements=20)
    read = PipelineStage("flat_map", "train.py:5", reader=True, elements=-2)
    other = PipelineStage("flat_map", "train.py:6", elements=-2)  # no reader inside
    found, _ = consider((files, read, other), LOOP_GRAPH)
    (c,) = [c for c in found if c.kind is RewriteKind.FILES]
    assert c.param == "train.py:5/files_at_once" and c.choices == (None, 2, 4, 8, 16, -1)
    assert c.config().site("train.py:5") == SiteConfig(files_at_once=4)
    script = tmp_path / "train.py"
    script.write_text("ds = files.flat_map(tf.data.TFRecordDataset)\n")
    config = Config(sites={"train.py:1": SiteConfig(files_at_once=-1)})
    ((_, after),) = rewrite_sources(script, config).values()
    assert after == (
        "ds = files.interleave(tf.data.TFRecordDataset, cycle_length=tf.data.AUTOTUNE, "
        "num_parallel_calls=tf.data.AUTOTUNE)\n"
    )


def test_batches_prefetched_to_a_gpu_are_searched_on_a_gpu_and_advice_on_a_cpu() -> None:
    from tftune.tuner.fixes.rewrites import consider_device

    (c,), rows = consider_device(LOOP_EAGER, gpu=True)
    assert rows == [] and c.config() == Config(prefetch_to_device=True)
    found, (row,) = consider_device(LOOP_EAGER, gpu=False)
    assert found == [] and row.state is RewriteState.NOT_APPLICABLE
    assert row.reason.startswith("advice only") and "prefetch_to_device" in row.reason
    assert consider_device(LOOP_FIT, gpu=True) == ([], [])  # Keras places its batches
    data = Config(prefetch_to_device=True).to_json()
    assert data["prefetch_to_device"] is True and config_from_json(data).prefetch_to_device


def test_a_filter_after_a_map_is_moved_above_it_and_never_above_a_random_one(
    tmp_path: Path,
) -> None:
    decode = PipelineStage("map", "train.py:2", elements=2000)
    keep = PipelineStage("filter", "train.py:3", elements=-2)
    found, _ = consider((SRC, decode, keep), LOOP_GRAPH)
    (c,) = [c for c in found if c.kind is RewriteKind.FILTER]
    assert c.param == "train.py:3/filter_first" and c.crosses == ("train.py:2",)
    _, rows = consider((SRC, AUGMENT, PipelineStage("filter", "train.py:25")), LOOP_GRAPH)
    (row,) = [r for r in rows if r.kind is RewriteKind.FILTER]
    assert row.state is RewriteState.REFUSED and "never moved above a random map" in row.reason
    script = tmp_path / "train.py"
    script.write_text("ds = src\nds = ds.map(decode)\nds = ds.filter(lambda x, y: y > 0)\n")
    config = Config(sites={"train.py:3": SiteConfig(filter_first=True)})
    ((_, after),) = rewrite_sources(script, config).values()
    assert after.splitlines() == [
        "ds = src",
        "ds = ds.filter(lambda x, y: y > 0)",
        "ds = ds.map(decode)",
    ]
