#!/usr/bin/env bash
# Which production lines the simulator's scenarios execute: coverage.py over a sweep slice
# of the raft and the metadata scenario and of the kafka scenario in each of its shapes
# (every fault on), printed per package, then the files of those packages with the most
# lines no run reached (docs/simulation.md, "What the sweeps cover").
#
#   scripts/sim-coverage.sh [RAFT_SEEDS] [METADATA_SEEDS] [DURATION_S] [KAFKA_SEEDS]
#                                                          (default 1-3 1-2 30 1-1)
#
# The kafka slices (KAFKA_SEEDS each, 20 s runs): idempotent producers with aiokafka's
# lanes beside them (its ApiVersions, ListOffsets, LeaveGroup, ...) and KIP-848 members;
# a compacted topic of compressed batches under a descriptor limit; reassignments over
# five brokers with the lifecycle faults; transactions under the authorizer, with ACLs
# that refuse, and delayed markers; acks=1 with the data-plane faults. The classic group lanes run in every one of them.
# Needs the test extra (coverage). Two jobs per slice: `1-2 1-1 30 1-1` took 4.5 and 7.7
# minutes on a shared two-core machine (load 5-6). COVERAGE_JSON=FILE keeps coverage.py's JSON report
# (every file's missed lines) there.
set -euo pipefail
cd "$(dirname "$0")/.."
RAFT_SEEDS=${1:-1-3}
METADATA_SEEDS=${2:-1-2}
DURATION=${3:-30}
KAFKA_SEEDS=${4:-1-1}
KAFKA_DURATION=20
PY=${PYTHON:-.venv/bin/python}
PACKAGES=raft,metadata,broker,log,kraft,protocol
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
sweep() {  # LABEL SCENARIO SEEDS DURATION ARGS...
    local label=$1 scenario=$2 seeds=$3 duration=$4
    shift 4
    "$PY" -m coverage run --rcfile="$data/rc" -m sim.cli sweep --scenario "$scenario" \
        --seeds "$seeds" --duration "$duration" --jobs 2 --quiet --keep "$data/failures" \
        "$@" 2>/dev/null | tail -1 | sed "s/^/$label: /" || true  # a failing seed still counts
}
sweep raft raft "$RAFT_SEEDS" "$DURATION" --faults all
sweep metadata metadata "$METADATA_SEEDS" "$DURATION" --faults all
sweep kafka-idempotent kafka "$KAFKA_SEEDS" "$KAFKA_DURATION" --faults all --idempotent \
    --aiokafka --consumer-protocol
# The pure-Python validator (log/validator.py, the native module's specification) in this
# slice: same digests as the native one, and its lines are reached.
KRAFT_NATIVE=0 sweep kafka-compact kafka "$KAFKA_SEEDS" "$KAFKA_DURATION" --faults all \
    --compact --compression --descriptor-limit 200
sweep kafka-reassign kafka "$KAFKA_SEEDS" "$KAFKA_DURATION" --reassign --brokers 5 \
    --faults all,shutdown-broker,shutdown-controller,stall-crash
sweep kafka-transactions kafka "$KAFKA_SEEDS" "$KAFKA_DURATION" --transactions --authorizer \
    --acls --faults all,delay-txn
sweep kafka-acks1 kafka "$KAFKA_SEEDS" "$KAFKA_DURATION" --acks 1 --quotas --faults \
    all,leader-change-during-catch-up,kill-leader-during-catch-up,successive-minority-leaders,cut-leader-after-isr-change
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
