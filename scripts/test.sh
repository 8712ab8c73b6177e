#!/usr/bin/env bash
# The project's one test command (README, .ci/run). As root on Debian it installs the system packages the
# suite needs when missing; then the README's quick start in a clean venv (scripts/quickstart.sh; skip it
# with QUICKSTART=0); then the package with its test extras into the `python3` on PATH (use a venv for a
# private install: README) and pytest with any arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  need=()
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
  if [ ${#need[@]} -gt 0 ]; then
    echo "scripts/test.sh: installing system packages: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  # The Debian package enables a service on :9090. The tests start their own servers on free ports, so the
  # service is stopped only through systemd; any other prometheus process is not ours to stop.
  if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus 2>/dev/null || true; fi
fi

if [ "${QUICKSTART:-1}" != "0" ]; then
  bash scripts/quickstart.sh
fi

python3 -m pip install -q --disable-pip-version-check -e ".[test]"
exec python3 -m pytest "$@"
