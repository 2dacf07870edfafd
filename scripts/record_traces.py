"""Record the traces the analysis tests read, with the installed TensorFlow
(tests/fixtures/traces/README.md).

    python scripts/record_traces.py            # every case, a new set for this TF version
    python scripts/record_traces.py CASE ...   # only these cases, into this TF's set
    python scripts/record_traces.py --list     # the cases, and whether this TF's set is current

Each case of tests/tracegen*.py is run under the profiler (`tracegen.record`, a subprocess
of real TensorFlow) and its logdir is copied to tests/fixtures/traces/tf-<major.minor>/<case>/;
`manifest.json` records the TensorFlow and Python versions and each case's parameters and
source digest. Then run the tests that read them, look at the sizes it prints, and commit
the set.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import recorded_traces as rt  # noqa: E402  (found through the path set above)
import tracegen  # noqa: E402


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def record_into(folder: Path, case: tracegen.Case) -> dict[str, Any]:
    """Record `case` and store its logdir, packed, at `folder/<case>`; its manifest entry."""
    with tempfile.TemporaryDirectory(prefix=f"tftune-record-{case.name}-") as tmp:
        logdir = tracegen.record(case, Path(tmp))
        target = folder / case.name
        if target.exists():
            shutil.rmtree(target)
        return rt.pack(logdir, target)


def main(argv: list[str]) -> int:
    version = rt.installed_tensorflow()
    if version is None:
        print("tensorflow is not installed: nothing can be recorded", file=sys.stderr)
        return 1
    cases = rt.all_cases()
    folder = rt.TRACES / rt.series(version)
    existing = rt.load_set(folder)
    if argv == ["--list"]:
        stale = set(existing.stale(cases)) if existing else set(cases)
        for name in sorted(cases):
            print(f"{name:24} {'stale' if name in stale else 'current'}")
        return 0
    unknown = sorted(set(argv) - set(cases))
    if unknown:
        print(f"no such case: {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    chosen = [cases[n] for n in sorted(cases) if not argv or n in argv]
    stored: dict[str, dict[str, Any]] = {}
    if argv and existing is not None and existing.manifest.get("tensorflow") == version:
        keep = ("files", "bytes")
        for n, e in existing.manifest["cases"].items():
            if n in cases:
                stored[n] = {k: e[k] for k in keep}
    elif argv:
        print(f"{folder.name} is missing or from another TensorFlow: record every case")
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    for case in chosen:
        stored[case.name] = record_into(folder, case)
        mb = stored[case.name]["bytes"] / 1e6
        print(
            f"recorded {case.name:24} {mb:6.2f} MB, {_size(folder / case.name) / 1e6:.2f} MB packed"
        )
    for gone in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in cases):
        shutil.rmtree(gone)
        print(f"removed  {gone.name} (no such case any more)")
    kept = {n: c for n, c in cases.items() if n in stored}
    manifest = rt.manifest_of(kept, stored)
    (folder / rt.MANIFEST).write_text(_json(manifest), encoding="utf-8")
    print(f"{folder.relative_to(ROOT)}: {len(kept)} cases, {_size(folder) / 1e6:.2f} MB")
    return 0


def _json(data: object) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
