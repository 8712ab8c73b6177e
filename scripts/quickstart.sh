#!/usr/bin/env bash
# The README's quick start, exactly as a new user runs it: a clean virtual environment, `pip install -e .`
# (no extras), then `stallscope demo --no-dashboard`. Checks that it exits 0, prints the A/B table and the
# findings, and writes report.html; prints its wall time. scripts/test.sh runs it before the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-quickstart.XXXXXX")
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
cd "$work"           # the demo writes ./stallscope-demo, as in the README; keep it out of the checkout
t0=$(date +%s)
# The README's first command, with --no-dashboard:
(pip install -q --disable-pip-version-check -e "$root" && stallscope demo --no-dashboard) > out.txt 2> err.txt || {
  echo "quickstart: FAILED (exit $?)"; tail -n 20 err.txt; exit 1; }
wall=$(( $(date +%s) - t0 ))

fail() { echo "quickstart: FAILED: $1"; tail -n 40 out.txt; tail -n 20 err.txt; exit 1; }
grep -q "stallscope repro: starvation (off → on)" err.txt && grep -q "ITL P99" err.txt || fail "no A/B table (off → on)"
grep -q "off/vllm" out.txt && grep -q "on/vllm" out.txt || fail "the analysis names neither arm (off/vllm, on/vllm)"
grep -q "decode_starvation" out.txt || fail "no decode_starvation finding in the output"
grep -Eq "findings: [1-9]" out.txt || fail "no finding counted"
[ -s stallscope-demo/report.html ] || fail "stallscope-demo/report.html was not written"
echo "quickstart: pip install -e . && stallscope demo --no-dashboard: exit 0, A/B table, finding, report.html" \
     "($(wc -c < stallscope-demo/report.html) bytes); wall ${wall} s (install included)"
