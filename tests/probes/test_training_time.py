"""Training time from step records: other passes out, epoch stalls spread, drained
buffers trimmed (`probes.live.training_time`), on handwritten timelines."""

from __future__ import annotations

import pytest

from tftune.core.errors import UserError
from tftune.core.training import TrainingTime
from tftune.probes.live.clock import StepRecord
from tftune.probes.live.clock_events import EpochStart, decode_event
from tftune.probes.live.training_record import training_time_of
from tftune.probes.live.training_time import (
    PassTimeline,
    drained_prefix,
    dry_steps,
    first_window_drained,
    pooled_rates,
)

MS = 1_000_000


def _steps(
    start_ns: int, n: int, step_ms: float, wait_ms: float, batch: int = 8, stream: int = 1
) -> list[StepRecord]:
    """`n` steady steps after `start_ns`: each waits `wait_ms` for its element, then the
    step's own work fills the rest of `step_ms`."""
    out, t = [], start_ns
    for _ in range(n):
        deliver = t + int(step_ms * MS)
        out.append(StepRecord(stream, deliver - int(wait_ms * MS), deliver, batch))
        t = deliver
    return out


def test_a_validation_pass_between_steps_is_not_training_time() -> None:
    train = _steps(0, 10, 10, 1)
    # After step 5 (delivered at 50 ms) the last step's own work takes 3 ms, then the
    # loop validates for 2 s (20 elements of 100 ms), then asks for training again.
    val = _steps(train[4].deliver_ns + 3 * MS, 20, 100, 100, stream=2)
    shift = 2_003 * MS
    after = [StepRecord(1, r.request_ns + shift, r.deliver_ns + shift, 8) for r in train[5:]]
    timeline = PassTimeline()
    for r in val:
        timeline.other(r)
    stats = timeline.window(0, [*train[:5], *after])
    assert stats is not None
    # Taken out: from the pass's first request to the next training request. The 3 ms
    # of the last step's own work before it and the next element's wait stay.
    taken = after[0].request_ns - val[0].request_ns
    assert taken == 2_009 * MS
    assert stats.excluded_s == pytest.approx(taken / 1e9)
    # 5 steps, 3 ms of own work, the 1-ms wait after the pass, 4 steps: 94 ms.
    assert stats.duration_s == pytest.approx(0.094)
    assert stats.examples_per_s == pytest.approx(80 / stats.duration_s)


def test_making_the_training_iterator_is_training_and_making_the_passs_is_not() -> None:
    # A custom loop: the last step's work (3 ms), making the test iterator (150 ms), the
    # test pass (5 elements of 20 ms), 400 ms of the script's own printing and metric
    # resets, making the next epoch's training iterator (250 ms), its first element.
    last = StepRecord(1, 9 * MS, 10 * MS, 8)
    test_made = 13 * MS
    test = _steps(test_made + 150 * MS, 5, 20, 20, stream=2)
    train_made = test[-1].deliver_ns + 400 * MS
    first = StepRecord(1, train_made + 250 * MS, train_made + 251 * MS, 8)
    timeline = PassTimeline()
    for r in test:
        timeline.other(r)
    timeline.epoch(EpochStart(2, test_made, 5))
    timeline.epoch(EpochStart(1, train_made, 20))
    # Counted: 3 ms of work before the test iterator, 250 ms making the training
    # iterator and the first element's 1-ms wait.
    assert timeline.step_ns(last.deliver_ns, first) == 254 * MS
    # Without the iterators seen, the pass runs from its first request to the next one:
    # making the test iterator counts, making the training one does not.
    plain = PassTimeline()
    for r in test:
        plain.other(r)
    assert plain.step_ns(last.deliver_ns, first) == 3 * MS + 150 * MS + 1 * MS


def test_the_same_window_without_other_streams_counts_the_whole_gap() -> None:
    train = _steps(0, 5, 10, 1)
    late = StepRecord(1, 2_050 * MS, 2_051 * MS, 8)
    stats = PassTimeline().window(0, [*train, late])
    assert stats is not None and stats.excluded_s == 0.0
    assert stats.duration_s == pytest.approx(2.051)


def test_another_stream_still_running_at_the_next_request_is_not_taken_out() -> None:
    # A pass whose element is delivered after the next training request overlaps
    # training (another thread): nothing is taken out for it.
    train = _steps(0, 3, 10, 1)
    timeline = PassTimeline()
    timeline.other(StepRecord(2, 21 * MS, 40 * MS, 1))
    assert timeline.excluded_ns(train[1].deliver_ns, train[2]) == 0


