"""Where the tests find the repository's files, wherever a test module sits."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
REALSCRIPTS = TESTS / "realscripts"
EXAMPLES = ROOT / "examples"
