#!/usr/bin/env bash
# Install kraft-py into ./.venv, format ./data on first use, and start the embedded default:
# a single-node combined broker+controller on localhost:9092.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
if [ ! -f data/meta.properties ]; then
    .venv/bin/kraft-server format -t "$(.venv/bin/kraft-server random-uuid)" \
        -c config/server.properties
fi
exec .venv/bin/kraft-server start config/server.properties