def test_forgetting_a_stream_that_turned_out_to_train() -> None:
    timeline = PassTimeline()
    timeline.other(StepRecord(2, 11 * MS, 12 * MS, 1))
    rec = StepRecord(1, 30 * MS, 31 * MS, 8)
    assert timeline.step_ns(10 * MS, rec) == 2 * MS
    timeline.forget(2)
    assert timeline.step_ns(10 * MS, rec) == 21 * MS


def _epochs(
    n_epochs: int, per_epoch: int, stall_ms: float
) -> tuple[PassTimeline, list[StepRecord]]:
    """Epochs of `per_epoch` 10-ms steps; each epoch's first element waits `stall_ms`
    more (a shuffle buffer's fill)."""
    timeline, records, t = PassTimeline(), [], 0
    for _ in range(n_epochs):
        timeline.epoch(EpochStart(1, t, per_epoch))
        for i in range(per_epoch):
            wait = 1 + (stall_ms if i == 0 else 0)
            deliver = t + int((10 + (stall_ms if i == 0 else 0)) * MS)
            records.append(StepRecord(1, deliver - int(wait * MS), deliver, 8))
            t = deliver
    return timeline, records


def test_an_epoch_stall_is_spread_over_its_epoch_wherever_the_window_falls() -> None:
    timeline, records = _epochs(4, 20, 200)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None
    assert cost.steps_per_epoch == 20 and cost.epochs_seen == 4
    assert cost.stall_s == pytest.approx(0.2)
    # The whole epoch's rate: 20 steps of 8 examples in 0.2 s + 0.2 s of stall.
    whole = 160 / 0.4
    assert cost.share(0.010) == pytest.approx(0.5)
    # A window inside an epoch, and one across an epoch start, read the same figure.
    inside = timeline.window(records[21].deliver_ns, records[22:32], cost)
    across = timeline.window(records[34].deliver_ns, records[35:45], cost)
    assert inside is not None and across is not None
    assert inside.examples_per_s == pytest.approx(whole, rel=1e-6)
    assert across.examples_per_s == pytest.approx(whole, rel=1e-6)
    # Without the cost the window across the start reads the stall where it falls.
    raw = timeline.window(records[34].deliver_ns, records[35:45])
    assert raw is not None and raw.examples_per_s < 0.75 * whole


def test_the_first_epoch_alone_is_measured_by_its_first_wait() -> None:
    timeline, records = _epochs(1, 50, 300)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and cost.epochs_seen == 1
    assert cost.steps_per_epoch == 50  # from tf.data's cardinality
    assert cost.stall_s == pytest.approx(0.3)


def test_an_unknown_epoch_length_spreads_nothing() -> None:
    timeline = PassTimeline()
    timeline.epoch(EpochStart(1, 0, -2))
    records = _steps(0, 30, 10, 1)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and cost.steps_per_epoch is None and not cost.spread
    stats = timeline.window(records[4].deliver_ns, records[5:], cost)
    assert stats is not None and stats.duration_s == pytest.approx(0.25)


def test_another_streams_epochs_are_not_the_training_streams() -> None:
    timeline = PassTimeline()
    timeline.epoch(EpochStart(2, 0, 10))
    assert timeline.epoch_cost(1, _steps(0, 10, 10, 1)) is None


def test_a_drained_buffer_is_trimmed_from_an_input_bound_window() -> None:
    # 10 steps served from a full buffer (no wait, 2 ms each), then the consumer waits
    # for every element: production is one element per 10 ms.
    buffered = _steps(0, 10, 2, 0.01)
    dry = _steps(buffered[-1].deliver_ns, 30, 10, 8)
    stats = PassTimeline().window(0, [*buffered, *dry])
    assert stats is not None
    assert stats.drained_steps == 10
    assert stats.examples_per_s == pytest.approx(800.0)


def test_a_compute_bound_window_is_not_trimmed() -> None:
    steady = _steps(0, 30, 10, 0.01)
    stats = PassTimeline().window(0, steady)
    assert stats is not None and stats.drained_steps == 0 and stats.dry_share == 0.0


def test_dry_steps_and_prefixes() -> None:
    recs = [*_steps(0, 3, 10, 0.01), *_steps(30 * MS, 5, 10, 5)]
    dry = dry_steps(recs, [10 * MS] * len(recs))
    assert dry == [False] * 3 + [True] * 5
    assert drained_prefix(dry) == 3
    assert drained_prefix([True, False, True]) == 0  # opens dry: nothing drained
    assert drained_prefix([False, False, True]) == 0  # not input-bound
    assert drained_prefix([]) == 0


def test_a_first_window_that_never_waited_before_an_input_bound_one_is_drained() -> None:
    timeline = PassTimeline()
    first = timeline.window(0, _steps(0, 20, 2, 0.01))
    second = timeline.window(40 * MS, _steps(40 * MS, 20, 10, 8))
    assert first is not None and second is not None
    assert first_window_drained([first, second])
    assert not first_window_drained([second, second])
    assert not first_window_drained([first])


