"""The tuning JSON's trials in TensorBoard's HParams dashboard (`reports.hparams`),
read back with TensorBoard's own event reader."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
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

    from tftune.core.tuning_document import TuningDocument
    from tftune.core.vocabulary import knob_value_words
    from tftune.reports.hparams import write_hparams

    data = json.loads((FIXTURES / "tuning_latency.json").read_text())
    write_hparams(TuningDocument.from_json(data), tmp_path / "tb")
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
        # In the reports' words ("as written", not the JSON's "default").
        shown = {k: knob_value_words(v) for k, v in r["params"].items()}
        assert {k: v.string_value for k, v in start.hparams.items()} == shown
        scalars = event_accumulator.EventAccumulator(str(tmp_path / "tb" / run))
        scalars.Reload()
        if r["examples_per_s"] is None:  # not measured: no metric, never 0
            assert "examples_per_s" not in scalars.Tags()["scalars"]
            continue
        (rate,) = scalars.Scalars("examples_per_s")
        assert rate.value == pytest.approx(r["examples_per_s"])


def test_writing_imports_no_tensorflow_and_prints_nothing(tmp_path: Path) -> None:
    """TensorBoard's event writer imports TensorFlow where it is installed (for
    tf.io.gfile), whose start-up lines landed in `tftune optimize`'s final table: the
    records are framed by tftune, with the CRC TensorFlow's reader checks."""
    pytest.importorskip("tensorboard")
    code = (
        "import json, sys\n"
        "from tftune.core.tuning_document import TuningDocument\n"
        "from tftune.reports.hparams import write_hparams\n"
        f"data = json.loads(open({str(FIXTURES / 'tuning_latency.json')!r}).read())\n"
        f"write_hparams(TuningDocument.from_json(data), {str(tmp_path / 'tb')!r})\n"
        "sys.exit(3 if 'tensorflow' in sys.modules else 0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, "TensorFlow was imported" if out.returncode == 3 else out.stderr
    assert out.stdout == "" and out.stderr == "", out.stderr
    files = sorted((tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert files and not list((tmp_path / "tb").rglob("*.tmp"))  # written atomically
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    for file in files:  # each record: length, its CRC, the event, its CRC
        data, at = file.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            (head,) = struct.unpack("<I", data[at + 8 : at + 12])
            body = data[at + 12 : at + 12 + length]
            (tail,) = struct.unpack("<I", data[at + 12 + length : at + 16 + length])
            assert head == masked_crc32c(data[at : at + 8]) and tail == masked_crc32c(body)
            at += 16 + length
