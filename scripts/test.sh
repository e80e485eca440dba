#!/usr/bin/env bash
# Install kraft-py with its test and Spark extras into ./.venv, then run the whole suite:
# lint, format check, and pytest (extra arguments go to pytest). pytest's exit code 5
# ("no tests collected") is a failure here, like any other non-zero code.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,spark
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/pytest "$@"
