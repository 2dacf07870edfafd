"""`json_text`: the text of every JSON file tftune writes, byte for byte what
`json.dumps(data, indent=1)` and a newline would be, whatever the data's shape."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tftune.core.userfiles import JsonRows, json_text

ODD_SCALARS: list[Any] = [
    0,
    -5,
    2**70,
    1.5,
    1e-7,
    1e300,
    -0.0,
    float("nan"),
    float("inf"),
    True,
    False,
    None,
    "",
    "a}",
    "},\n {",
    '"]',
    'é\u2028"\\\t',
    "\x00",
]
SHAPES: list[Any] = [
    {},
    [],
    {"a": {}, "b": [], "c": [{}], "d": [[]]},
    [{"x": 1}, {"x": 2.5, "y": None}],  # a table of dicts
    [[1, 2], [3], ["},\n  [", 4]],  # a table of lists
    [{"x": 1}, {}, {"y": 2}],  # an empty row: not a table
    [{"x": 1}, [2]],  # mixed rows
    [{"x": {"deep": [1, {"z": "}"}]}}],
    {7: "a", 2.5: "b", True: "c", None: "d", "s": [{1: 2}]},  # keys json converts
    ({"t": (1, 2)}, (3, (4,))),  # tuples are lists
    "just a string",
    3.25,
]


@pytest.mark.parametrize("data", SHAPES + ODD_SCALARS)
def test_the_same_text_as_json_dumps(data: Any) -> None:
    assert json_text(data) == json.dumps(data, indent=1) + "\n"


def _random(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 4 or r < 0.35:
        return rng.choice(ODD_SCALARS)
    width = rng.randint(0, 4)
    if r < 0.55:
        return [_random(rng, depth + 1) for _ in range(width)]
    if r < 0.7:  # rows of scalars: the table path
        return [
            {f"k{i}": rng.choice(ODD_SCALARS) for i in range(rng.randint(0, 3))}
            for _ in range(width)
        ]
    if r < 0.8:
        return [[rng.choice(ODD_SCALARS) for _ in range(rng.randint(0, 3))] for _ in range(width)]
    keys: list[Any] = ["a", "b}", "{c", "", 1, 2.5, None]
    return {rng.choice(keys): _random(rng, depth + 1) for _ in range(width)}


def test_random_documents() -> None:
    rng = random.Random(39)
    for _ in range(3000):
        data = _random(rng)
        assert json_text(data) == json.dumps(data, indent=1) + "\n"


def test_what_json_cannot_encode_fails_as_json_does() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text({"a": [{"b": object()}]})
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text([{"b": 1}, {"b": {1, 2}}])


def _plain(data: Any) -> Any:
    """`data` with each `JsonRows` as the list of objects it stands for."""
    if isinstance(data, JsonRows):
        return list(data)
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(v) for v in data]
    return data


def test_rows_held_as_columns_write_as_their_objects() -> None:
    """A `JsonRows` is written as `json.dumps` writes its objects, at any depth, with
    keys and values that look like the layout's own text (braces, quotes, newlines)."""
    rng = random.Random(40)
    keys = ("step", "a}", "{b}", '"c"', "é", "")
    for _ in range(300):
        n, k = rng.randint(0, 5), rng.randint(1, len(keys))
        rows = JsonRows(
            keys[:k], tuple([rng.choice(ODD_SCALARS) for _ in range(n)] for _ in range(k))
        )
        data = rng.choice([rows, {"per_step": rows, "x": 1}, [rows, {"t": [rows]}]])
        assert json_text(data) == json.dumps(_plain(data), indent=1) + "\n"


def test_columns_of_one_value_write_as_their_objects() -> None:
    """A column whose values are all equal is encoded once, unless they differ in text:
    0.0 and -0.0, 0 and 0.0 and False, NaNs."""
    rng = random.Random(41)
    alike = [0.0, -0.0, 0, False, 1, 1.0, True, float("nan"), "0", None, 2.5]
    for _ in range(400):
        n = rng.randint(1, 6)
        pool = rng.sample(alike, rng.randint(1, 2))
        columns = tuple(tuple(rng.choice(pool) for _ in range(n)) for _ in range(rng.randint(1, 3)))
        rows = JsonRows(("a", "b", "c")[: len(columns)], columns)
        assert (
            json_text({"per_step": rows}) == json.dumps(_plain({"per_step": rows}), indent=1) + "\n"
        )


def test_rows_read_as_the_objects_they_hold() -> None:
    rows = JsonRows(("a", "b"), ((1, 2, 3), ("x", None, 2.5)))
    objects = [{"a": 1, "b": "x"}, {"a": 2, "b": None}, {"a": 3, "b": 2.5}]
    assert len(rows) == 3 and list(rows) == objects and rows == objects
    assert rows[1] == objects[1] and rows[-1] == objects[-1] and rows[:2] == objects[:2]
    assert rows != objects[:2] and bool(JsonRows((), ())) is False
    with pytest.raises(ValueError, match="one column per key"):
        JsonRows(("a", "b"), ((1, 2), (3,)))
