"""Host-to-device and device-compute findings on GPU-convention traces (tests/gputrace.py)."""

from __future__ import annotations

from pathlib import Path

from gputrace import GpuStepSpec, gpu_trace

from tftune.probes.advice.analysis import analyze


def test_host_to_device_copies_are_a_bottleneck_with_prefetch_to_device(tmp_path: Path) -> None:
    spec = GpuStepSpec(wait_us=500, h2d_us=4_000, kernels_us=(1_000, 1_000))
    b, _ = gpu_trace(spec=spec)
    a = analyze(b.write(tmp_path / "run"))
    data = a.to_json()
    assert data["device"] == "GPU"
    h2d = next(x for x in data["bottlenecks"] if x["category"] == "host_to_device")
    assert h2d["share"] >= 0.05
    assert "prefetch_to_device" in h2d["recommendation"]["code"]


def test_device_compute_bound_gets_the_gpus_16_bit_policy(tmp_path: Path) -> None:
    spec = GpuStepSpec(wait_us=50, h2d_us=50, kernels_us=(8_000, 8_000), d2h_us=20)
    b, _ = gpu_trace(spec=spec)
    data = analyze(b.write(tmp_path / "run")).to_json()
    assert data["input_bound"] is False
    top = data["bottlenecks"][0]
    assert top["category"] == "device_compute" and top["share"] >= 0.5
    # Compute capability 8.0: bfloat16 (no loss scaling), the policy the precision move
    # picks for this GPU; the fix is that move, so it is not a next move again.
    assert top["recommendation"]["kind"] == "precision"
    assert "mixed_bfloat16" in top["recommendation"]["code"]
    assert "precision" not in {m["kind"] for m in data["next_moves"]}
    assert data["stages"] == []  # no tf.data events in this trace: no stages invented
