#!/usr/bin/env bash
# Install kraft-py with its test and Spark extras into ./.venv, then run the whole suite:
# lint, format check, and pytest (extra arguments go to pytest). pytest's exit code 5
# ("no tests collected") is a failure here, like any other non-zero code.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,spark
# kcat (Debian package) is one of the real clients the admin tests drive.
if ! command -v kcat >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq kcat
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/pytest "$@"