def test_a_runs_rate_pools_its_windows_time_not_their_rates() -> None:
    """Two windows of one epoch each, one with a 2.5-s epoch-start stall: the run's rate
    is their examples over their summed time (what the script's own epoch clock gives),
    not the mean of the two rates, which credits the fast epoch twice over."""
    timeline = PassTimeline()
    fast = timeline.window(0, _steps(0, 20, 75, 1, batch=30))  # 600 in 1.5 s
    stall = _steps(1500 * MS, 1, 2500, 2490, batch=30) + _steps(4000 * MS, 19, 75, 1, batch=30)
    slow = timeline.window(1500 * MS, stall)  # 600 in 3.925 s
    assert fast is not None and slow is not None
    examples_per_s, steps_per_s = pooled_rates([fast, slow])
    assert examples_per_s == pytest.approx(1200 / (1.5 + 3.925))
    assert steps_per_s == pytest.approx(40 / (1.5 + 3.925))
    assert examples_per_s < 0.85 * (fast.examples_per_s + slow.examples_per_s) / 2
    assert pooled_rates([fast]) == (fast.examples_per_s, fast.steps_per_s)


def test_training_time_round_trips_through_json() -> None:
    timeline, records = _epochs(3, 20, 100)
    cost = timeline.epoch_cost(1, records)
    t = training_time_of(cost, 0.010, 2.5, 12.25, False)
    assert t.steps_per_epoch == 20 and t.stall_share == pytest.approx(0.1 / 0.3, abs=5e-5)
    back = TrainingTime.from_json(t.to_json())
    assert back == t and back.to_json() == t.to_json()
    with pytest.raises(UserError, match=r"^training JSON: expected a JSON object, got null$"):
        TrainingTime.from_json(None)
    assert training_time_of(None, 0.01, 0.0, None, True).first_window_dropped


def test_an_epoch_cost_tells_the_iterators_making_from_the_first_elements_wait() -> None:
    """Each epoch's first step comes 300 ms late: 250 ms before it is asked for (making
    the iterator), then 50 ms of wait beyond a typical one."""
    timeline, records, t = PassTimeline(), [], 0
    for _ in range(5):
        timeline.epoch(EpochStart(1, t, 10))
        for i in range(10):
            made_ms, wait_ms = (250, 51) if i == 0 else (0, 1)
            request = t + (9 + made_ms) * MS
            records.append(StepRecord(1, request, request + wait_ms * MS, 8))
            t = request + wait_ms * MS
    cost = timeline.epoch_cost(1, records)
    assert cost is not None
    assert cost.stall_s == pytest.approx(0.300) and cost.made_s == pytest.approx(0.250)
    # A shuffle buffer's fill is all wait: nothing made.
    timeline, records = _epochs(4, 20, 200)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and cost.made_s == pytest.approx(0.0)


def test_windows_over_whole_epochs_take_the_runs_mean_stall_not_their_own() -> None:
    """An epoch's start that costs 40 ms, then 1 s, then 40 ms... (Keras fit between
    making the iterator and asking it for a batch): each window over whole epochs counts
    the run's mean stall, so two windows over different epochs read the same figure."""
    timeline, records, t = PassTimeline(), [], 0
    for e in range(7):
        timeline.epoch(EpochStart(1, t, 10))
        stall_ms = 1000 if e % 2 else 40
        for i in range(10):
            step_ms = 10 + (stall_ms if i == 0 else 0)
            deliver = t + step_ms * MS
            records.append(StepRecord(1, deliver - MS, deliver, 8))
            t = deliver
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and cost.steps_per_epoch == 10
    # Later epochs' starts but the second's: 40, 1000, 40, 1000, 40 ms.
    assert cost.stall_s == pytest.approx((3 * 0.040 + 2 * 1.0) / 5)
    epoch_s = 10 * 0.010 + cost.stall_s
    # Epoch 2 (a 40-ms start) alone, then epochs 3 and 4 (1 s, then 40 ms).
    one = timeline.window(records[19].deliver_ns, records[20:31], cost)
    two = timeline.window(records[29].deliver_ns, records[30:51], cost)
    assert one is not None and two is not None
    assert one.steps == 10 and two.steps == 20
    assert one.examples_per_s == pytest.approx(80 / epoch_s)
    assert two.examples_per_s == pytest.approx(one.examples_per_s)
    # Each start's own stall would read 80 / 0.14 and 160 / 1.24: 3.5x apart.
    assert one.input_wait_s == pytest.approx(cost.stall_s + 10 * 0.001)


