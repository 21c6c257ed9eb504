#!/usr/bin/env bash
# Install everything `make test` and `make demo` need on a fresh Debian 12/13 machine, as root:
# Debian packages for the real daemons (Slurm, munge, Prometheus, sshd, nspawn, debootstrap), then a
# virtualenv with opsctl and its dev tools at the versions of locks/cpu.txt. Safe to re-run: it only
# installs what is missing or differs from the lock.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  make git ca-certificates
  slurm-wlm slurm-client munge libslurm-dev     # real slurmctld/slurmd for the simulated cluster
  libpmix-dev                                   # srun --mpi=pmix into the lab (the plugin opens libpmix.so)
  prometheus                                    # real Prometheus + promtool
  prometheus-alertmanager                       # real Alertmanager + amtool (remediation alerts)
  openssh-server openssh-client                 # sshd for the paramiko evidence source
  debootstrap systemd-container iproute2        # the nspawn machine lab
  chromium                                      # headless browser for the run viewer's tests
  bubblewrap                                    # the sandbox for model-written code (training/sandbox.py)
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: need root to install Debian packages: ${missing[*]}" >&2
    exit 2
  fi
  echo "bootstrap: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The simulated cluster and the lab run their own daemons with their own config: keep the
  # packages' postinst scripts from starting system-wide slurmctld/slurmd/munge/prometheus/alertmanager.
  policy=/usr/sbin/policy-rc.d
  had_policy=0; [ -e "$policy" ] && had_policy=1
  if [ "$had_policy" = 0 ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ "$had_policy" = 0 ]; then rm -f "$policy"; trap - EXIT; fi
fi

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# Exactly the versions CI tested: locks/cpu.txt pins every package, pip and the build backend
# included (refresh with `make lock`). The project builds without isolation, so its build backend
# is the pinned one too; the check fails the bootstrap if anything differs from the lock.
LOCK=locks/cpu.txt
"$VENV/bin/pip" install -q --constraint "$LOCK" pip setuptools
# The lab's base image (debootstrap, then every package the roles install) takes about a minute of
# network and dpkg, and the heavy install below keeps only one core busy: build the image beside it
# (the lean install first, which is all `opsctl lab prepare` needs), and do not wait for it: the
# image holds a lock, so the lab's first `up` waits for it and finds it ready, and if this fails,
# `up` builds it and reports why. OPSCTL_LAB_PREPARE=0 skips it.
lab_pid=""
if [ "$(id -u)" = 0 ] && [ "${OPSCTL_LAB_PREPARE:-1}" != 0 ] \
    && command -v debootstrap >/dev/null && command -v systemd-nspawn >/dev/null; then
  "$VENV/bin/pip" install -q --constraint "$LOCK" --no-build-isolation -e .
  lab_log=$(mktemp -t opsctl-lab-prepare.XXXXXX)
  # From the source tree, not the editable install that the next pip command replaces under it.
  PYTHONPATH="$PWD" "$VENV/bin/python" -m opsctl lab prepare >"$lab_log" 2>&1 &
  lab_pid=$!
fi
# --no-compile: pip would byte-compile all ~22,000 modules (transformers' hundreds of models,
# anthropic, sympy, pandas) on one core, about 40 s, where the suite imports a few thousand; Python
# compiles those on first import instead, and the Makefile lets it write them (it unexports
# PYTHONDONTWRITEBYTECODE).
"$VENV/bin/pip" install -q --no-compile --constraint "$LOCK" --no-build-isolation -e '.[dev,training]'
"$VENV/bin/python" scripts/lock.py check --installed
if [ -n "$lab_pid" ] && kill -0 "$lab_pid" 2>/dev/null; then
  echo "bootstrap: the lab's base image is still being built in the background (log: $lab_log)"
elif [ -n "$lab_pid" ]; then
  if wait "$lab_pid"; then
    echo "bootstrap: $(tail -n 1 "$lab_log")"
  else
    echo "bootstrap: the lab's base image could not be prepared (see $lab_log); \`opsctl lab up\` tries again" >&2
  fi
fi
echo "bootstrap: ready ($("$VENV/bin/python" --version), $VENV)"
