"""`tftune optimize` as a user runs it: one real, short study on the latency-bound
example (checked by ranges, never exact timings), resume (and the resume command's
round trip), and one-line user errors."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from conftest import requires_tf
from repo_paths import ROOT

from tftune import cli
from tftune.core.tuning_document import TuningDocument

if TYPE_CHECKING:
    from tftune.tuner.options import OptimizeOptions

EXAMPLE = ROOT / "examples" / "latency_bound.py"
RunCli = Callable[..., subprocess.CompletedProcess[str]]
# Short windows keep the suite lean; the 4 ms latency makes the effect large anyway.
FAST = ["--window", "0.5", "--repeats", "2"]
# On a loaded 2-core machine the tuned pipeline still beats sequential by far more.
CLEAR_FACTOR = 3.0


@pytest.mark.slow
@requires_tf
def test_optimize_latency_bound_example_end_to_end(tmp_path: Path, run_cli: RunCli) -> None:
    out = run_cli(
        "optimize", str(EXAMPLE), "--trials", "5", *FAST, "--json", "t.json",
        "--study-name", "e2e", "--", "--steps", "100000",
        cwd=tmp_path, timeout=400,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    data = json.loads((tmp_path / "t.json").read_text())
    for key in ("schema", "ceiling", "baselines", "best", "trials_detail", "importances"):
        assert key in data
    # What optimize wrote (its screen and record included) reads back to the same JSON.
    assert TuningDocument.from_json(data, source="t.json").to_json() == data
    assert data["trials"]["complete"] + data["trials"]["pruned"] + data["trials"]["failed"] == 5
    aw = data["baselines"]["as_written"]["examples_per_s"]
    best = data["best"]
    assert best["examples_per_s"] >= CLEAR_FACTOR * aw, (aw, best)
    # The winner raises parallelism and the private thread pool (AUTOTUNE alone cannot
    # go past the default pool, the core count).
    config = best["config"]
    (site,) = [s for s in config["sites"].values() if "num_parallel_calls" in s]
    par = site["num_parallel_calls"]
    pool = config["threadpool_size"]
    assert pool is not None and pool >= 8
    assert par == "AUTOTUNE" or par >= 8
    # The ceiling: the pipeline alone (as written) is the limit, far below the model.
    ceiling = data["ceiling"]
    assert ceiling["limited_by"] == "pipeline"
    assert ceiling["model_only_examples_per_s"] > 5 * ceiling["pipeline_only_examples_per_s"]
    assert "num_parallel_calls=" in data["diff"] and data["command"].startswith("tftune run")
    # The screen ranked pipeline configs in one run; its best seeded the search.
    screened = data["screen"]["candidates"]
    assert screened[0]["description"] == "as written" and len(screened) >= 6
    best_screened = max(c["examples_per_s"] or 0 for c in screened)
    assert best_screened > CLEAR_FACTOR * (screened[0]["examples_per_s"] or 0)
    # Why it stopped, and when tuning pays for itself, in the JSON and under the table.
    assert data["stop_reason"] == "ran the 5 trials asked for (--trials 5)"
    be = data["break_even"]
    assert be["tuning_s"] == data["wall_s"] and be["saved_s_per_hour"] > 0
    assert be["pays_off_after_s"] == pytest.approx(
        be["tuning_s"] / (1 - be["as_written_examples_per_s"] / be["tuned_examples_per_s"]),
        rel=0.01,
    )
    assert "has paid for itself after" in " ".join(re.sub(r"[│|]", " ", out.stdout).split())
    for row in ("as written", "AUTOTUNE everywhere", "tuned"):
        assert row in out.stdout
    assert "#cores heuristic" not in out.stdout  # the screen drained it: no trial of its own
    assert (tmp_path / "tftune-best.json").exists()
    html = (tmp_path / "tftune-tuning.html").read_text()
    assert "<html" in html.lower() and "AUTOTUNE" in html

    # The best file applies with `tftune run --config`: the script's own report is faster.
    # Its clock counts the pipeline's start-up (threads, the first trace of the step): 400
    # steps keep that a small part of the run on a loaded machine (150 read 1.7x).
    run = run_cli(
        "run", "--config", "tftune-best.json", str(EXAMPLE), "--", "--steps", "400",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    rate = float(re.findall(r"([\d.]+) examples/s", run.stdout)[-1])
    assert rate >= CLEAR_FACTOR * aw / 1.5, (rate, aw)  # includes start-up, so a looser bar

    # Resume: the same study name reruns no finished trial.
    again = run_cli(
        "optimize", str(EXAMPLE), "--trials", "5", *FAST, "--json", "t2.json", "--no-bounds",
        "--no-guided",
        "--study-name", "e2e", "--", "--steps", "100000",
        cwd=tmp_path, timeout=200,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(r"\b0\s+ran\s+now", again.stdout), again.stdout[-2000:]
    data2 = json.loads((tmp_path / "t2.json").read_text())
    assert data2["trials_detail"] == data["trials_detail"]


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, ["optimize", *args])
    return result.exit_code, result.output


def test_missing_script_is_one_line(tmp_path: Path) -> None:
    code, output = _invoke(str(tmp_path / "nope.py"))
    assert code == 1 and "nope.py" in output and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1


def test_malformed_space_file_is_one_line_before_any_trial(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    bad = tmp_path / "space.json"
    bad.write_text('{"knobs": {"threadpool_size": "many"}}')
    code, output = _invoke(str(script), "--space", str(bad), "--storage", str(tmp_path / "j"))
    assert code == 1 and "space.json" in output and "threadpool_size" in output
    assert len(output.strip().splitlines()) == 1


def test_unreachable_storage_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    code, output = _invoke(str(script), "--storage", "postgresql://u:pw@127.0.0.1:9/db")
    assert code == 1 and "127.0.0.1:9" in output and "pw@" not in output
    assert len(output.strip().splitlines()) == 1


def _built_options(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> tuple[str, list[str], OptimizeOptions]:
    """What `tftune optimize ARGV` hands the terminal side: the script, its arguments and
    the options the command built (nothing runs)."""
    import tftune._optimize_cli as optimize_cli

    seen: list[tuple[str, list[str], OptimizeOptions]] = []
    monkeypatch.setattr(optimize_cli, "run_optimize_command", lambda *a: seen.append(a[:3]))
    result = CliRunner().invoke(cli.main, argv)
    assert result.exit_code == 0, result.output
    (built,) = seen
    return built


@pytest.mark.parametrize(
    "chosen",
    [
        [
            "--trials", "7", "--objective", "both", "--space", "sp ace.json",
            "--batch-size", "8:64", "--window", "0.5", "--repeats", "3", "--json", "t.json",
            "--data-service", "grpc://h:5000", "--seed", "3", "--no-bounds", "--no-guided",
            "--storage", "s.journal", "--study-name", "mine", "--no-rewrites",
            "--cache-budget", "2GB", "--cache-dir", "/scratch/c",
        ],
        [],  # every default: the storage and the study name are written resolved
    ],
)  # fmt: skip
def test_the_resume_command_resumes_with_the_same_options(
    monkeypatch: pytest.MonkeyPatch, chosen: list[str]
) -> None:
    from tftune.tuner.options import flag_of, resume_command

    argv = ["optimize", "dir/train.py", *chosen, "--timeout", "60", "--", "--epochs", "2 3"]
    script, args, first = _built_options(monkeypatch, argv)
    line = resume_command(script, args, first)
    typed = shlex.split(line)
    assert typed[:2] == ["tftune", "optimize"]
    script2, args2, resumed = _built_options(monkeypatch, typed[1:])
    assert (script2, args2) == (script, args) == ("dir/train.py", ["--epochs", "2 3"])
    assert resumed.where(script) == first.where(script)
    # What defines the study is repeated; the rest (--timeout, output paths but the
    # tuning JSON, workers) is the resumed run's own choice.
    study = [f.name for f in dataclasses.fields(first) if flag_of(f.name).resume is not None]
    assert {n: getattr(resumed, n) for n in study} == {n: getattr(first, n) for n in study}
    if chosen:  # every option the resume command writes was set away from its default
        changed = [f.name for f in dataclasses.fields(first) if getattr(first, f.name) != f.default]
        assert set(study) <= set(changed)
    assert resumed.timeout_s is None and first.timeout_s == 60


def test_the_resume_command_is_printed_as_before() -> None:
    """The line printed on Ctrl-C, byte for byte as before the options became one type."""
    from tftune.tuner.options import OptimizeOptions, resume_command

    options = OptimizeOptions(
        trials=4, window_s=0.5, repeats=1, bounds=False, guided=False, storage="s.j",
        study_name="t", json_file="t.json", timeout_s=9.0, workers=2,
    )  # fmt: skip
    assert resume_command("t.py", ["m"], options) == (
        "tftune optimize t.py --storage s.j --study-name t --trials 4 --window 0.5 "
        "--repeats 1 --json t.json --no-bounds --no-guided -- m"
    )
    options = OptimizeOptions(
        objective="both", space_file="sp.json", batch_size="8:64", seed=3,
        data_service="grpc://h:5000", best_file="b.json", html_file="x.html",
    )  # fmt: skip
    assert resume_command("t.py", ["--a", "b c"], options) == (
        "tftune optimize t.py --storage tftune-study.journal --study-name tftune-t "
        "--trials auto --objective both --space sp.json --batch-size 8:64 "
        "--data-service grpc://h:5000 --seed 3 -- --a 'b c'"
    )


def _shown(text: str) -> str:
    return " ".join(text.split())  # --help's lines joined, as a reader takes them in


def test_the_help_and_the_options_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each option of `tftune optimize` is an `OptimizeOptions` field's flag, with the
    field's default and help (one source for both), and ``--help`` shows them; a command
    line that sets nothing builds the options' own defaults."""
    import click

    from tftune.tuner.option_defaults import DEFAULT_HTML_FILE
    from tftune.tuner.options import OptimizeOptions, flag_of

    command = cli.main.commands["optimize"]
    params = {p.name: p for p in command.params if isinstance(p, click.Option)}
    page = _shown(CliRunner().invoke(cli.main, ["optimize", "--help"], terminal_width=400).output)
    flagged = set()
    for f in dataclasses.fields(OptimizeOptions):
        flag = flag_of(f.name)
        if flag.name is None:  # the API only
            assert f.name not in params
            continue
        flagged.add(f.name)
        option = params[f.name]
        assert flag.name in option.opts and set(flag.aliases) <= set(option.opts), f.name
        default = flag.command_default or f.default
        assert option.to_info_dict()["default"] == default and option.help == flag.help, f.name
        assert _shown(flag.help) in page, f.name
        if default is not None:
            shown = flag.name.removeprefix("--") if default is True else default
            assert f"[default: {shown}" in page, f.name
    assert set(params) - flagged == {"quiet", "verbose"}
    # Where another command takes the same option, its help is the field's too.
    for name, field_name in (("profile", "step_timeout_s"), ("status", "storage")):
        same = [p for p in cli.main.commands[name].params if p.opts == [flag_of(field_name).name]]
        assert [p.help for p in same] == [flag_of(field_name).help], name
    # Nothing typed: the options' defaults (the command line's -o writes a page).
    _, _, built = _built_options(monkeypatch, ["optimize", "t.py"])
    assert built == OptimizeOptions(html_file=DEFAULT_HTML_FILE)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trials", "0"], "Invalid value for '--trials': 0 must be at least 1 (or 'auto')"),
        (["--trials", "x"], "Invalid value for '--trials': 'x' is not a number or 'auto'"),
        (["--objective", "fast"], "Invalid value for '--objective': 'fast' is not one of"),
        (["--workers", "0"], "Invalid value for '--workers': 0 is not in the range x>=1."),
        (["--step-timeout", "0"], "Invalid value for '--step-timeout': 0.0 is not in the range"),
    ],
)
def test_a_bad_flag_value_is_a_usage_error_naming_it(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(cli.main, ["optimize", "t.py", *argv])
    assert result.exit_code == 2 and message in _shown(result.output), result.output


def test_the_objective_is_its_enum_from_the_command_line_and_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tftune.tuner.options import Objective, OptimizeOptions

    _, _, built = _built_options(monkeypatch, ["optimize", "t.py", "--objective", "both"])
    assert built.objective is Objective.BOTH
    assert OptimizeOptions(objective="gpu-util").objective is Objective.GPU_UTIL


def test_help_imports_neither_tensorflow_nor_optuna() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['tftune', 'optimize', '--help']\n"
        "from tftune import cli\n"
        "try:\n"
        "    cli.main(standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--trials" in out.stdout
    mods = set(out.stdout.split("MODULES", 1)[1].split())
    assert "tensorflow" not in mods and "optuna" not in mods


@pytest.mark.slow
@requires_tf
def test_tensorboard_under_quiet_prints_nothing_and_leaves_tensorflow_out(tmp_path: Path) -> None:
    """`--tensorboard` imported TensorFlow into tftune's own process (TensorBoard's event
    writer does, for tf.io.gfile): its start-up lines landed in the middle of the final
    table, and under -q printed 9 lines. Trials run TensorFlow in their children only."""
    record = tmp_path / "modules.txt"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(record)!r}, 'w').write(' '.join(sys.modules)))\n"
        "from tftune.cli import main\n"
        "main(prog_name='tftune')\n"
    )
    args = ["--trials", "2", "--no-bounds", "--no-guided", "--no-rewrites", *FAST, "-q"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # all said
    out = subprocess.run(
        [sys.executable, "-c", code, "optimize", str(EXAMPLE), *args, "--tensorboard", "tb"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == "" and out.stderr == "", out.stdout[-2000:] + out.stderr[-2000:]
    assert "tensorflow" not in record.read_text().split()
    runs = sorted(p.parent.name for p in (tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert runs == ["tb", "trial-000", "trial-001"], runs


def _fake_runner() -> Any:
    """Trials faked from the config: a latency-bound map that parallelism and the pool
    speed up, against a model that takes 20,000 ex/s."""
    from tftune.core.vocabulary import TrialState
    from tftune.tuner.measurement import Measurement
    from tftune.tuner.searchspace.config import AUTOTUNE, Config
    from tftune.tuner.study import Mode, RepeatCallback, Runner

    class Fake(Runner):
        def measure(
            self,
            config: Config,
            *,
            mode: Mode = Mode.TRAIN,
            on_repeat: RepeatCallback | None = None,
        ) -> Measurement:
            if mode is Mode.MODEL_ONLY:
                return Measurement(TrialState.COMPLETE, 20000.0, 0.9, repeats=(20000.0,))
            pool = config.threadpool_size or 2
            pars = [s.num_parallel_calls for s in config.sites.values() if s.num_parallel_calls]
            par = pars[0] if pars else 1
            eps = 240.0 * min(pool if par == AUTOTUNE else par, pool)
            wait = max(0.0, 1 - eps / 20000)
            return Measurement(
                TrialState.COMPLETE,
                eps,
                1 - wait,
                "duty_cycle",
                spread=0.02,
                input_wait_share=wait,
                repeats=(eps,),
            )

    return Fake()


@requires_tf
def test_public_api_with_an_injected_runner(tmp_path: Path) -> None:
    """`tftune.optimize()` end to end on real discovery, with the trials faked: the files
    it writes and what it returns."""
    import tftune
    from tftune.tuner.searchspace.config import load_config

    result = tftune.optimize(
        EXAMPLE,
        ["--steps", "10"],
        trials=8,
        runner=_fake_runner(),
        storage=str(tmp_path / "s.journal"),
        best_file=tmp_path / "best.json",
        json_file=tmp_path / "t.json",
        html_file=tmp_path / "t.html",
    )
    assert result.ceiling is not None and result.ceiling.limited_by == "pipeline"
    assert (result.best_config.threadpool_size or 0) >= 8
    assert load_config(result.best_file).threadpool_size == result.best_config.threadpool_size
    assert "num_parallel_calls=" in result.diff
    assert "private_threadpool_size" in result.snippet
    assert result.command.startswith("tftune run --config")
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["trials"]["complete"] + data["trials"]["pruned"] == 8
    assert (tmp_path / "t.html").exists()


@requires_tf
def test_a_script_without_its_own_tf_data_calls_is_told_what_is_searched(
    tmp_path: Path,
) -> None:
    """Keras `fit` on numpy arrays builds its tf.data pipeline inside Keras: nothing in
    the user's files to tune per call site, which the user is told before the trials."""
    import tftune

    script = tmp_path / "numpy_fit.py"
    script.write_text(
        "import numpy as np\nimport tensorflow as tf\n"
        "x = np.zeros((256, 4), 'float32')\n"
        "m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])\n"
        "m.compile('sgd', 'mse')\nm.fit(x, x[:, :1], batch_size=32, epochs=2, verbose=0)\n"
    )
    notes: list[str] = []
    result = tftune.optimize(
        script,
        [],
        trials=3,
        runner=_fake_runner(),
        storage=str(tmp_path / "s.journal"),
        best_file=tmp_path / "best.json",
        json_file=None,
        html_file=None,
        bounds=False,
        on_note=notes.append,
    )
    said = [n for n in notes if "no map, interleave, batch or prefetch call" in n]
    assert len(said) == 1 and "only the global knobs are searched" in said[0]
    assert notes.index(said[0]) < next(i for i, n in enumerate(notes) if "guided" in n)
    assert result.best_config.sites == {}
