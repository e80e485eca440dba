#!/usr/bin/env bash
# Create ./.venv with Python 3.11 and install kraft-py into it with the given extras.
# Sourced by scripts/run.sh and scripts/test.sh; needs only Python 3.11 and the registries.
set -euo pipefail
extras="${1:-}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
            python="$candidate"
            break
        fi
    done
fi
if [ -z "$python" ]; then
    echo "kraft-py needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
# A venv whose creation was interrupted (Ctrl-C during the first set-up) has a python but
# no pip: make it again rather than fail on it forever.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    rm -rf .venv
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}"
