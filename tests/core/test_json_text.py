"""`json_text`: the text of every JSON file tftune writes, byte for byte what
`json.dumps(data, indent=1)` and a newline would be, whatever the data's shape."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tftune.core.userfiles import json_text

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
