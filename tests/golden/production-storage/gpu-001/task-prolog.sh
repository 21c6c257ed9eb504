#!/bin/sh
# Ansible managed
# Slurm TaskProlog: each "export NAME=value" line on stdout enters the task's environment. Tasks
# write temporary files to the job's directory on node-local scratch, which the epilog removes.
dir=/scratch/job_${SLURM_JOB_ID}
if [ -n "$SLURM_JOB_ID" ] && [ -d "$dir" ]; then
    echo "export TMPDIR=$dir"
    echo "export SLURM_JOB_SCRATCH=$dir"
fi
exit 0
