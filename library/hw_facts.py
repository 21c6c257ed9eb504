#!/usr/bin/python
# Copyright: opsctl contributors
# Apache License 2.0 (see the repository's pyproject.toml)
"""Ansible module: typed hardware discovery of a GPU node (GPUs, NVSwitch, InfiniBand, NVMe, CPU, memory)."""

from __future__ import annotations

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.hw_facts_build import (
    LSBLK_ARGS,
    build_hw_facts,
    check_expected,
    pci_sysfs_address,
)
from ansible.module_utils.ib_sysfs import read_ib_sysfs
from ansible.module_utils.nvidia_smi_q import parse_nvidia_smi_q

DOCUMENTATION = r"""
---
module: hw_facts
short_description: Discover the GPUs, InfiniBand HCAs, NVMe drives, CPUs and memory of a node
description:
  - Reads C(nvidia-smi -q), the C(/sys/class/infiniband) tree, C(lsblk --json), C(nvme list -o json),
    C(/proc/cpuinfo) and C(/proc/meminfo) and returns them as one typed C(hw) fact.
  - Parsing is done by the opsctl parsers shipped as module_utils, the same code the opsctl CLI uses.
  - Only values that describe the hardware are returned (no temperatures, counters or usage), so the
    fact is stable between runs and can be recorded for rendering C(slurm.conf).
  - With I(expected), the discovered hardware is compared with what the node must have and the
    differences are returned in C(mismatches); the module fails on them when I(fail_on_mismatch).
version_added: "0.1.0"
author: opsctl contributors
options:
  gpus:
    description: Collect NVIDIA GPUs with C(nvidia-smi -q). Turn off where there are no GPUs.
    type: bool
    default: true
  infiniband:
    description: Collect InfiniBand HCAs from sysfs. Turn off where there are no HCAs.
    type: bool
    default: true
  nvidia_smi:
    description: The nvidia-smi executable (a name on PATH or an absolute path).
    type: str
    default: nvidia-smi
  lsblk:
    description: The lsblk executable.
    type: str
    default: lsblk
  nvme:
    description: The nvme (nvme-cli) executable; NVMe details are skipped when it is missing.
    type: str
    default: nvme
  sysfs_root:
    description: Root of sysfs (for C(class/infiniband) and the PCI devices' C(numa_node)).
    type: path
    default: /sys
  proc_root:
    description: Root of procfs (for C(cpuinfo) and C(meminfo)).
    type: path
    default: /proc
  dev_root:
    description: Root of the device tree (NVSwitch devices are counted as C(nvidia-nvswitch<N>)).
    type: path
    default: /dev
  expected:
    description:
      - What the node must have. Keys, all optional, C(gpu_count), C(gpu_model_substring),
        C(gpu_memory_mib_min), C(ib_hcas) (list of names), C(ib_rate_gbps), C(nvme_data_min).
    type: dict
    default: {}
  fail_on_mismatch:
    description: Fail when the discovered hardware differs from I(expected).
    type: bool
    default: false
notes:
  - Supports check mode (the module only reads).
"""

EXAMPLES = r"""
- name: Discover the hardware of a GPU node and check it against the inventory
  hw_facts:
    expected:
      gpu_count: 8
      gpu_model_substring: H200
      ib_hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
      ib_rate_gbps: 400
    fail_on_mismatch: true

- name: CPU, memory and disks only (a machine without GPUs or InfiniBand)
  hw_facts:
    gpus: false
    infiniband: false
"""

