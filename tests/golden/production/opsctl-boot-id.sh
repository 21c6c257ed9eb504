#!/bin/sh
# Ansible managed
# The kernel's boot id as a node exporter textfile metric, written at every boot before node
# exporter starts (opsctl-boot-id.service). opsctl proves a reboot by it: unlike the boot time
# (node_boot_time_seconds), a clock step does not move it (docs/health-checks.md).
# Usage: opsctl-boot-id [BOOT_ID_FILE [OUTPUT]]
set -eu
src=${1:-/proc/sys/kernel/random/boot_id}
out=${2:-/var/lib/prometheus/node-exporter/opsctl_boot_id.prom}
# the directory survives reboots: never serve an earlier boot's id, even when this run fails
rm -f "$out"
id=$(cat "$src")
case $id in
    *[!0-9a-f-]* | "")
        echo "opsctl-boot-id: not a boot id in $src: $id" >&2
        exit 1
        ;;
esac
tmp="$out.tmp.$$" # the collector reads only *.prom files: it never sees half a file
{
    echo "# HELP opsctl_boot_id_info The kernel's boot_id of the running boot (/proc/sys/kernel/random/boot_id)."
    echo "# TYPE opsctl_boot_id_info gauge"
    echo "opsctl_boot_id_info{boot_id=\"$id\"} 1"
} >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$out"
