"""The search space of `tftune optimize`, built from discovery records (pure, no TF)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tftune.core.errors import ConfigError
from tftune.tuner.searchspace.config import AUTOTUNE, Config, SiteConfig, config_from_json
from tftune.tuner.searchspace.platform import cpu_flags, platform_policy
from tftune.tuner.searchspace.space import SearchSpace
from tftune.tuner.searchspace.space_build import BATCH_SIZE_WARNING, BatchBound, build_space
from tftune.tuner.searchspace.space_file import apply_space_file
from tftune.tuner.trial.discovery import CallSite


def site(key: str, op: str, **written: int | bool) -> CallSite:
    return CallSite(key, op, (), SiteConfig(**written), None, 1)


MAP = site("train.py:10", "map")
INTERLEAVE = site("train.py:8", "interleave", cycle_length=4)
BATCH = site("train.py:11", "batch", batch_size=32)
PREFETCH = site("train.py:12", "prefetch", buffer_size=2)
PY_DATASET = site(
    "data.py:9", "PyDataset", num_parallel_calls=1, use_multiprocessing=False, buffer_size=10
)


def test_map_site_gets_parallelism_and_threadpool() -> None:
    space = build_space([MAP, BATCH], cores=2)
    par = space.knob("train.py:10/num_parallel_calls")
    assert set(par.choices) == {1, 2, 4, 8, 16, 32, 64, AUTOTUNE}
    assert par.as_written == 1  # no num_parallel_calls passed: sequential
    tp = space.knob("threadpool_size")
    assert None in tp.choices and max(c for c in tp.choices if c is not None) == 64
    assert space.knob("train.py:11/batch_size").choices == (16, 32, 64, 128)
    assert BATCH_SIZE_WARNING in space.warnings
    # no prefetch anywhere: the final prefetch is searched
    assert AUTOTUNE in space.knob("final_prefetch").choices


def test_threadpool_left_out_when_nothing_is_parallel() -> None:
    space = build_space([BATCH, PREFETCH], cores=4)
    assert "threadpool_size" not in space.names
    reasons = {lo.name: lo.reason for lo in space.left_out}
    assert "nothing runs in parallel" in reasons["threadpool_size"]
    assert "final_prefetch" in reasons  # the script prefetches itself
    assert "train.py:12/buffer_size" in space.names


def test_interleave_gets_cycle_length_with_the_written_value() -> None:
    space = build_space([INTERLEAVE], cores=2)
    cyc = space.knob("train.py:8/cycle_length")
    assert cyc.as_written == 4 and AUTOTUNE in cyc.choices
    assert "train.py:8/num_parallel_calls" in space.names


def test_interleave_parallelism_is_capped_at_a_fixed_cycle_length() -> None:
    """TF refuses `num_parallel_calls` above a fixed `cycle_length` (InvalidArgumentError
    when the pipeline starts): such a sample runs, and is described, at the cycle
    length. A cycle length of AUTOTUNE is the core count to TF (measured: 3 calls under
    an AUTOTUNE cycle fail on 2 cores); AUTOTUNE calls are left alone."""
    space = build_space([INTERLEAVE], cores=2)
    par, cyc = "train.py:8/num_parallel_calls", "train.py:8/cycle_length"
    assert space.config({par: 8, cyc: 2}).sites["train.py:8"] == SiteConfig(
        num_parallel_calls=2, cycle_length=2
    )
    assert space.config({par: 16}).sites["train.py:8"] == SiteConfig(num_parallel_calls=4)
    assert space.describe({par: 16}) == "train.py:8 parallel calls 4"
    assert space.config({par: AUTOTUNE, cyc: 2}).sites["train.py:8"].num_parallel_calls == AUTOTUNE
    assert space.config({par: 8, cyc: AUTOTUNE}).sites["train.py:8"].num_parallel_calls == 2
    assert space.describe({par: 8, cyc: AUTOTUNE}) == (
        "train.py:8 parallel calls 2, train.py:8 cycle length AUTOTUNE"
    )


def test_a_py_dataset_gets_workers_processes_and_queue() -> None:
    """A Keras PyDataset's knobs, its defaults as written; its workers are not tf.data
    threads, so the thread pool is not searched for it."""
    space = build_space([PY_DATASET], cores=2)
    workers = space.knob("data.py:9/num_parallel_calls")
    assert workers.as_written == 1 and workers.choices == (1, 2, 4, 8, 16, 32)
    assert space.knob("data.py:9/use_multiprocessing").choices == (False, True)
    queue = space.knob("data.py:9/buffer_size")
    assert queue.as_written == 10 and {1, 64} <= set(queue.choices)
    assert "threadpool_size" not in space.names
    config = space.config(
        {
            **space.as_written_params(),
            "data.py:9/num_parallel_calls": 8,
            "data.py:9/use_multiprocessing": True,
        }
    )
    assert config.sites == {"data.py:9": SiteConfig(num_parallel_calls=8, use_multiprocessing=True)}
    assert config_from_json(json.loads(json.dumps(config.to_json()))) == config
    assert space.describe(
        {"data.py:9/num_parallel_calls": 8, "data.py:9/use_multiprocessing": True}
    ) == ("data.py:9 parallel calls 8, data.py:9 processes on")


def test_duplicate_sites_are_one_knob() -> None:
    space = build_space([MAP, MAP], cores=2)
    assert space.names.count("train.py:10/num_parallel_calls") == 1


@pytest.mark.parametrize(
    ("gpu", "flags", "uses_keras", "expected"),
    [
        (False, {"avx2"}, True, None),
        (False, {"avx512_bf16"}, True, "mixed_bfloat16"),
        (False, {"amx_bf16"}, True, "mixed_bfloat16"),
        (True, set(), True, "mixed_float16"),
        (False, {"avx512_bf16"}, False, None),
    ],
)
def test_mixed_precision_only_where_the_platform_has_a_fast_16_bit_type(
    gpu: bool, flags: set[str], uses_keras: bool, expected: str | None
) -> None:
    space = build_space([MAP], cores=2, gpu_visible=gpu, flags=flags, uses_keras=uses_keras)
    if expected is None:
        assert "mixed_precision" not in space.names
        assert any(lo.name == "mixed_precision" for lo in space.left_out)
    else:
        assert space.knob("mixed_precision").choices == (None, expected)


def test_platform_policy_reason_mentions_the_cpu_flags() -> None:
    policy, why = platform_policy(False, ["avx512_bf16", "sse"])
    assert policy == "mixed_bfloat16" and "avx512_bf16" in why


def test_cpu_flags_reads_the_flags_line(tmp_path: Path) -> None:
    f = tmp_path / "cpuinfo"
    f.write_text("processor : 0\nflags : fpu avx512_bf16 amx_bf16\n")
    assert {"avx512_bf16", "amx_bf16"} <= cpu_flags(f)
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_as_written_params_give_the_unchanged_config() -> None:
    space = build_space([INTERLEAVE, MAP, BATCH, PREFETCH], cores=2, flags={"avx512_bf16"})
    config = space.config(space.as_written_params())
    assert config == Config()
    assert config.is_as_written()


def test_params_for_picks_the_nearest_choice() -> None:
    space = build_space([MAP, BATCH], cores=2)
    params = space.params_for({"num_parallel_calls": 30, "threadpool_size": 30})
    assert params["train.py:10/num_parallel_calls"] == 32
    assert params["threadpool_size"] == 32
    assert params["train.py:11/batch_size"] == 32  # not named: as written
    cfg = space.config(params)
    assert cfg.sites["train.py:10"].num_parallel_calls == 32
    assert cfg.threadpool_size == 32
    assert "train.py:11" not in cfg.sites  # unchanged knobs stay None


def test_batch_size_fixed_and_bounded() -> None:
    fixed = build_space([MAP, BATCH], cores=2, batch=BatchBound.parse("64"))
    assert "train.py:11/batch_size" not in fixed.names
    assert fixed.fixed["train.py:11/batch_size"] == 64
    assert fixed.config({}).sites["train.py:11"].batch_size == 64
    assert BATCH_SIZE_WARNING not in fixed.warnings
    bounded = build_space([MAP, BATCH], cores=2, batch=BatchBound.parse("16:64"))
    assert bounded.knob("train.py:11/batch_size").choices == (16, 32, 64)
    upper = BatchBound.parse("32:")
    assert upper.lo == 32 and upper.hi > 1000
    for bad in ("x", "0", "64:16"):
        with pytest.raises(ConfigError, match="--batch-size"):
            BatchBound.parse(bad)


def test_grid_enumerates_the_product_of_choices() -> None:
    space = build_space([MAP], cores=2)
    grid = list(space.grid())
    assert len(grid) == space.size() == math.prod(len(k.choices) for k in space.knobs)
    assert len({json.dumps(g, sort_keys=True) for g in grid}) == len(grid)


def _write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "space.json"
    p.write_text(json.dumps(data))
    return p


def test_space_file_narrows_fixes_removes_and_extends(tmp_path: Path) -> None:
    base = build_space([MAP, BATCH], cores=2, flags={"avx512_bf16"})
    f = _write(
        tmp_path,
        {
            "knobs": {
                "train.py:10/num_parallel_calls": [8, 16, "AUTOTUNE"],
                "threadpool_size": 32,
                "mixed_precision": None,
                "deterministic": [True, False],
            }
        },
    )
    space = apply_space_file(base, f, {"train.py:10", "train.py:11"})
    par = space.knob("train.py:10/num_parallel_calls")
    assert set(par.choices) == {8, 16, AUTOTUNE, 1}  # as written stays reachable
    assert space.fixed["threadpool_size"] == 32 and "threadpool_size" not in space.names
    assert "mixed_precision" not in space.names
    assert space.knob("deterministic").choices[:2] == (True, False)
    cfg = space.config({"train.py:10/num_parallel_calls": 16, "deterministic": False})
    assert cfg.threadpool_size == 32 and cfg.deterministic is False


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"knobs": []}', "expected"),
        ('{"knobs": {"nope": [1, 2]}}', "unknown knob"),
        ('{"knobs": {"other.py:3/num_parallel_calls": [1, 2]}}', "was not found"),
        ('{"knobs": {"threadpool_size": ["AUTOTUNE", 2]}}', "integer"),
        ('{"knobs": {"train.py:10/num_parallel_calls": [0]}}', "integer in 1.."),
        ('{"knobs": {"train.py:10/num_parallel_calls": []}}', "empty"),
        ('{"knobs": {}, "extra": 1}', "unknown field"),
    ],
)
def test_malformed_space_file_names_the_file(tmp_path: Path, content: str, match: str) -> None:
    f = tmp_path / "space.json"
    f.write_text(content)
    base = build_space([MAP], cores=2)
    with pytest.raises(ConfigError, match=match) as err:
        apply_space_file(base, f, {"train.py:10"})
    assert str(f) in str(err.value)


def test_missing_space_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        apply_space_file(build_space([MAP], cores=2), tmp_path / "nope.json", set())


SPACE: SearchSpace = build_space(
    [INTERLEAVE, MAP, BATCH, PREFETCH, PY_DATASET], cores=2, gpu_visible=True, uses_keras=True
)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_sampled_config_survives_the_config_file(data: st.DataObject) -> None:
    params = {k.name: data.draw(st.sampled_from(k.choices)) for k in SPACE.knobs}
    config = SPACE.config(params)
    assert config_from_json(json.loads(json.dumps(config.to_json()))) == config
    params = SPACE.feasible(params)  # (an interleave's calls capped at its cycle length)
    for k in SPACE.knobs:  # what was sampled is what the config says
        if params[k.name] == k.as_written:
            continue
        if k.site is None:
            assert getattr(config, k.field) == params[k.name]
        else:
            assert getattr(config.sites[k.site], k.field) == params[k.name]


def test_mentions_keras_follows_the_scripts_own_imports(tmp_path: Path) -> None:
    from tftune.tuner.searchspace.platform import mentions_keras

    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    (tmp_path / "other_script.py").write_text("import keras\n")  # a sibling, not imported
    assert not mentions_keras(tmp_path / "train.py")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "net.py").write_text("from tensorflow import keras\n")
    (tmp_path / "train.py").write_text("import tensorflow as tf\nfrom models.net import build\n")
    assert mentions_keras(tmp_path / "train.py")


def test_a_batch_outside_the_training_pipeline_is_not_searched() -> None:
    """A test set's own batch call (a validation pipeline) is no knob of training: its
    batch size is left out, with the reason; the training pipeline's is searched."""
    from tftune.tuner.searchspace.space_build import NOT_TRAINING_BATCH

    train, test = (
        site("train.py:20", "batch", batch_size=64),
        site("train.py:21", "batch", batch_size=64),
    )
    space = build_space(
        [MAP, train, test], cores=2, training_sites=frozenset({MAP.site, train.site})
    )
    names = {k.name for k in space.knobs}
    assert "train.py:20/batch_size" in names and "train.py:21/batch_size" not in names
    assert ("train.py:21/batch_size", NOT_TRAINING_BATCH) in {
        (lo.name, lo.reason) for lo in space.left_out
    }
    unknown = build_space([MAP, train, test], cores=2)  # no lineage known: both searched
    assert {"train.py:20/batch_size", "train.py:21/batch_size"} <= {k.name for k in unknown.knobs}


def test_a_site_only_other_datasets_are_built_through_is_not_searched() -> None:
    """An ``adapt`` sample's own map (``ds.take(2).map(f)`` before ``fit``) and a
    validation set's map cannot change the training rate: none of their knobs is searched,
    each said; a site on no lineage (inside an interleave's function) stays."""
    from tftune.tuner.searchspace.space_build import NOT_TRAINING_SITE

    adapt = site("train.py:30", "map")
    inner = site("train.py:31", "map")
    space = build_space(
        [MAP, adapt, inner],
        cores=2,
        training_sites=frozenset({MAP.site}),
        elsewhere_sites=frozenset({adapt.site}),
    )
    names = {k.name for k in space.knobs}
    assert f"{MAP.site}/num_parallel_calls" in names
    assert "train.py:31/num_parallel_calls" in names
    assert "train.py:30/num_parallel_calls" not in names
    assert ("train.py:30/num_parallel_calls", NOT_TRAINING_SITE) in {
        (lo.name, lo.reason) for lo in space.left_out
    }
