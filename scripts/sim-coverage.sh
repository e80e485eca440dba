#!/usr/bin/env bash
# Which production lines the raft and metadata scenarios execute: coverage.py over a sweep
# slice of each (every fault on), printed per package, then the files of those packages
# with the most lines no run reached (docs/simulation.md, "What the sweeps cover").
#
#   scripts/sim-coverage.sh [RAFT_SEEDS] [METADATA_SEEDS] [DURATION_S]   (default 1-3 1-2 30)
#
# Needs the test extra (coverage). One job per scenario: a few minutes on an idle core.
# COVERAGE_JSON=FILE keeps coverage.py's JSON report (every file's missed lines) there.
set -euo pipefail
cd "$(dirname "$0")/.."
RAFT_SEEDS=${1:-1-3}
METADATA_SEEDS=${2:-1-2}
DURATION=${3:-30}
PY=${PYTHON:-.venv/bin/python}
PACKAGES=raft,metadata,broker,log,kraft
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
cat >"$data/rc" <<EOF
[run]
parallel = true
concurrency = multiprocessing
source = $PACKAGES
data_file = $data/.coverage
EOF
# kraft-sim re-executes itself unless PYTHONHASHSEED is 0, which would leave coverage behind.
export PYTHONHASHSEED=0
for spec in "raft $RAFT_SEEDS" "metadata $METADATA_SEEDS"; do
    read -r scenario seeds <<<"$spec"
    "$PY" -m coverage run --rcfile="$data/rc" -m sim.cli sweep --scenario "$scenario" \
        --seeds "$seeds" --faults all --duration "$DURATION" --jobs 1 --quiet 2>/dev/null \
        | tail -1 | sed "s/^/$scenario: /"
done
"$PY" -m coverage combine --rcfile="$data/rc" -q
"$PY" -m coverage json --rcfile="$data/rc" -q -o "$data/coverage.json"
if [ -n "${COVERAGE_JSON:-}" ]; then cp "$data/coverage.json" "$COVERAGE_JSON"; fi
"$PY" - "$data/coverage.json" "$PACKAGES" <<'EOF'
import json
import sys

files = json.load(open(sys.argv[1]))["files"]
packages = sys.argv[2].split(",")
print(f"{'package':10} {'lines':>7} {'run':>7} {'cover':>6}")
total_lines = total_run = 0
for package in packages:
    mine = [f["summary"] for name, f in files.items() if name.startswith(package + "/")]
    lines = sum(s["num_statements"] for s in mine)
    run = sum(s["covered_lines"] for s in mine)
    total_lines, total_run = total_lines + lines, total_run + run
    print(f"{package + '/':10} {lines:7} {run:7} {100 * run / max(lines, 1):5.1f}%")
print(f"{'total':10} {total_lines:7} {total_run:7} {100 * total_run / max(total_lines, 1):5.1f}%")
print("\nmost lines never run (file: missed of statements):")
missed = sorted(
    ((f["summary"]["missing_lines"], f["summary"]["num_statements"], name)
     for name, f in files.items()),
    reverse=True,
)
for count, lines, name in missed[:25]:
    print(f"  {name}: {count} of {lines}")
EOF
