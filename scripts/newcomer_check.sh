#!/usr/bin/env bash
# A newcomer's first contact, as the README's quick start has it: a fresh clone, a fresh
# venv, the non-editable install it names, then its first command from the checkout root
# (--trials 2 to keep it short). The child that runs the script must import the installed
# tftune, not the checkout's own tftune/ folder (it once did, and every run failed).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/tftune"
cd "$work/tftune"
python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
quiet() { "$@" 2> >(grep -v "WARNING: Location" >&2); }  # this workplace's pip config
quiet python -m pip install -q --upgrade pip
quiet pip install -q ".[tensorflow]"
set +e
out="$(tftune optimize examples/latency_bound.py --trials 2 2>&1)"
rc=$?
set -e
echo "$out" | tail -45
if [ $rc -ne 0 ] || ! grep -q "^winner:" <<<"$out" || ! grep -q "tuned" <<<"$out"; then
  echo "newcomer check: FAILED (exit code $rc)"
  exit 1
fi
echo "newcomer check: passed"
