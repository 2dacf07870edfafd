"""GPU-convention traces (tests/gputrace.py): tftune's reading, and XProf's.

What XProf 2.24 does with a GPU trace, and why the numbers differ from ours:

* On a host with a GPU, XProf's input-pipeline step database is built from device
  events only (`xplane_to_op_stats.cc` combines host step events only when there is no
  device), so a step spans the device work and the host's wait for input is not in it.
  tftune keeps the marker's span and counts the host wait as `input_wait`.
* XProf recognises host-to-device copies by the name prefix `MemcpyHToD`, while the
  CUPTI collector names them `MemcpyH2D`; such copies then count as device compute in
  XProf. tftune reads both names as host-to-device.
With XProf's own copy naming, XProf's input time equals tftune's device-side copy time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gputrace import GPU_PLANE_STATS, H2D_STREAM, gpu_trace

from tftune.core.units import PS_PER_MS
from tftune.core.vocabulary import BREAKDOWN_CATEGORIES
from tftune.probes.traces import breakdown, steps, trace_file


def _analyse(path: Path) -> breakdown.Breakdown:
    host = trace_file.load_host(path)
    return breakdown.compute_breakdown(host, steps.detect_steps(host))


def test_gpu_conventions_are_read(tmp_path: Path) -> None:
    b, exp = gpu_trace()
    host = trace_file.load_host(b.write(tmp_path / "run"))
    (gpu,) = host.gpu_planes
    assert gpu.name == "/device:GPU:0"
    assert {k: gpu.stats[k] for k in GPU_PLANE_STATS} == GPU_PLANE_STATS
    h2d = next((ln for ln in gpu.lines if ln.name == H2D_STREAM), None)
    assert h2d is not None and len(h2d) == exp.steps
    stats = gpu.event_stats(h2d, 0)
    assert stats["memcpy_details"].startswith("kind_src:pageable kind_dst:device size:")
    assert isinstance(stats["correlation_id"], int)


def test_tftune_breakdown_of_a_gpu_trace(tmp_path: Path) -> None:
    b, exp = gpu_trace()
    bd = _analyse(b.write(tmp_path / "run"))
    assert bd.steps.detection == "markers" and len(bd.steps) == exp.steps
    assert bd.has_device
    assert bd.steps.duration_ps.tolist() == exp.step_ps
    assert bd.ps["input_wait"].tolist() == exp.wait_ps
    assert bd.ps["device_compute"].tolist() == exp.kernel_ps
    assert bd.ps["output"].tolist() == exp.d2h_ps
    # Host-to-device: the device copy plus the part of the host-side API call before it,
    # less the instants where the host is launching kernels meanwhile (kernel launch
    # ranks above host-to-device, as in XProf).
    h2d, launch = bd.ps["host_to_device"], bd.ps["kernel_launch"]
    assert (h2d + launch >= exp.h2d_ps).all()
    assert (h2d <= [p + 10**8 for p in exp.h2d_ps]).all()
    assert bd.h2d_bytes.tolist() == exp.h2d_bytes
    assert bd.ps["kernel_launch"].sum() > 0  # cuLaunchKernel on the host
    row = bd.per_step()[0]
    assert row["host_to_device_bytes"] == exp.h2d_bytes[0]


def test_both_copy_namings_read_the_same(tmp_path: Path) -> None:
    cupti, _ = gpu_trace()
    xprof_style, _ = gpu_trace(h2d_name="MemcpyHToD", d2h_name="MemcpyDToH")
    a = _analyse(cupti.write(tmp_path / "a"))
    b = _analyse(xprof_style.write(tmp_path / "b"))
    for kind in BREAKDOWN_CATEGORIES:
        assert a.ps[kind].tolist() == b.ps[kind].tolist(), kind


def _xprof(path: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    from tftune.probes.traces.xprof_check import xprof_input_pipeline

    xp = xprof_input_pipeline([path])
    assert xp.hardware_type == "GPU" and xp.steps
    return xp


def test_xprof_reads_device_time_as_we_do(tmp_path: Path) -> None:
    b, exp = gpu_trace()
    path = b.write(tmp_path / "run")
    bd = _analyse(path)
    xp = _xprof(path)
    for s in xp.steps:
        i = int(s.name)
        # XProf's step is the device span, and every device event in it is "compute".
        assert s.step_ms == pytest.approx(exp.device_span_ps[i] / PS_PER_MS, abs=0.01)
        device_total = int(bd.ps["device_compute"][i] + exp.h2d_ps[i] + bd.ps["output"][i])
        assert s.device_compute_ms == pytest.approx(device_total / PS_PER_MS, abs=0.01)
        assert s.input_ms == 0.0
        # Same kernels: our device compute is XProf's minus the copies it misnames.
        assert int(bd.ps["device_compute"][i]) == exp.kernel_ps[i]


def test_xprof_with_its_own_copy_names_agrees_on_host_to_device(tmp_path: Path) -> None:
    b, exp = gpu_trace(h2d_name="MemcpyHToD", d2h_name="MemcpyDToH")
    path = b.write(tmp_path / "run")
    bd = _analyse(path)
    xp = _xprof(path)
    for s in xp.steps:
        i = int(s.name)
        assert s.input_ms == pytest.approx(exp.h2d_ps[i] / PS_PER_MS, abs=0.01)
        assert s.device_compute_ms == pytest.approx(
            int(bd.ps["device_compute"][i]) / PS_PER_MS, abs=0.01
        )
        assert s.output_ms == pytest.approx(int(bd.ps["output"][i]) / PS_PER_MS, abs=0.01)


@pytest.mark.slow
def test_gpu_check_script_dry_runs_without_a_gpu(tmp_path: Path) -> None:
    """scripts/gpu_check.sh on a machine without a GPU: says so, still runs every step."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from conftest import ROOT, has_tensorflow

    if not has_tensorflow():
        pytest.skip("tensorflow is not installed: the script records a trace")
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("a GPU machine runs the script for real, not as a dry run")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no NVIDIA GPU visible" in proc.stdout
    assert (out / "NO_GPU").exists()
    assert list(out.glob("trace/plugins/profile/*/*.xplane.pb"))
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["step_detection"] == "markers"
    assert analysis["steps"]["count"] == 20
    assert analysis["device"] == "CPU_ONLY"