def test_a_window_over_whole_epochs_reads_them_start_to_start() -> None:
    """Where a window holds an epoch's first step and the next one's, its figure is the
    whole epochs between them: however uneven the steps within an epoch (a buffer that
    fills slowly, then drains fast), nothing is trimmed nor spread."""
    timeline, records = PassTimeline(), []
    t = 0
    for _ in range(4):
        timeline.epoch(EpochStart(1, t, 10))
        for i in range(10):
            step_ms, wait_ms = (100, 95) if i == 0 else (20, 15) if i < 5 else (2, 0.01)
            deliver = t + step_ms * MS
            records.append(StepRecord(1, deliver - int(wait_ms * MS), deliver, 8))
            t = deliver
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and cost.steps_per_epoch == 10
    # A window from the middle of epoch 1 to the start of epoch 3: epochs 2 whole.
    stats = timeline.window(records[6].deliver_ns, records[7:31], cost)
    assert stats is not None and stats.steps == 20 and stats.drained_steps == 0
    epoch_s = (100 + 4 * 20 + 5 * 2) / 1000
    assert stats.duration_s == pytest.approx(2 * epoch_s)
    assert stats.examples_per_s == pytest.approx(80 / epoch_s)
    assert timeline.epoch_starts_at(1, records[19], records[20])
    assert not timeline.epoch_starts_at(1, records[20], records[21])


def _one_unknown_epoch(
    stall_ms: float,
    chain: list[dict[str, object]],
    epoch_examples: int | None,
    cardinality: int = -2,
) -> tuple[PassTimeline, list[StepRecord]]:
    """One epoch start seen, of a dataset whose length tf.data does not know (a text
    reader): its first element waits `stall_ms` more, then 40 steps of 10 ms."""
    import json

    timeline = PassTimeline(epoch_examples=epoch_examples)
    payload = {"stream": 1, "at_ns": 0, "cardinality": cardinality, "chain": chain}
    timeline.event(decode_event(f"E epoch {json.dumps(payload)}"))  # as the child writes it
    first = StepRecord(1, 9 * MS, int((10 + stall_ms) * MS), 8)  # waits stall_ms + 1
    return timeline, [first, *_steps(first.deliver_ns, 40, 10, 1)]


SHUFFLED_TOKENIZER = [
    {"kind": "source", "site": None, "python": False},
    {"kind": "map", "site": "t.py:5", "python": True},
    {"kind": "shuffle", "site": "t.py:6", "python": False},
    {"kind": "batch", "site": "t.py:7", "python": False},
]


def test_a_recurring_stall_seen_once_is_spread_over_the_counted_epoch() -> None:
    """A trial that sees one epoch start of a text reader: its shuffle buffer refills
    through the tokenizer every epoch, so the stall counts at once, spread over the
    epoch's steps made from the examples counted before the run (800 / 8 a step)."""
    timeline, records = _one_unknown_epoch(2000, SHUFFLED_TOKENIZER, epoch_examples=800)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and cost.steps_per_epoch == 100 and cost.spread
    assert cost.stall_s == pytest.approx(2.0)
    stats = timeline.window(records[10].deliver_ns, records[11:31], cost)
    assert stats is not None
    # 20 steps of 10 ms and 20/100 of the 2 s stall: 160 examples in 0.6 s.
    assert stats.examples_per_s == pytest.approx(160 / 0.6, rel=1e-6)
    training = timeline.training_time(1, records, 0.010)
    assert training.stall is not None and training.stall.cause == "shuffle_behind_map"
    # Without the count nothing is spread, and the stall is not named.
    timeline, records = _one_unknown_epoch(2000, SHUFFLED_TOKENIZER, epoch_examples=None)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and not cost.spread
    assert timeline.training_time(1, records, 0.010).stall is None


def test_a_stall_a_cache_holds_is_one_off_when_seen_once() -> None:
    """With a cache after the tokenizer the first epoch's stall was the cache filling:
    seen once, it is not spread (the next epochs read the cache), though tf.data knows
    the epoch's length (100 batches)."""
    cached = [*SHUFFLED_TOKENIZER[:2], {"kind": "cache", "site": "t.py:5"}]
    cached += SHUFFLED_TOKENIZER[2:]
    timeline, records = _one_unknown_epoch(2000, cached, None, cardinality=100)
    cost = timeline.epoch_cost(1, records)
    assert cost is not None and not cost.spread
    timeline, records = _one_unknown_epoch(2000, SHUFFLED_TOKENIZER, None, cardinality=100)
    recurring = timeline.epoch_cost(1, records)
    assert recurring is not None and recurring.spread and recurring.steps_per_epoch == 100
