"""Which stream is training (`tuner/child/roles.py`), from fetches and updates as the patches
report them: real TensorFlow for the traced cases, no script."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from tftune.core.vocabulary import FALLBACK_HOW  # noqa: E402
from tftune.tuner.child.roles import Roles  # noqa: E402


def _roles(**kwargs: float) -> tuple[Roles, list[tuple[int, str]]]:
    declared: list[tuple[int, str]] = []
    return Roles(on_training=lambda n, how: declared.append((n, how)), **kwargs), declared


def test_a_counting_loop_and_a_peek_before_training_are_not_training() -> None:
    roles, declared = _roles()
    for _ in range(100):
        roles.eager_fetch(1)  # count the dataset
    roles.eager_fetch(3)  # peek a batch of another
    for _ in range(3):
        roles.eager_fetch(2)
        roles.update()
    assert [n for n, _ in declared] == [2]
    assert roles.training == {2}


def test_validation_between_epochs_is_not_training() -> None:
    roles, declared = _roles()
    for _epoch in range(4):
        for _ in range(5):
            roles.eager_fetch(1)
            roles.update()
        for _ in range(3):
            roles.eager_fetch(2)  # a validation pass: no update
    assert [n for n, _ in declared] == [1]


def test_two_optimizers_per_step_and_two_streams_that_both_train() -> None:
    roles, declared = _roles()
    for _ in range(3):
        roles.eager_fetch(1)
        roles.eager_fetch(2)
        roles.update()  # the discriminator's optimizer
        roles.update()  # the generator's: nothing fetched since, changes nothing
    assert sorted(n for n, _ in declared) == [1, 2]


def test_fetch_and_update_traced_in_one_function_declare_at_trace_time() -> None:
    roles, declared = _roles()
    variable = tf.Variable(1.0)

    @tf.function
    def train_epoch() -> tf.Tensor:
        roles.graph_fetch(5)  # as the patched get-next does while tracing
        variable.assign_sub(0.1)
        roles.update()
        return variable.read_value()

    concrete = train_epoch.get_concrete_function()
    assert concrete is not None
    assert declared == [(5, "fetched and updated in one tf.function")]


def test_an_eager_fetch_then_a_tf_function_that_updates() -> None:
    roles, declared = _roles()
    variable = tf.Variable(1.0)
    function = tf.function(lambda x: (variable.assign_sub(x), roles.update())[0])
    # What the patcher does to tf.function's __call__, on this one object.
    call = roles.wrap_call(type(function).__call__)
    predict = tf.function(lambda x: x * 2.0)
    for _ in range(3):
        roles.eager_fetch(9)  # validation: predicted on, never updated
        call(predict, tf.constant(1.0))
    assert declared == []
    for _ in range(2):
        roles.eager_fetch(7)
        call(function, tf.constant(0.1))
    assert [n for n, _ in declared] == [7]


def test_the_busiest_loop_stands_in_only_when_nothing_updates() -> None:
    roles, declared = _roles(fallback_s=0.0)
    roles.delivered(1, 3)
    roles.delivered(2, 40)
    roles.check_fallback()
    assert declared == [(2, FALLBACK_HOW)]

    roles, declared = _roles(fallback_s=0.0)
    roles.update()  # eagerly, with nothing fetched: still an update in this process
    roles.delivered(2, 40)
    roles.check_fallback()
    assert declared == []

    roles, declared = _roles()  # no fallback unless asked for
    roles.delivered(2, 40)
    roles.check_fallback()
    assert declared == []

    roles, declared = _roles(fallback_s=0.0)
    roles.expect_training()  # Keras fit was called, or a tape entered: training comes
    roles.delivered(2, 40)
    roles.check_fallback()
    assert declared == []
