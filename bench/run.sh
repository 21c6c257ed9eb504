#!/usr/bin/env bash
# Run every benchmark in bench/ (bench_*.py, fault_to_drain.py, rehearsal.py, failure_to_resume.py,
# emulation_cost.py), one after another; any failing one fails the run. bench/soak_memory.py (30 min)
# is left out: run it by itself.
# Benchmarks print one line each (add --json for machine-readable output). Run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
status=0
for bench in bench/bench_*.py bench/fault_to_drain.py bench/rehearsal.py bench/failure_to_resume.py \
    bench/emulation_cost.py; do
  echo "== $bench"
  "$PY" "$bench" "$@" || status=1
done
exit $status
