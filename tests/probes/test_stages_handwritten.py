"""The stage tree and findings on small handwritten traces, where every number is known."""

from __future__ import annotations

from pathlib import Path

from gputrace import MS, XSpaceBuilder

from tftune.probes.advice.analysis import analyze
from tftune.probes.traces import trace_file
from tftune.probes.traces.stages import build_stage_tree

ROOT, PF, MAP, SRC = (
    "Iterator::Root",
    "Iterator::Root::Prefetch",
    "Iterator::Root::Prefetch::Map",
    "Iterator::Root::Prefetch::Map::Range",
)


def _pipeline(n: int = 5, wait_ps: int = 8 * MS) -> XSpaceBuilder:
    """Consumer waits on a prefetch; its runner calls a synchronous map whose function
    (dispatch id k) runs as `ExecutorState::Process` with one decode kernel on a pool thread."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    for i in range(n):
        t = i * 10 * MS
        host.event("python", ROOT, t, wait_ps, id=1, cpu_budget=2, threadpool_size=2)
        host.event(
            "python",
            PF,
            t + MS // 10,
            max(wait_ps - MS // 5, MS // 1000),
            id=2,
            parent_id=1,
            buffer_limit=1,
            autotune=0,
        )
        r = "tf_data_iterator_resource/9"
        host.event(r, "PrefetchProduce", t, 9 * MS)
        ev = host.event(r, MAP, t + MS // 10, 8 * MS, id=3, parent_id=2)
        host._set(ev.stats.add(), "name", "MapDataset:1")  # `name` is also event()'s arg
        host.event(r, SRC, t + 2 * MS // 10, MS // 10, id=4, parent_id=3)
        host.event(r, "InstantiatedCapturedFunction::Run", t + MS, 6 * MS, id=100 + i)
        w = "tf_data_private_threadpool/5"
        host.event(w, "ExecutorState::Process", t + MS, 6 * MS, id=100 + i)
        host.event(w, "DecodeJpeg:DecodeJpeg", t + MS + MS // 10, 5 * MS)
    return b


def test_sync_map_owns_its_function_and_prefetch_wait_is_not_work(tmp_path: Path) -> None:
    host = trace_file.load_host(_pipeline().write(tmp_path / "run", host="vm"))
    tree = build_stage_tree(host, (0, 50 * MS))
    pf, mp, src = tree.by_name(PF), tree.by_name(MAP), tree.by_name(SRC)
    assert pf is not None and mp is not None and src is not None
    assert pf.is_async and pf.wait_ps == 5 * (8 * MS - MS // 5)
    assert pf.work_ps == pf.self_ps == 5 * (9 * MS - 8 * MS)  # runner outside the map call
    assert not mp.is_async and mp.calls == 5
    assert mp.work_ps == mp.self_ps == 5 * (8 * MS - MS // 10)  # minus the nested Range
    assert mp.function_calls == 5 and mp.function_ps == 5 * 6 * MS
    assert dict(mp.ops_ps) == {"DecodeJpeg": 5 * 5 * MS}
    assert pf.blocking and mp.blocking and src.blocking  # the consumer waits 80% of the time
    assert tree.bottleneck is mp and mp.op == "MapDataset:1"
    assert pf.knob("buffer_limit") == 1 and mp.knob("threadpool_size") == 2


def test_a_full_prefetch_buffer_hides_the_stages_below(tmp_path: Path) -> None:
    host = trace_file.load_host(_pipeline(wait_ps=MS // 100).write(tmp_path / "run", host="vm"))
    tree = build_stage_tree(host, (0, 50 * MS))
    assert tree.by_name(PF) is not None and not tree.by_name(MAP).blocking  # type: ignore[union-attr]
    assert tree.bottleneck is None


def test_no_steps_still_names_the_bottleneck_over_the_window(tmp_path: Path) -> None:
    _pipeline(n=2).write(tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00", host="vm")
    data = analyze(tmp_path).to_json()
    assert data["step_detection"] == "none" and data["input_share"] is None
    assert data["verdict"]["level"] is None
    top = data["bottlenecks"][0]
    assert top["category"] == "preprocessing" and top["stage"] == MAP
    assert any("profile window" in n for n in data["notes"])


def test_older_tensorflow_root_name_is_a_root_too(tmp_path: Path) -> None:
    b = _pipeline()
    raw = b.plane("/host:CPU").raw
    for md in raw.event_metadata.values():  # TF before 2.7 named the root `Iterator::Model`
        md.name = md.name.replace("Iterator::Root", "Iterator::Model")
    tree = build_stage_tree(
        trace_file.load_host(b.write(tmp_path / "run", host="vm")), (0, 50 * MS)
    )
    root = tree.root
    assert root is not None and root.name == "Iterator::Model" and root.blocking
    bn = tree.bottleneck
    assert bn is not None and bn.name == "Iterator::Model::Prefetch::Map"
    assert tree.root_knobs["cpu_budget"] == 2


def test_a_knob_written_unavailable_is_read_from_an_earlier_event(tmp_path: Path) -> None:
    """TF writes `parallelism: unavailable` when the iterator's lock was busy at trace
    time; the value AUTOTUNE chose is then taken from the stage's previous event."""
    b = _pipeline(n=3)
    host_plane = b.plane("/host:CPU")
    pmap = "Iterator::Root::Prefetch::ParallelMapV2"
    r = "tf_data_iterator_resource/9"
    host_plane.event(r, pmap, 31 * MS, MS, id=7, parent_id=2, parallelism=8, autotune=1)
    host_plane.event(r, pmap, 33 * MS, MS, id=7, parent_id=2, parallelism="unavailable")
    host = trace_file.load_host(b.write(tmp_path / "run", host="vm"))
    stage = build_stage_tree(host, (0, 40 * MS)).by_name(pmap)
    assert stage is not None
    assert stage.knob("parallelism") == 8 and stage.knob("autotune") is True
