"""Regenerate the golden files of tests/golden/, on purpose (tests/golden/README.md).

    python scripts/regen_golden.py           # every case
    python scripts/regen_golden.py CASE ...  # only these cases (folder names)

It writes what tftune renders now for each case, says which files changed, and removes
the files of cases that are gone. Then read `git diff tests/golden/`: every change there
is a change users will see, and it is committed with the code that made it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "golden")]

import golden_cases as g  # noqa: E402  (found through the path set above)


def write_case(case: g.Case, files: dict[str, str]) -> list[str]:
    """Write one case's files; what changed, as lines to print."""
    folder = g.GOLDEN / case.name
    folder.mkdir(exist_ok=True)
    said = []
    for name, text in files.items():
        path = folder / name
        data = text.encode("utf-8")
        old = path.read_bytes() if path.is_file() else None
        if old != data:
            path.write_bytes(data)  # bytes: no newline translation on any platform
            said.append(f"{'new' if old is None else 'changed'}  {path.relative_to(ROOT)}")
    for path in sorted(folder.iterdir()):
        if path.name not in files:
            path.unlink()
            said.append(f"removed  {path.relative_to(ROOT)}")
    return said


def remove_gone_cases() -> list[str]:
    """Remove the files of cases that are no longer in golden_cases.py."""
    said = []
    names = {c.name for c in g.CASES}
    for path in sorted(g.GOLDEN.glob("*/*")):
        if path.parent.name not in names and path.name in g.ALL_FILES:
            path.unlink()
            said.append(f"removed  {path.relative_to(ROOT)}")
            if not any(path.parent.iterdir()):
                path.parent.rmdir()
    return said


def main(argv: list[str]) -> int:
    names = {c.name for c in g.CASES}
    unknown = sorted(set(argv) - names)
    if unknown:
        print(f"no such case: {', '.join(unknown)} (cases: {', '.join(sorted(names))})")
        return 2
    chosen = [c for c in g.CASES if not argv or c.name in argv]
    rendered = [(case, g.render(case)) for case in chosen]  # all of them before any write
    said = [line for case, files in rendered for line in write_case(case, files)]
    said += remove_gone_cases() if not argv else []
    print("\n".join(said) if said else "golden files unchanged")
    count = sum(len(g.files_of(c)) for c in g.CASES)
    print(f"{count} golden files in {g.GOLDEN.relative_to(ROOT)}/; review: git diff tests/golden/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
