#!/usr/bin/env bash
# `make demo`: the main job end to end on the built-in lab.
#   1. Provision: boot the nspawn lab (a head and GPU machines with simulated H200s) and converge it
#      with the real playbook, `ansible-playbook -i inventory/lab site.yml`.
#   2. On call in the lab: preflight checks each machine against the H200 profile; a GPU throws
#      XID 79; `opsctl health` finds it, remediation drains that node alone through the
#      guardrails, the node is healed and resumed.
#   3. Train: launch the bundled RL job (SFT, then asynchronous RL on 2-digit arithmetic) on a
#      simulated Slurm cluster with real slurmctld/slurmd and a real Prometheus, and watch it finish;
#      the watcher ends with the learning curve.
# The lab machines carry Debian's python3 only, so the training job runs on the simulated cluster,
# whose slurmd run on this host (docs/lab.md says what each environment can and cannot prove).
# Whatever happens, everything started here is torn down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

LAB_NODES=${DEMO_LAB_NODES:-2}
SIM_STATE=$(mktemp -d /tmp/opsctl-demo.XXXXXX)
RUN="$SIM_STATE/runs/demo"
cleanup() {
  set +e
  opsctl sim down --state-dir "$SIM_STATE" >/dev/null 2>&1
  opsctl lab down >/dev/null 2>&1
  rm -rf "$SIM_STATE"
}
trap cleanup EXIT INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$'; printf ' %q' "$@"; printf '\n'; "$@"; }
# Run a command that is expected to exit non-zero (e.g. `opsctl health` on an unhealthy node).
expect_rc() { local want=$1; shift; printf '$'; printf ' %q' "$@"; printf '\n'; local rc=0; "$@" || rc=$?
  [ "$rc" = "$want" ] || { echo "demo: expected exit $want, got $rc" >&2; exit 1; }; }

step "1. Provision: boot the lab (head + $LAB_NODES GPU machines, simulated H200 and ConnectX-7)"
show opsctl lab up --nodes "$LAB_NODES"
step "Converge it with the real playbook (hardware-only steps are skipped and say so)"
show ansible-playbook -i inventory/lab site.yml

step "2. On call in the lab: reach its Slurm and Prometheus from here"
eval "$(opsctl lab connect)"
show opsctl nodes
step "Preflight: every GPU machine matches the H200 profile (GPUs, HCAs, NVMe) and Slurm's GRES"
show opsctl preflight
step "GPU 5 on gpu-002 falls off the bus (XID 79)"
show opsctl lab inject gpu-002 xid=79,gpu=5
# Prometheus was just restarted by the converge and scrapes every 5 s: wait (at most a minute)
# until its series carry the fault, i.e. until `opsctl health` says unhealthy (exit 1).
for _ in $(seq 1 30); do
  rc=0; opsctl health --json >/dev/null 2>&1 || rc=$?
  [ "$rc" = 1 ] && break
  sleep 2
done
expect_rc 1 opsctl health
expect_rc 1 opsctl health --remediate --dry-run
expect_rc 1 opsctl health --remediate
show opsctl nodes
step "The GPU is replaced: heal the node and resume it (opsctl's own drain, so no --force)"
show opsctl lab heal gpu-002
show opsctl resume gpu-002
show opsctl nodes
show opsctl lab down
unset OPSCTL_CONFIG

step "3. Train: a simulated Slurm cluster (4 nodes x 8 H200) with Prometheus and emulated DCGM"
show opsctl sim up --nodes 4 --with monitoring --state-dir "$SIM_STATE"
export OPSCTL_CONFIG="$SIM_STATE/opsctl.toml"
# One inference node and one trainer node with one rank each: the CPU build of the job.
cat >>"$OPSCTL_CONFIG" <<TOML

[launch]
runs_dir = "$SIM_STATE/runs"
quarantine_file = "$SIM_STATE/quarantine.json"
nodes = 2
inference_nodes = 1
tasks_per_node = 1
python = "$(command -v python)"
workdir = "$ROOT"
time_limit = "60:00"
TOML
show opsctl launch rl-run --config training/configs/demo.toml --output "$RUN" --dry-run >/dev/null
show opsctl launch rl-run --config training/configs/demo.toml --output "$RUN"
step "Watch it to the end (a failed node would be drained and the run resumed with --remediate)"
show opsctl watch "$RUN" --remediate
step "Done; tearing everything down"
