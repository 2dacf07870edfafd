"""`OptimizeOptions`: the one options type of a tuning run. Its values are checked once,
when it is built (one line naming the flag and the value); overrides by field name; and
it imports neither the study nor TensorFlow."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest

from tftune.core.errors import ConfigError, UserError
from tftune.tuner.options import OptimizeOptions, with_overrides


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"trials": 0}, "--trials 0: must be at least 1 (or 'auto')"),
        ({"trials": "5"}, "--trials '5': expected a number or 'auto'"),
        ({"trials": True}, "--trials True: expected a number or 'auto'"),
        ({"objective": "fast"}, "--objective 'fast': expected one of throughput, gpu-util, both"),
        ({"seed": 1.5}, "--seed 1.5: expected a whole number"),
        ({"workers": 0}, "--workers 0: must be at least 1"),
        ({"repeats": 0}, "--repeats 0: must be at least 1"),
        ({"gpus_per_trial": 0}, "--gpus-per-trial 0: must be at least 1"),
        ({"cpus_per_trial": -2}, "--cpus-per-trial -2: must be at least 1"),
        ({"window_s": "3"}, "--window '3': expected a number of seconds"),
        ({"timeout_s": [60]}, "--timeout [60]: expected a number of seconds"),
        ({"step_timeout_s": 0}, "--step-timeout 0: must be more than 0"),
        ({"batch_size": "64:8"}, "--batch-size '64:8': need 1 <= MIN <= MAX"),
        ({"batch_size": "big"}, "--batch-size 'big': expected N (fixed) or MIN:MAX (bounds)"),
        ({"batch_size": 32}, "--batch-size 32: expected a string"),
        (
            {"data_service": "localhost"},
            "--data-service 'localhost': expected grpc://HOST:PORT (the dispatcher)",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option_and_the_value(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        OptimizeOptions(**given)
    assert isinstance(err.value, UserError)  # the CLI prints it as one line, exit 1
    assert str(err.value) == message


def test_replacing_a_field_checks_the_new_value() -> None:
    options = OptimizeOptions(trials=5)
    with pytest.raises(ConfigError, match=r"^--workers 0: must be at least 1$"):
        dataclasses.replace(options, workers=0)


def test_the_defaults_and_good_values_pass() -> None:
    default = OptimizeOptions()
    assert (default.trials, default.seed, default.workers) == ("auto", 0, 1)
    assert (default.best_file, default.html_file, default.json_file) == (
        "tftune-best.json",
        None,
        None,
    )
    good = OptimizeOptions(
        trials=3,
        objective="both",
        batch_size="8:64",
        data_service="grpc://dispatcher:5000",
        window_s=0.5,
        repeats=1,
        timeout_s=60,
        step_timeout_s=30.0,
        workers=2,
        cpus_per_trial=1,
    )
    assert good.trials == 3 and good.batch_size == "8:64"  # kept as the user spelled them


def test_options_are_frozen() -> None:
    options = OptimizeOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.trials = 3  # type: ignore[misc]


def test_where_resolves_the_default_storage_and_study_name() -> None:
    assert OptimizeOptions().where("dir/train.py") == ("tftune-study.journal", "tftune-train")
    chosen = OptimizeOptions(storage="s.journal", study_name="mine")
    assert chosen.where("dir/train.py") == ("s.journal", "mine")


def test_outputs_name_each_file_with_its_flag() -> None:
    options = OptimizeOptions(json_file="t.json")
    assert options.outputs() == (("tftune-best.json", "--best"), ("t.json", "--json"), (None, "-o"))


def test_overrides_replace_fields_by_name() -> None:
    base = OptimizeOptions(seed=7)
    assert with_overrides(base, {}, "f") is base
    assert with_overrides(None, {}, "f") == OptimizeOptions()
    assert with_overrides(base, {"trials": 4}, "f") == OptimizeOptions(seed=7, trials=4)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("window", r"^f\(\) got an unknown option 'window'; did you mean 'window_s'\?$"),
        ("render_html", r"^f\(\) got an unknown option 'render_html'$"),
    ],
)
def test_an_unknown_override_is_a_type_error_naming_it(name: str, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        with_overrides(None, {name: 1}, "f")


def test_importing_the_options_imports_neither_the_study_nor_tensorflow() -> None:
    probe = "import sys, json; import tftune.tuner.options; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    heavy = {m for m in loaded if m.split(".")[0] in ("tensorflow", "optuna", "numpy", "keras")}
    assert heavy == set()
    assert not {m for m in loaded if m.startswith(("tftune.tuner.study", "tftune.tuner.optimize"))}
