"""The public API (`tftune`): typed, with its result and error types exported, and light
to import."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

import tftune


def test_optimize_has_a_typed_signature_without_catch_all_options() -> None:
    sig = inspect.signature(tftune.optimize)
    kinds = {p.kind for p in sig.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds
    assert inspect.Parameter.VAR_POSITIONAL not in kinds
    assert sig.return_annotation == "OptimizeResult"
    untyped = [n for n, p in sig.parameters.items() if p.annotation is inspect.Parameter.empty]
    assert untyped == []


def test_optimize_takes_the_tuners_options_with_the_same_defaults() -> None:
    """The front door passes every option through and draws the HTML page itself: its
    parameters are the tuner's, less the renderer, with equal defaults."""
    from tftune.tuner.optimize import optimize as tuner_optimize

    public = inspect.signature(tftune.optimize).parameters
    inner = dict(inspect.signature(tuner_optimize).parameters)
    assert inner.pop("render_html").default is None
    assert list(public) == list(inner)
    for name, p in public.items():
        assert (p.kind, p.default) == (inner[name].kind, inner[name].default), name


@pytest.mark.parametrize("name", ["OptimizeResult", "Config", "UserError"])
def test_result_config_and_error_types_are_exported(name: str) -> None:
    assert name in tftune.__all__
    exported = getattr(tftune, name)
    namespace: dict[str, object] = {}
    exec(f"from tftune import {name}", namespace)
    assert namespace[name] is exported


def test_exported_types_are_the_ones_the_package_uses() -> None:
    from tftune.core.errors import ConfigError, UserError
    from tftune.tuner.config import Config
    from tftune.tuner.optimize import OptimizeResult

    assert tftune.OptimizeResult is OptimizeResult
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