RETURN = r"""
ansible_facts:
  description: The discovered hardware, under C(hw).
  returned: always
  type: dict
  contains:
    hw:
      description: Typed hardware description.
      type: dict
      sample:
        gpu_count: 8
        gpus:
          - {index: 0, bus_id: "00000000:18:00.0", model: "NVIDIA H200", memory_mib: 143771,
             uuid: "GPU-...", serial: "1652...", numa_node: 0}
        driver_version: "550.127.08"
        nvswitch_count: 4
        nvlink_fabric: true
        ib_hcas:
          - {name: mlx5_0, port: 1, state: ACTIVE, physical_state: LinkUp, rate_gbps: 400.0,
             link_layer: InfiniBand, numa_node: 0, fw_ver: "28.41.1000", board_id: MT_0000000838}
        nvme:
          - {path: /dev/nvme2n1, model: "INTEL SSDPF2KX076T1O", serial: "BTAX...",
             size_bytes: 7681501126656, mounts: [/mnt/local-volume/vol-0], system: false}
        cpu: {logical_cpus: 224, sockets: 2, cores_per_socket: 56, threads_per_core: 2,
              model_name: "Intel(R) Xeon(R) Platinum 8480+"}
        memory: {total_kib: 2113407744, total_mib: 2063874}
        numa_nodes: 2
        collection_errors: []
mismatches:
  description: Differences between the discovered hardware and I(expected), one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["gpu_count: found 7 GPUs, expected 8"]
"""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _numa(path: str) -> int | None:
    text = _read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "bool", "default": True},
            "infiniband": {"type": "bool", "default": True},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "lsblk": {"type": "str", "default": "lsblk"},
            "nvme": {"type": "str", "default": "nvme"},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "proc_root": {"type": "path", "default": "/proc"},
            "dev_root": {"type": "path", "default": "/dev"},
            "expected": {"type": "dict", "default": {}},
            "fail_on_mismatch": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    errors: list[str] = []

    def run(tool: str, args: list[str], required: bool) -> str | None:
        exe = tool if os.path.isabs(tool) else module.get_bin_path(tool, required=False)
        if not exe:
            if required:
                errors.append(f"{tool}: not found")
            return None
        rc, out, err = module.run_command([exe, *args])
        if rc != 0:
            errors.append(f"{tool} {' '.join(args)}: exit {rc}: {err.strip()[:200]}")
            return None
        return out

    smi = run(p["nvidia_smi"], ["-q"], required=True) if p["gpus"] else None
    gpu_numa: dict[str, int | None] = {}
    if smi:
        for g in parse_nvidia_smi_q(smi).gpus:
            addr = pci_sysfs_address(g.bus_id)
            gpu_numa[g.bus_id] = _numa(os.path.join(p["sysfs_root"], "bus/pci/devices", addr, "numa_node"))
    ib_files = None
    ib_numa: dict[str, int | None] = {}
    if p["infiniband"]:
        ib_root = os.path.join(p["sysfs_root"], "class/infiniband")
        ib_files = read_ib_sysfs(ib_root)
        if not ib_files:
            errors.append(f"{ib_root}: no InfiniBand devices")
        for name in {k.split("/", 1)[0] for k in ib_files}:
            ib_numa[name] = _numa(os.path.join(ib_root, name, "device/numa_node"))
    lsblk_out = run(p["lsblk"], LSBLK_ARGS, required=True)
    nvme_out = run(p["nvme"], ["list", "-o", "json"], required=False)
    try:
        nvswitch = len([n for n in os.listdir(p["dev_root"]) if re.fullmatch(r"nvidia-nvswitch\d+", n)])
    except OSError:
        nvswitch = 0
    node_dir = os.path.join(p["sysfs_root"], "devices/system/node")
    try:
        numa_nodes = len([n for n in os.listdir(node_dir) if re.fullmatch(r"node\d+", n)])
    except OSError:
        numa_nodes = 0
    cpuinfo = _read(os.path.join(p["proc_root"], "cpuinfo"))
    meminfo = _read(os.path.join(p["proc_root"], "meminfo"))
    if cpuinfo is None or meminfo is None:
        module.fail_json(msg=f"hw_facts: cannot read cpuinfo/meminfo under {p['proc_root']}")
        return
    try:
        hw = build_hw_facts(
            nvidia_smi_q=smi if p["gpus"] else None,
            gpu_numa=gpu_numa,
            ib_files=ib_files,
            ib_numa=ib_numa,
            lsblk_json=lsblk_out,
            nvme_json=nvme_out,
            cpuinfo=cpuinfo,
            meminfo=meminfo,
            nvswitch_count=nvswitch,
            numa_nodes=numa_nodes,
            errors=errors,
        )
    except ValueError as exc:
        module.fail_json(msg=f"hw_facts: {exc}")
    mismatches = check_expected(hw, p["expected"] or {})
    result = {"changed": False, "ansible_facts": {"hw": hw}, "mismatches": mismatches}
    if mismatches and p["fail_on_mismatch"]:
        module.fail_json(msg="hardware differs from the inventory: " + "; ".join(mismatches), **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
