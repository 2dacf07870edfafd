"""The trace reader and locator on real recorded traces and on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tftune.core.errors import TraceError
from tftune.probes.traces import locate, trace_file


def _one_file(logdir: Path) -> Path:
    (f,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return f


def test_real_trace_has_host_plane_and_tf_data_events(trace_case) -> None:  # type: ignore[no-untyped-def]
    run = locate.locate(trace_case("latency_py"))
    host = trace_file.load_host(run.hosts[0].path)
    plane = host.host_plane
    assert plane is not None
    names = set(plane.event_names.values())
    assert "EagerPyFunc:EagerPyFunc" in names or any("PyFunc" in n for n in names)
    assert any(n.startswith("Iterator::Root") for n in names)
    hits = list(
        plane.find(
            lambda n: n.startswith("Iterator::Root::Prefetch") or n == "Iterator::Root::MapAndBatch"
        )
    )
    assert hits
    line, idx = hits[0]
    stats = plane.event_stats(line, int(idx[0]))
    assert "id" in stats and "name" in stats
    # All lines share one time base starting near zero.
    lo, hi = host.span_ps
    assert 0 <= lo < hi
    assert all((ln.duration_ps >= 0).all() for ln in plane.lines)


def test_locate_accepts_logdir_profile_run_and_file(trace_case) -> None:  # type: ignore[no-untyped-def]
    logdir = trace_case("latency_py")
    f = _one_file(logdir)
    for p in (logdir, logdir / "plugins" / "profile", f.parent, f):
        run = locate.locate(p)
        assert run.hosts[0].path == f


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "file is empty"),
        (b"\xff\xff\xff\xff\xff\xff", "truncated or corrupt"),
        (b"hello, this is a text file\n", "XSpace"),
    ],
)
def test_bad_files_give_one_line_naming_the_file(
    tmp_path: Path, payload: bytes, message: str
) -> None:
    f = tmp_path / "vm.xplane.pb"
    f.write_bytes(payload)
    with pytest.raises(TraceError) as err:
        trace_file.load_host(f)
    text = str(err.value)
    assert str(f) in text and message in text and "\n" not in text


def test_truncated_real_trace_is_a_clean_error(trace_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = _one_file(trace_case("latency_py")).read_bytes()
    f = tmp_path / "cut.xplane.pb"
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match=r"cut\.xplane\.pb"):
        trace_file.load_host(f)


def test_missing_and_empty_logdirs(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        locate.list_runs(tmp_path / "nope")
    with pytest.raises(TraceError, match="no profiler runs found"):
        locate.list_runs(tmp_path)
    (tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00").mkdir(parents=True)
    with pytest.raises(TraceError, match=r"no \.xplane\.pb file"):
        locate.list_runs(tmp_path)


def test_one_bad_host_is_skipped_others_load(trace_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = _one_file(trace_case("latency_py"))
    run_dir = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    run_dir.mkdir(parents=True)
    (run_dir / "worker0.xplane.pb").write_bytes(good.read_bytes())
    (run_dir / "worker1.xplane.pb").write_bytes(b"\x00garbage")
    info = locate.locate(tmp_path)
    loaded = trace_file.load_run(info.name, info.path, [(h.host, h.path) for h in info.hosts])
    assert [h.host for h in loaded.hosts] == ["worker0"]
    assert [s.host for s in loaded.skipped] == ["worker1"]
    assert "worker1.xplane.pb" in loaded.skipped[0].reason


def test_newest_run_is_default_and_run_can_be_chosen(trace_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = _one_file(trace_case("latency_py")).read_bytes()
    for name in ("2026_01_01_00_00_00", "2026_02_01_00_00_00"):
        d = tmp_path / "plugins" / "profile" / name
        d.mkdir(parents=True)
        (d / "vm.xplane.pb").write_bytes(good)
    assert locate.locate(tmp_path).name == "2026_02_01_00_00_00"
    assert locate.locate(tmp_path, run="2026_01_01_00_00_00").name == "2026_01_01_00_00_00"
    with pytest.raises(TraceError, match="no run named 'x'"):
        locate.locate(tmp_path, run="x")
    with pytest.raises(TraceError, match="no host named 'h'"):
        locate.locate(tmp_path, host="h")
