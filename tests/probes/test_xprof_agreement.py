"""Cross-check against XProf's own input-pipeline analysis of the same real traces.

Both tools take a step's span from its marker and give overlapping time to the
higher-priority category (input wait over host compute), so on traces with step
markers they must agree. XProf drops the first and last step when it has more than
five; the comparison uses the steps XProf kept, matched by step number.
"""

from __future__ import annotations

import json

import pytest
import tracegen_steps

from tftune.probes.traces import breakdown, steps, trace_file
from tftune.probes.traces.xprof_check import xprof_input_pipeline

pytest.importorskip("xprof.convert.raw_to_tool_data")

SHARE_TOLERANCE = 0.05  # 5 percentage points of step time
STEP_TIME_TOLERANCE = 0.05  # relative


@pytest.mark.parametrize("case", ["latency_py", "compute_bound"])
def test_step_time_and_input_share_agree_with_xprof(trace_case, case: str) -> None:  # type: ignore[no-untyped-def]
    path = tracegen_steps.one_file(trace_case(case))
    host = trace_file.load_host(path)
    st = steps.detect_steps(host)
    bd = breakdown.compute_breakdown(host, st)
    xp = xprof_input_pipeline([path])
    assert len(xp.steps) >= 10, xp.conclusion

    by_num = {int(n): i for i, n in enumerate(st.numbers.tolist())}
    kept = [by_num[int(s.name.split()[-1])] for s in xp.steps]
    ours_step_ms = sum(int(st.duration_ps[i]) for i in kept) / len(kept) / 1e9
    ours_input = sum(int(bd.ps["input_wait"][i] + bd.ps["host_to_device"][i]) for i in kept)
    ours_share = ours_input / sum(int(st.duration_ps[i]) for i in kept)

    assert xp.mean_step_ms is not None and xp.input_share is not None
    assert ours_step_ms == pytest.approx(xp.mean_step_ms, rel=STEP_TIME_TOLERANCE)
    assert abs(ours_share - xp.input_share) <= SHARE_TOLERANCE
    print(
        f"{case}: step {ours_step_ms:.2f} ms vs xprof {xp.mean_step_ms:.2f} ms; "
        f"input {ours_share:.3f} vs xprof {xp.input_share:.3f}"
    )


def test_where_xprof_sees_no_steps_we_still_do(trace_case) -> None:  # type: ignore[no-untyped-def]
    # No markers at all, and Keras 3's own "Profiled batch" markers: XProf finds no
    # step ("No step marker observed" / "No step time measured"); we infer or use them.
    for path in (
        tracegen_steps.one_file(trace_case("steps_nomarkers")),
        tracegen_steps.one_file(trace_case("keras_markers")),
    ):
        xp = xprof_input_pipeline([path])
        assert not xp.steps
        st = steps.detect_steps(trace_file.load_host(path))
        assert len(st) >= 8 and st.detection != "none"


@pytest.mark.parametrize("case", ["latency_py", "compute_bound"])
def test_analyze_xprof_puts_xprofs_figures_beside_ours(
    trace_case, run_cli, tmp_path, case: str
) -> None:  # type: ignore[no-untyped-def]
    """`tftune analyze --xprof`: XProf's step time and input share in the analysis JSON,
    beside tftune's over the same steps, agreeing as the cross-check above does."""
    out = tmp_path / "a.json"
    proc = run_cli("analyze", str(trace_case(case)), "--xprof", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "xplane_to_op_stats" not in proc.stdout + proc.stderr  # XProf's C++ logs held back
    xp = json.loads(out.read_text())["xprof"]
    assert set(xp) == {
        "steptime_ms",
        "input_share",
        "tftune_steptime_ms",
        "tftune_input_share",
        "note",
    }
    assert xp["note"] is None
    assert xp["steptime_ms"] > 0 and xp["tftune_steptime_ms"] > 0
    assert xp["tftune_steptime_ms"] == pytest.approx(xp["steptime_ms"], rel=STEP_TIME_TOLERANCE)
    assert abs(xp["tftune_input_share"] - xp["input_share"]) <= SHARE_TOLERANCE
    # Read-only: XProf's saved op stats do not land in the user's run folder.
    assert not list(trace_case(case).rglob("*op_stats*"))


def test_analyze_xprof_says_why_xprof_has_no_figures(trace_case) -> None:  # type: ignore[no-untyped-def]
    """No step markers XProf knows: its figures are null with a one-line note; ours stay."""
    import tftune

    xp = tftune.analyze(trace_case("no_markers"), xprof=True).to_json()["xprof"]
    assert xp["steptime_ms"] is None and xp["input_share"] is None
    assert xp["note"] and "no steps" in xp["note"] and "\n" not in xp["note"]
    assert xp["tftune_steptime_ms"] > 0 and xp["tftune_input_share"] is not None


def test_analyze_xprof_failure_is_a_note_not_an_error(trace_case, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from xprof.convert import raw_to_tool_data

    import tftune

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("converter exploded\nwith a second line")

    monkeypatch.setattr(raw_to_tool_data, "xspace_to_tool_data", broken)
    data = tftune.analyze(trace_case("latency_py"), xprof=True).to_json()
    xp = data["xprof"]
    assert xp["steptime_ms"] is None and xp["input_share"] is None
    assert xp["note"] == "XProf's converter failed (RuntimeError: converter exploded)"
    assert xp["tftune_input_share"] == data["input_share"]
