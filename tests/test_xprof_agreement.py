"""Cross-check against XProf's own input-pipeline analysis of the same real traces.

Both tools take a step's span from its marker and give overlapping time to the
higher-priority category (input wait over host compute), so on traces with step
markers they must agree. XProf drops the first and last step when it has more than
five; the comparison uses the steps XProf kept, matched by step number.
"""

from __future__ import annotations

import pytest
import tracegen_steps

from tftune.probes import breakdown, steps, trace
from tftune.probes.xprof_check import xprof_input_pipeline

pytest.importorskip("xprof.convert.raw_to_tool_data")

SHARE_TOLERANCE = 0.05  # 5 percentage points of step time
STEP_TIME_TOLERANCE = 0.05  # relative


@pytest.mark.parametrize("case", ["latency_py", "compute_bound"])
def test_step_time_and_input_share_agree_with_xprof(trace_case, case: str) -> None:  # type: ignore[no-untyped-def]
    path = tracegen_steps.one_file(trace_case(case))
    host = trace.load_host(path)
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


def test_where_xprof_sees_no_steps_we_still_do(trace_case, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    # No markers at all, and Keras 3's own "Profiled batch" markers: XProf finds no
    # step ("No step marker observed" / "No step time measured"); we infer or use them.
    for path in (
        tracegen_steps.one_file(trace_case("steps_nomarkers")),
        tracegen_steps.one_file(tracegen_steps.keras_logdir(tmp_path_factory)),
    ):
        xp = xprof_input_pipeline([path])
        assert not xp.steps
        st = steps.detect_steps(trace.load_host(path))
        assert len(st) >= 8 and st.detection != "none"
