#!/bin/sh
# Ansible managed
# Slurm epilog: take the job off each GPU it had in dcgm-exporter's job mapping; a GPU no job uses
# any more has no file. Never fails the epilog (that would drain the node over bookkeeping).
dir=/run/dcgm-job-map
[ -n "${SLURM_JOB_GPUS:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] || exit 0
for gpu in $(echo "$SLURM_JOB_GPUS" | tr ',' ' '); do
  [ -f "$dir/$gpu" ] || continue
  tmp="$dir/.$gpu.$SLURM_JOB_ID"
  grep -Fvx "$SLURM_JOB_ID" "$dir/$gpu" > "$tmp" 2>/dev/null || true
  if [ -s "$tmp" ]; then mv -f "$tmp" "$dir/$gpu"; else rm -f "$tmp" "$dir/$gpu"; fi
done
exit 0
