"""``tftune optimize --space FILE``: a JSON file that narrows or extends the search space
(choices, a fixed value, a knob added, or one left as written)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tftune.core.errors import ConfigError
from tftune.core.userfiles import read_json
from tftune.tuner.searchspace.config import (
    AUTOTUNABLE_KNOBS,
    AUTOTUNE,
    AUTOTUNE_JSON,
    BOOL_SITE_KNOBS,
    MAX_KNOB,
    SITE_KNOBS,
)
from tftune.tuner.searchspace.space import (
    GLOBAL_KNOB_NAMES,
    Knob,
    KnobValue,
    LeftOut,
    SearchSpace,
    format_value,
    split_knob,
)


def _parse_value(where: str, knob_field: str, raw: object) -> KnobValue:
    if raw is None:
        return None
    if knob_field == "mixed_precision":
        if raw in ("off", "mixed_float16", "mixed_bfloat16"):
            return None if raw == "off" else str(raw)
        raise ConfigError(f"{where}: mixed_precision must be off, mixed_float16 or mixed_bfloat16")
    if knob_field == "deterministic" or knob_field in BOOL_SITE_KNOBS:
        if isinstance(raw, bool):
            return raw
        raise ConfigError(f"{where}: {knob_field} must be true or false, got {raw!r}")
    if knob_field in AUTOTUNABLE_KNOBS and raw in (AUTOTUNE_JSON, AUTOTUNE):
        return AUTOTUNE
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_KNOB:
        allowed = '"AUTOTUNE" or ' if knob_field in AUTOTUNABLE_KNOBS else ""
        raise ConfigError(f"{where}: expected {allowed}an integer in 1..{MAX_KNOB}, got {raw!r}")
    return raw


def apply_space_file(
    space: SearchSpace, path: str | os.PathLike[str], known_sites: Iterable[str] | None
) -> SearchSpace:
    """Narrow or extend `space` with a JSON file::

        {"knobs": {"threadpool_size": [8, 16, 32],            # choices
                   "train.py:42/num_parallel_calls": "AUTOTUNE",  # fixed
                   "deterministic": [true, false],             # added
                   "mixed_precision": null}}                   # left out (as written)

    Errors name the file and the knob (`ConfigError`). ``known_sites=None`` skips the
    check that call sites exist (to validate the file before discovery has run).
    """
    p = Path(path)
    data = read_json(p, ConfigError, "space file")
    if not isinstance(data, dict) or not isinstance(data.get("knobs"), dict):
        raise ConfigError(f'{p}: expected {{"knobs": {{name: choices}}}}')
    unknown_top = sorted(set(data) - {"knobs", "schema"})
    if unknown_top:
        raise ConfigError(f"{p}: unknown field {unknown_top[0]!r}")
    sites = None if known_sites is None else set(known_sites)
    knobs = {k.name: k for k in space.knobs}
    order = list(knobs)
    fixed = dict(space.fixed)
    left = [lo for lo in space.left_out]
    for name, raw in data["knobs"].items():
        where = f"{p}: knobs[{name!r}]"
        site, knob_field = split_knob(name)
        if site is not None:
            if knob_field not in SITE_KNOBS:
                raise ConfigError(f"{where}: unknown knob {knob_field!r}")
            if sites is not None and site not in sites:
                raise ConfigError(f"{where}: call site {site!r} was not found in the script")
        elif name not in GLOBAL_KNOB_NAMES:
            raise ConfigError(f"{where}: unknown knob")
        left = [lo for lo in left if lo.name != name]
        existing = knobs.get(name)
        written: KnobValue = existing.as_written if existing else None
        if raw is None:
            knobs.pop(name, None)
            fixed.pop(name, None)
            left.append(LeftOut(name, f"left as written by {p.name}"))
            continue
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise ConfigError(f"{where}: empty list of choices")
        parsed = tuple(dict.fromkeys(_parse_value(where, knob_field, v) for v in values))
        if len(parsed) == 1:
            knobs.pop(name, None)
            fixed[name] = parsed[0]
            left.append(LeftOut(name, f"fixed at {format_value(parsed[0])} by {p.name}"))
            continue
        if written not in parsed:
            if existing is None and knob_field == "num_parallel_calls":
                written = 1 if 1 in parsed else None
            if written not in parsed:
                parsed = (*parsed, written)
        knobs[name] = Knob(name, knob_field, site, parsed, written, f"from {p.name}")
        if name not in order:
            order.append(name)
    return SearchSpace(
        tuple(knobs[n] for n in order if n in knobs),
        fixed,
        tuple(left),
        space.warnings,
        space.cores,
    )
