#!/usr/bin/env bash
# `make demo`: the main job end to end on one cluster, the built-in lab.
#   1. Provision: boot the nspawn lab (a head and three GPU machines with simulated H200s), stage
#      the training runtime's wheelhouse on its NFS stand-in, and converge it with the real
#      playbook, `ansible-playbook -i inventory/lab site.yml` (which builds the runtime there).
#   2. Check it: preflight against the H200 profile and Slurm's GRES; every node healthy.
#   3. Train on it: `opsctl launch rl-run` submits the bundled job (SFT, then asynchronous RL on
#      2-digit arithmetic) to the lab's slurmctld; `opsctl watch --remediate` follows it. After the
#      first checkpoint a GPU of the trainer node throws XID 79: watch drains that node through the
#      health guardrails, quarantines it and resubmits the run on the remaining nodes, which resumes
#      from the checkpoint and finishes; the watcher ends with the learning curve.
#   4. The GPU is replaced: heal the node, release it from quarantine, resume it (health keeps its
#      XID on record until it sees a reboot, which lab machines cannot show: docs/lab.md).
# Whatever happens, everything started here is torn down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

LAB_NODES=${DEMO_LAB_NODES:-3}
# The demo's RL length; the first checkpoint is where the fault lands.
RL_STEPS=${DEMO_RL_STEPS:-300}
CHECKPOINT_EVERY=${DEMO_CHECKPOINT_EVERY:-100}
INJECTOR=""
cleanup() {
  set +e
  [ -n "$INJECTOR" ] && kill "$INJECTOR" 2>/dev/null
  opsctl lab down >/dev/null 2>&1
}
trap cleanup EXIT INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$'; printf ' %q' "$@"; printf '\n'; "$@"; }
# Run a command that is expected to exit non-zero (e.g. `opsctl health` on an unhealthy node).
expect_rc() { local want=$1; shift; printf '$'; printf ' %q' "$@"; printf '\n'; local rc=0; "$@" || rc=$?
  [ "$rc" = "$want" ] || { echo "demo: expected exit $want, got $rc" >&2; exit 1; }; }
# Wait until `opsctl health` exits with $1 (Prometheus scrapes every 5 s; at most a minute).
health_settles() {
  for _ in $(seq 1 30); do
    rc=0; opsctl health --json >/dev/null 2>&1 || rc=$?
    [ "$rc" = "$1" ] && return 0
    sleep 2
  done
}

step "1. Provision: boot the lab (head + $LAB_NODES GPU machines, simulated H200 and ConnectX-7)"
echo "   --runtime stages the training runtime's wheelhouse on the lab's NFS stand-in (/shared)"
show opsctl lab up --nodes "$LAB_NODES" --runtime
step "Converge it with the real playbook (hardware-only steps are skipped and say so)"
show ansible-playbook -i inventory/lab site.yml

step "2. Reach the lab's Slurm and Prometheus from here; check every GPU machine"
eval "$(opsctl lab connect)"
show opsctl nodes
show opsctl preflight
health_settles 0
show opsctl health

step "3. Launch the RL run on the lab's slurmctld (python: the runtime site.yml built on /shared)"
# Runs live on the share: this host writes them at its backing directory ([launch] runs_dir).
RUNS=$(python -c 'import os,tomllib;print(tomllib.load(open(os.environ["OPSCTL_CONFIG"],"rb"))["launch"]["runs_dir"])')
RUN="$RUNS/demo"
LAUNCH=(opsctl launch rl-run --job training/configs/demo.toml --output "$RUN"
        -o "trainer.steps=$RL_STEPS" -o "trainer.checkpoint_every=$CHECKPOINT_EVERY")
# --dry-run: the node choice and the script, nothing created; its first lines are the plan.
show "${LAUNCH[@]}" --dry-run | sed -n 1,3p
show "${LAUNCH[@]}"

# The fault: once the first checkpoint is committed, GPU 5 of the trainer node (the second node
# of the first attempt) falls off the bus.
(
  set +e
  until [ -f "$RUN/attempts/0.json" ]; do sleep 1; done
  victim=$(python -c 'import json,sys;print(json.load(open(sys.argv[1]))["nodes"][1])' "$RUN/attempts/0.json")
  until [ -f "$RUN/checkpoints/trainer/step_$CHECKPOINT_EVERY/COMMITTED" ]; do sleep 1; done
  printf '\n\033[1m== Checkpoint %s committed: GPU 5 on %s (trainer) falls off the bus (XID 79)\033[0m\n' \
    "$CHECKPOINT_EVERY" "$victim"
  opsctl lab inject "$victim" xid=79,gpu=5
  echo "$victim" >"$RUN/.demo-victim"
) &
INJECTOR=$!

step "Watch it to the end: --remediate drains a failed node and resumes the run without it"
show opsctl watch "$RUN" --remediate
wait "$INJECTOR" 2>/dev/null || true
INJECTOR=""
[ -f "$RUN/.demo-victim" ] || { echo "demo: the run finished before the fault was injected" >&2; exit 1; }
VICTIM=$(cat "$RUN/.demo-victim")
# What the watcher's summary says, checked: the run completed on nodes without the victim, the
# last attempt resumed from a checkpoint instead of starting over.
python - "$RUN" "$VICTIM" <<'PY'
import json
import sys
from pathlib import Path
from opsctl.launch.ledger import load_ledger
led, victim = load_ledger(Path(sys.argv[1])), sys.argv[2]
last = led.attempts[-1]
ok = (led.final_state == "COMPLETED" and len(led.attempts) >= 2 and victim not in last.nodes
      and last.resume_step > 0 and victim in led.attempts[0].failed_nodes)
print(f"demo: run {led.final_state}; attempt {last.attempt} ran on {','.join(last.nodes)} from step "
      f"{last.resume_step}; {victim} was {'left out' if victim not in last.nodes else 'USED'}")
# What RL did for the policy: held-out accuracy after SFT (step 0) and after the last RL step.
rows = [json.loads(line) for line in (Path(sys.argv[1]) / "metrics.jsonl").read_text().splitlines()]
evals = sorted((r["step"], r["eval_accuracy"]) for r in rows if r.get("event") == "eval")
if evals:
    (s0, a0), (s1, a1) = evals[0], evals[-1]
    print(f"demo: held-out accuracy {a0:.3f} after SFT (step {s0}) -> {a1:.3f} after RL (step {s1}), "
          f"{a1 - a0:+.3f}")
sys.exit(0 if ok else 1)
PY
show opsctl nodes
# The run in the viewer: curves, the failure and the resume on the timeline, sampled rollouts
# (static files; `opsctl runs view RUN` serves it instead, on 127.0.0.1).
show opsctl runs view "$RUN" --output "$RUN-view"

step "4. The GPU is replaced: heal $VICTIM, release it from quarantine, resume it (opsctl's own drain)"
show opsctl lab heal "$VICTIM"
# The healthy nodes read OK. The healed one still FAILs: health keeps a fatal XID on record until
# it sees the node boot again. In production the GPU swap reboots the node (a new
# node_boot_time_seconds); a lab machine shares this host's kernel and its boot time, so here the
# XID stays for the XID window (an hour; docs/lab.md). Resuming it is the operator's call.
echo "   (the healed node keeps its XID on record until a reboot is seen; lab machines share this"
echo "    host's boot time, so in the lab it stays for the XID window: docs/lab.md)"
expect_rc 1 opsctl health
show opsctl quarantine release "$VICTIM" --reason "GPU 5 replaced"
show opsctl resume "$VICTIM"
show opsctl nodes
step "Done; tearing the lab down"
