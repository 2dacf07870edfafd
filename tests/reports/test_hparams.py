"""The tuning JSON's trials in TensorBoard's HParams dashboard (`reports.hparams`),
read back with TensorBoard's own event reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

pytestmark = pytest.mark.slow  # TensorBoard's reader imports TensorFlow where it is installed


def test_the_trials_read_back_from_tensorboards_hparams(tmp_path: Path) -> None:
    """`--tensorboard LOGDIR`: a run per finished trial, its knobs as hparams and its
    figures as metrics, as TensorBoard's own event reader reads them."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing import event_accumulator, plugin_event_multiplexer
    from tensorboard.plugins.hparams import metadata

    from tftune.reports.hparams import write_hparams

    data = json.loads((FIXTURES / "tuning_latency.json").read_text())
    write_hparams(data, tmp_path / "tb")
    runs = plugin_event_multiplexer.EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "tb"))
    runs.Reload()
    content = runs.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    finished = [r for r in data["trials_detail"] if r["state"] in ("complete", "pruned")]
    assert len(finished) >= 5 and set(content) == {
        ".",
        *(f"trial-{r['number']:03d}" for r in finished),
    }
    config = metadata.parse_experiment_plugin_data(content["."]["_hparams_/experiment"])
    assert {h.name for h in config.hparam_infos} == set(finished[0]["params"])
    for r in finished:
        run = f"trial-{r['number']:03d}"
        start = metadata.parse_session_start_info_plugin_data(
            content[run]["_hparams_/session_start_info"]
        )
        assert {k: v.string_value for k, v in start.hparams.items()} == r["params"]
        scalars = event_accumulator.EventAccumulator(str(tmp_path / "tb" / run))
        scalars.Reload()
        if r["examples_per_s"] is None:  # not measured: no metric, never 0
            assert "examples_per_s" not in scalars.Tags()["scalars"]
            continue
        (rate,) = scalars.Scalars("examples_per_s")
        assert rate.value == pytest.approx(r["examples_per_s"])
