#!/bin/sh
# Ansible managed
# Slurm prolog: record the job on each GPU it was given, one file per GPU index, for dcgm-exporter's
# --hpc-job-mapping-dir (its series of that GPU get the label hpc_job). No GPUs, nothing to do.
set -e
dir=/run/dcgm-job-map
[ -n "${SLURM_JOB_GPUS:-}" ] || exit 0
mkdir -p "$dir"
for gpu in $(echo "$SLURM_JOB_GPUS" | tr ',' ' '); do
  tmp="$dir/.$gpu.${SLURM_JOB_ID:?}"
  { grep -Fvx "$SLURM_JOB_ID" "$dir/$gpu" 2>/dev/null || true; echo "$SLURM_JOB_ID"; } > "$tmp"
  mv -f "$tmp" "$dir/$gpu"
done
