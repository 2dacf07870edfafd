"""`StepTable`: the analysis document's `per_step`, column by column, reads and writes as
the tuple of `StepRow`s it stands for."""

from __future__ import annotations

import pytest

from tftune.core.analysis_steps import StepRow, StepTable, steps_json

table = StepTable(
    step=(4, 5, 6),
    start_ms=(0.5, 10.5, None),
    duration_ms=(10.0, 9.25, None),
    parts=(("input_wait", (8.0, 0.125, None)), ("other", (2.0, 9.125, None))),
    host_to_device_bytes=(None, 12, None),
)
rows = tuple(
    StepRow(s, t, d, (("input_wait", w), ("other", o)), b)
    for s, t, d, w, o, b in [
        (4, 0.5, 10.0, 8.0, 2.0, None),
        (5, 10.5, 9.25, 0.125, 9.125, 12),
        (6, None, None, None, None, None),
    ]
)


def test_a_table_is_its_rows() -> None:
    assert len(table) == 3 and table == rows and rows == table
    assert tuple(table) == rows and table[1] == rows[1] and table[-1] == rows[-1]
    assert table != rows[:2] and table != rows[::-1]
    assert hash(table) == hash(rows)


def test_a_slice_is_a_table_of_those_rows() -> None:
    head = table[:2]
    assert isinstance(head, StepTable) and head == rows[:2]
    assert table[::2] == rows[::2] and table[5:] == ()


def test_its_json_is_the_rows_json() -> None:
    assert table.to_json() == [r.to_json() for r in rows] == steps_json(table)
    assert list(table.to_json()[0]) == [
        "step",
        "start_ms",
        "duration_ms",
        "input_wait_ms",
        "other_ms",
        "host_to_device_bytes",
    ]
    no_parts = StepTable((1,), (0.0,), (1.0,), (), (None,))
    assert no_parts.to_json() == [StepRow(1, 0.0, 1.0, (), None).to_json()]


def test_columns_of_different_lengths_are_refused() -> None:
    ragged = StepTable((1, 2), (0.0, 1.0), (1.0,), (), (None, None))
    with pytest.raises(ValueError, match="one value per step"):
        ragged.to_json()


def test_its_rows_held_as_columns_are_its_json() -> None:
    """What `tftune analyze --json` writes: the table's own columns, the same objects."""
    from tftune.core.analysis_steps import steps_rows

    held = steps_rows(table)
    assert held == table.to_json() and list(held) == table.to_json()
    assert steps_rows(rows) == table.to_json()  # rows read back: a plain list
    with pytest.raises(ValueError, match="one value per step"):
        StepTable((1, 2), (0.0, 1.0), (1.0,), (), (None, None)).json_rows()
