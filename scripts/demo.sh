#!/usr/bin/env bash
# `make demo`: a simulated 4-node H200 cluster (real munged, slurmctld and slurmd; simulated GPUs)
# and an on-call drill: list nodes, drain a bad one, see the brake refuse a mass drain, resume.
# Whatever happens, the cluster is torn down on exit.
set -euo pipefail

STATE=$(mktemp -d /tmp/opsctl-demo.XXXXXX)
cleanup() {
  opsctl sim down --state-dir "$STATE" >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$'; printf ' %q' "$@"; printf '\n'; "$@"; }

step "Start a simulated 4-node cluster (8 x H200 per node)"
show opsctl sim up --nodes 4 --state-dir "$STATE"
export OPSCTL_CONFIG="$STATE/opsctl.toml" SLURM_CONF="$STATE/etc/slurm.conf"

step "On-call: what does the cluster look like?"
show opsctl nodes

step "A GPU on gpu-002 threw Xid 79 (fell off the bus): drain it"
show opsctl drain gpu-002 --reason "xid 79 on GPU 3" --dry-run
show opsctl drain gpu-002 --reason "xid 79 on GPU 3"
show scontrol show node gpu-002 | grep -E "State=|Reason="

step "A careless mass drain is refused by the blast-radius brake (exit 2, nothing applied)"
if show opsctl drain "gpu-[001,003-004]" --reason "rack check"; then
  echo "demo: the mass drain should have been refused" >&2
  exit 1
fi

step "The node is fixed: resume it (only drains opsctl made are resumed without --force)"
show opsctl resume gpu-002
show opsctl nodes

step "Audit trail"
show cat "$STATE/audit.jsonl"

step "Done; tearing the cluster down"
