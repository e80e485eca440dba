#!/usr/bin/env bash
# Create ./.venv with Python 3.11, install kraft-py into it with the given extras and build
# kraft_native (native/) into it. Sourced by scripts/run.sh and scripts/test.sh; needs only
# Python 3.11 and the registries (PyPI, crates.io, and apt for a Rust toolchain if missing).
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
.venv/bin/python -m pip install --quiet -e ".[native${extras:+,$extras}]"
# kraft_native (native/): the produce path's per-record validation in Rust, built into the
# venv (log/validator.py falls back to Python without it, logging one line). It needs cargo
# and rustc >= 1.85: rustup's if present, else Debian's rustc-web/cargo-web (bookworm's plain
# rustc is 1.63, older than PyO3 and cramjam's decoders need).
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    toolchain="cargo-web rustc-web"
    if [ -z "$(apt-cache policy rustc-web 2>/dev/null | sed -n 's/ *Candidate: //p' | grep -v none)" ]; then
        toolchain="cargo rustc"  # distributions after bookworm ship a recent-enough rustc
    fi
    # shellcheck disable=SC2086  # one word per package
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $toolchain
fi
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop --quiet --release \
    --manifest-path native/Cargo.toml
