"""The public API (`tftune`): typed, with its options, result and error types exported,
and light to import; `tftune.optimize`'s keywords become one `OptimizeOptions`."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
from typing import Any

import pytest

import tftune

# The keywords `tftune.optimize` took before its options became one type (issue 29):
# every one of them is still accepted, spelled the same.
KEYWORDS_BEFORE_ISSUE_29 = (
    "trials", "timeout_s", "objective", "storage", "study_name", "seed", "guided",
    "space_file", "batch_size", "best_file", "json_file", "html_file", "window_s",
    "repeats", "step_timeout_s", "bounds", "confirm", "profile", "runner", "workers",
    "gpus_per_trial", "cpus_per_trial", "data_service", "on_trial", "on_start", "on_note",
    "invocation", "environment",
)  # fmt: skip


def test_optimize_is_typed_and_its_only_catch_all_is_the_options_overrides() -> None:
    sig = inspect.signature(tftune.optimize)
    catch_all = [p for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD]
    assert [p.name for p in catch_all] == ["overrides"]
    assert inspect.Parameter.VAR_POSITIONAL not in {p.kind for p in sig.parameters.values()}
    assert sig.return_annotation == "OptimizeResult"
    untyped = [n for n, p in sig.parameters.items() if p.annotation is inspect.Parameter.empty]
    assert untyped == []


def test_optimize_accepts_every_keyword_it_took_before() -> None:
    fields = {f.name for f in dataclasses.fields(tftune.OptimizeOptions)}
    named = set(inspect.signature(tftune.optimize).parameters)
    assert [k for k in KEYWORDS_BEFORE_ISSUE_29 if k not in fields | named] == []


@pytest.fixture
def tuner_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """What the facade hands the tuner, with the tuner itself replaced (no study runs)."""
    import tftune.tuner.optimize as tuner_optimize

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tuner_optimize, "optimize", lambda *a: calls.append(a) or "result")
    return calls


def test_optimize_keywords_become_the_options(tuner_calls: list[tuple[Any, ...]]) -> None:
    from tftune.tuner.options import OptimizeOptions

    assert tftune.optimize("train.py", trials=5) == "result"
    ((script, args, options, hooks),) = tuner_calls
    assert (script, tuple(args)) == ("train.py", ())
    assert options == OptimizeOptions(trials=5)
    assert hooks.render_html is None  # no html_file: no page, no renderer imported


def test_optimize_overrides_replace_fields_of_the_options_given(
    tuner_calls: list[tuple[Any, ...]],
) -> None:
    from tftune._notebook import tuning_page
    from tftune.tuner.options import OptimizeOptions

    base = OptimizeOptions(seed=3, workers=2, trials=9)
    notes: list[str] = []
    tftune.optimize(
        "train.py", ["--epochs", "1"], base, trials=4, html_file="r.html", on_note=notes.append
    )
    ((_script, args, options, hooks),) = tuner_calls
    assert list(args) == ["--epochs", "1"]
    assert options == dataclasses.replace(base, trials=4, html_file="r.html")
    assert (options.seed, options.workers) == (3, 2)  # what was not overridden is kept
    assert hooks.render_html is tuning_page
    hooks.on_note("a note")  # the caller's callback, beside the progress's
    assert notes == ["a note"]
    tftune.optimize("train.py", options=base)
    assert tuner_calls[-1][2] is base


def test_optimize_names_an_unknown_option(tuner_calls: list[tuple[Any, ...]]) -> None:
    with pytest.raises(TypeError, match=r"unknown option 'trails'; did you mean 'trials'\?"):
        tftune.optimize("train.py", trails=5)
    assert tuner_calls == []


def test_optimize_refuses_a_bad_value_with_one_line_naming_it(
    tuner_calls: list[tuple[Any, ...]],
) -> None:
    with pytest.raises(tftune.UserError) as err:
        tftune.optimize("train.py", trials=0)
    assert str(err.value) == "--trials 0: must be at least 1 (or 'auto')"
    assert tuner_calls == []


@pytest.mark.parametrize("name", ["OptimizeOptions", "OptimizeResult", "Config", "UserError"])
def test_result_config_and_error_types_are_exported(name: str) -> None:
    assert name in tftune.__all__
    exported = getattr(tftune, name)
    namespace: dict[str, object] = {}
    exec(f"from tftune import {name}", namespace)
    assert namespace[name] is exported


def test_exported_types_are_the_ones_the_package_uses() -> None:
    from tftune.core.errors import ConfigError, UserError
    from tftune.tuner.optimize import OptimizeResult
    from tftune.tuner.options import OptimizeOptions
    from tftune.tuner.searchspace.config import Config

    assert tftune.OptimizeResult is OptimizeResult
    assert tftune.OptimizeOptions is OptimizeOptions
    assert tftune.Config is Config
    assert tftune.UserError is UserError
    assert issubclass(ConfigError, tftune.UserError)  # what optimize raises on bad options


def test_import_tftune_imports_neither_tensorflow_nor_optuna() -> None:
    probe = "import sys, json, tftune; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    heavy = {m for m in loaded if m.split(".")[0] in ("tensorflow", "optuna", "keras")}
    assert heavy == set()
    assert "tftune" in loaded and "tftune.tuner.optimize" not in loaded
