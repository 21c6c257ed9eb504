#!/usr/bin/env bash
# Install everything `make test` and `make demo` need on a fresh Debian 12/13 machine, as root:
# Debian packages for the real daemons (Slurm, munge, Prometheus, sshd, nspawn, debootstrap), then a
# virtualenv with opsctl and its dev tools. Safe to re-run: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  make git ca-certificates
  slurm-wlm slurm-client munge libslurm-dev     # real slurmctld/slurmd for the simulated cluster
  prometheus                                    # real Prometheus + promtool
  openssh-server openssh-client                 # sshd for the paramiko evidence source
  debootstrap systemd-container iproute2        # the nspawn machine lab
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts services from package postinst scripts where it can; the lab and the simulated
# cluster run their own daemons with their own config, so stop the packaged ones if they started.
# Only the packaged instances (their default pidfiles), never by name: other simulated clusters
# (other test sessions on this machine) run daemons with the same names.
for spec in slurmctld:/run/slurmctld.pid slurmd:/run/slurmd.pid munged:/run/munge/munged.pid \
            prometheus:/run/prometheus/prometheus.pid; do
  name=${spec%%:*} pidfile=${spec#*:}
  [ -r "$pidfile" ] || continue
  pid=$(tr -dc '0-9' <"$pidfile")
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
    kill "$pid" 2>/dev/null || true
  fi
done

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e '.[dev]'
echo "bootstrap: ready ($("$VENV/bin/python" --version), $VENV)"
