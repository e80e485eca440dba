#!/usr/bin/env bash
# Install kraft-py with its test and Spark extras into ./.venv, then run the whole suite:
# lint, format check, type check (mypy on the production packages) and pytest (extra
# arguments go to pytest). pytest's exit code 5 ("no tests collected") is a failure here,
# like any other non-zero code.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,spark
# Debian packages the tests drive: kcat (one of the real clients of the admin tests);
# iproute2, iptables and faketime (kraft-jepsen's namespaces, cuts and clock faults);
# prometheus (a real Prometheus server scrapes a cluster in tests/kraft/test_prometheus.py).
missing=""
for pair in kcat:kcat ip:iproute2 tc:iproute2 iptables:iptables faketime:faketime \
    prometheus:prometheus; do
    if ! command -v "${pair%%:*}" >/dev/null 2>&1; then missing="$missing ${pair##*:}"; fi
done
if [ -n "$missing" ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/pytest "$@"
