#!/usr/bin/env bash
# Run every benchmark in turn (P1-P7, R1), printing their tables; extra arguments (e.g. --quick) are
# passed to each script. About 10-12 minutes on a 2-core machine; P6 needs the libero extra.
#
#   bench/run_all.sh            # full run
#   bench/run_all.sh --quick    # smoke run, ~2 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for script in p1_overhead p2_rollout_throughput p3_frame_cache p4_service p5_endpoint_pool p6_libero p7_hostile_input r1_recording; do
    echo "== bench/${script}.py $*"
    start=$(date +%s)
    "$PY" "bench/${script}.py" "$@"
    echo "(${script}: $(( $(date +%s) - start )) s)"
    echo
done
