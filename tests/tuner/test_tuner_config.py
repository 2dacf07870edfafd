"""Config files: round trip, AUTOTUNE spelling, one-line errors naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tftune.core.errors import ConfigError, UserError
from tftune.tuner.searchspace.config import (
    AUTOTUNE,
    Config,
    SiteConfig,
    config_from_json,
    load_config,
    save_config,
    unknown_sites,
)


def _full() -> Config:
    return Config(
        sites={
            "train.py:42": SiteConfig(num_parallel_calls=AUTOTUNE, batch_size=64),
            "data/io.py:7": SiteConfig(cycle_length=4, buffer_size=AUTOTUNE),
        },
        threadpool_size=32,
        deterministic=False,
        mixed_precision="mixed_bfloat16",
        final_prefetch=AUTOTUNE,
        meta={"examples_per_s": 7400.0},
    )


def test_round_trip_and_autotune_spelling(tmp_path: Path) -> None:
    path = save_config(_full(), tmp_path / "best.json")
    raw = json.loads(path.read_text())
    assert raw["sites"]["train.py:42"] == {"num_parallel_calls": "AUTOTUNE", "batch_size": 64}
    assert raw["final_prefetch"] == "AUTOTUNE"
    assert load_config(path) == _full()
    assert [p.name for p in tmp_path.iterdir()] == ["best.json"]  # no temp file left


def test_empty_config_is_as_written() -> None:
    assert Config().is_as_written()
    assert config_from_json({}) == Config()
    assert not _full().is_as_written()


def test_save_is_atomic_when_serialization_fails(tmp_path: Path) -> None:
    path = save_config(_full(), tmp_path / "best.json")
    before = path.read_text()
    broken = Config(meta={"x": object()})  # not JSON-serializable
    with pytest.raises(TypeError):
        save_config(broken, path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["best.json"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"sites": {"train.py:3": {"batch_size": "AUTOTUNE"}}}, "batch_size"),
        ({"sites": {"train.py:3": {"num_parallel_calls": 0}}}, "num_parallel_calls"),
        ({"sites": {"train.py:3": {"num_parallel_calls": True}}}, "num_parallel_calls"),
        ({"sites": {"train.py:3": {"use_multiprocessing": 1}}}, "use_multiprocessing"),
        ({"sites": {"train.py:3": {"paralel": 3}}}, "paralel"),
        ({"sites": {"train.py": {"batch_size": 3}}}, "train.py"),
        ({"sites": []}, "sites"),
        ({"threadpool_size": "many"}, "threadpool_size"),
        ({"deterministic": "yes"}, "deterministic"),
        ({"mixed_precision": "fp8"}, "mixed_precision"),
        ({"schema": 2}, "schema"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_malformed_names_file_and_field(tmp_path: Path, data: object, field: str) -> None:
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and field in message
    assert "\n" not in message
    assert isinstance(info.value, UserError)


@pytest.mark.parametrize("content", ["", "{", "[1, 2]", "\xff\xfe"])
def test_unreadable_json_is_one_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cfg.json"
    path.write_text(content, encoding="latin-1")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="directory"):
        load_config(tmp_path)


def test_unwritable_destination(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot write"):
        save_config(Config(), tmp_path / "no" / "such" / "dir" / "best.json")


def test_unknown_sites_are_named() -> None:
    assert unknown_sites(_full(), {"train.py:42"}) == ["data/io.py:7"]
