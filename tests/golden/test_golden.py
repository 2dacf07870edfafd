"""Golden files: what tftune writes for fixed inputs, compared byte for byte.

The cases and how each file is made are in golden_cases.py; tests/golden/README.md says
why and how to add one. A difference fails with the file, its first differing line and
the command that regenerates the files on purpose. No TensorFlow: the traces are built
by hand, the study is replayed over fixed measurements, and every case renders in well
under a second.
"""

from __future__ import annotations

import functools

import golden_cases as g
import pytest

PARAMS = [pytest.param(c, name, id=f"{c.name}/{name}") for c in g.CASES for name in g.files_of(c)]


@functools.cache
def rendered(name: str) -> dict[str, bytes]:
    """A case's files as tftune writes them now (rendered once per test session)."""
    case = next(c for c in g.CASES if c.name == name)
    return {file: text.encode("utf-8") for file, text in g.render(case).items()}


def _shown(path: object) -> str:
    return str(path).removeprefix(str(g.GOLDEN.parents[1]) + "/")


@pytest.mark.parametrize(("case", "name"), PARAMS)
def test_output_matches_its_golden_file(case: g.Case, name: str) -> None:
    path = g.golden_path(case, name)
    actual = rendered(case.name)[name]
    if not path.is_file():
        pytest.fail(f"{_shown(path)} is missing; write it with: {g.REGEN_COMMAND}", pytrace=False)
    expected = path.read_bytes()
    if actual != expected:
        pytest.fail(
            f"{_shown(path)} differs from what tftune writes now (case: {case.why}).\n"
            f"{g.first_difference(expected, actual)}\n"
            "If the change is intended, regenerate the golden files and review the diff:\n"
            f"    {g.REGEN_COMMAND}",
            pytrace=False,
        )


def test_no_golden_file_is_left_without_a_case() -> None:
    """A file no case writes any more would never be checked again: it must go."""
    wanted = {g.golden_path(c, name) for c in g.CASES for name in g.files_of(c)}
    found = {p for p in g.GOLDEN.glob("*/*") if p.name in g.ALL_FILES}
    stale = sorted(_shown(p) for p in found - wanted)
    assert not stale, f"golden files no case writes: {stale}; remove them: {g.REGEN_COMMAND}"
