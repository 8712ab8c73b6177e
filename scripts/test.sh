#!/usr/bin/env bash
# The project's one test command (README, .ci/run): install the package with its test extras and,
# when run as root on Debian, the system packages the suite needs; then run pytest.
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
  # The Debian prometheus package starts a service on :9090; the tests start their own servers.
  if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus 2>/dev/null || true; fi
  pkill -x prometheus 2>/dev/null || true
fi

python3 -m pip install -q --disable-pip-version-check -e ".[test]"
exec python3 -m pytest "$@"
