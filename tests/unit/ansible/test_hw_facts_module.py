"""The hw_facts module: typed facts from genuine nvidia-smi, sysfs, lsblk and /proc samples."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from provisioning_helpers import real, run_ansible, sample

from opsctl.parsers.ib_sysfs import parse_flattened

NVSMI = "nvidia-smi-q.h100x8.535.183.01.gpud.txt"
IB_SYSFS = "sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt"
H200_EXPECTED = {
    "gpu_count": 8,
    "gpu_model_substring": "H200",
    "gpu_memory_mib_min": 140000,
    "ib_hcas": [f"mlx5_{i}" for i in range(8)],
    "ib_rate_gbps": 400,
    "nvme_data_min": 1,
}


def _facts(mod: Any, **over: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "nvidia_smi_q": real(NVSMI),
        "gpu_numa": {},
        "ib_files": parse_flattened(real(IB_SYSFS)),
        "ib_numa": {"mlx5_0": 0},
        "lsblk_json": sample("lsblk.bytes-paths.gpud.json"),
        "nvme_json": None,
        "cpuinfo": sample("cpuinfo.gvisor-2vcpu.txt"),
        "meminfo": sample("meminfo.gvisor-24g.txt"),
        "nvswitch_count": 4,
        "numa_nodes": 2,
    }
    kwargs.update(over)
    return dict(mod.build_hw_facts(**kwargs))


def test_gpus_from_a_genuine_h100_report(hw_facts_module):
    hw = _facts(hw_facts_module, gpu_numa={"00000000:53:00.0": 0})
    assert hw["gpu_count"] == 8
    assert hw["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert hw["driver_version"] == "535.183.01" and hw["cuda_version"] == "12.2"
    first = hw["gpus"][0]
    assert first["bus_id"] == "00000000:53:00.0"
    assert first["memory_mib"] == 81559
    assert first["uuid"] == "GPU-566e6f65-c38e-b12f-4824-6944218668b9"
    assert first["numa_node"] == 0
    assert hw["gpus"][1]["numa_node"] is None  # sysfs had no entry for it
    assert all(g["memory_mib"] == 81559 for g in hw["gpus"])
    assert hw["nvlink_fabric"] is True  # NVSwitch devices and fabric state Completed


def test_nvlink_fabric_from_fabric_state_alone(hw_facts_module):
    assert _facts(hw_facts_module, nvswitch_count=0)["nvlink_fabric"] is True
    assert _facts(hw_facts_module, nvidia_smi_q=None, nvswitch_count=0)["nvlink_fabric"] is False


def test_infiniband_from_the_genuine_sysfs_tree(hw_facts_module):
    ib = _facts(hw_facts_module)["ib_hcas"]
    assert ib == [
        {
            "name": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "physical_state": "LinkUp",
            "rate_gbps": 400.0,
            "link_layer": "InfiniBand",
            "numa_node": 0,
            "fw_ver": "28.41.1000",
            "board_id": "MT_0000000838",
        }
    ]


def test_nvme_drives_split_into_system_and_data(hw_facts_module):
    hw = _facts(hw_facts_module, lsblk_json=sample("lsblk.default.raid0-8nvme.gpud.json"))
    assert len(hw["nvme"]) == 8
    assert all(not d["system"] and d["mounts"] == ["/raid"] for d in hw["nvme"])
    hw = _facts(hw_facts_module)
    assert [d["path"] for d in hw["nvme"]][:2] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert hw["nvme"][0]["model"] == "Dell DC NVMe ISE 7450 RI U.2 960GB"


def test_nvme_list_fills_in_firmware(hw_facts_module):
    hw = _facts(
        hw_facts_module,
        lsblk_json='{"blockdevices": [{"name": "/dev/nvme0n1", "type": "disk", "size": 536870912000}]}',
        nvme_json=sample("nvme-list-o-json.azure-2ns.lisa.json"),
    )
    assert hw["nvme"] == [
        {
            "path": "/dev/nvme0n1",
            "model": "MSFT NVMe Accelerator v1.0",
            "serial": "SN: 000001",
            "firmware": "v1.00000",
            "size_bytes": 536870912000,
            "mounts": [],
            "system": False,
        }
    ]


def test_cpu_and_memory(hw_facts_module):
    hw = _facts(hw_facts_module)
    assert hw["cpu"] == {
        "logical_cpus": 2,
        "sockets": 1,
        "cores_per_socket": 2,
        "threads_per_core": 1,
        "model_name": "Intel(R) Xeon(R) Processor",
    }
    assert hw["memory"] == {"total_kib": 24683584, "total_mib": 24105}
    assert hw["numa_nodes"] == 2


def test_the_fact_is_stable_json(hw_facts_module):
    a, b = _facts(hw_facts_module), _facts(hw_facts_module)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert "temperature_c" not in json.dumps(a) and "used_bytes" not in json.dumps(a)


def test_expectations_of_an_h200_node_flag_the_h100_sample(hw_facts_module):
    hw = _facts(hw_facts_module)
    problems = hw_facts_module.check_expected(hw, H200_EXPECTED)
    assert "gpu_model: found NVIDIA H100 80GB HBM3, expected models containing 'H200'" in problems
    assert "gpu_memory: GPUs 0, 1, 2, 3, 4, 5, 6, 7 have less than 140000 MiB" in problems
    assert "ib_hcas: missing mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7" in problems
    assert not [p for p in problems if p.startswith(("gpu_count", "ib_rate", "ib_state", "nvme"))]


def test_expectations_met(hw_facts_module):
    hw = _facts(hw_facts_module)
    want = {
        "gpu_count": 8,
        "gpu_model_substring": "H100",
        "ib_hcas": ["mlx5_0"],
        "ib_rate_gbps": 400,
        "nvme_data_min": 6,
    }
    assert hw_facts_module.check_expected(hw, want) == []


def test_expectations_catch_a_missing_gpu_and_a_slow_or_down_port(hw_facts_module):
    hw = _facts(hw_facts_module)
    hw["gpus"] = hw["gpus"][:7]
    hw["gpu_count"] = 7
    hw["ib_hcas"] = [
        dict(hw["ib_hcas"][0], rate_gbps=200.0),
        dict(hw["ib_hcas"][0], name="mlx5_1", state="DOWN"),
    ]
    problems = hw_facts_module.check_expected(
        hw, {"gpu_count": 8, "ib_hcas": ["mlx5_0", "mlx5_1"], "ib_rate_gbps": 400}
    )
    assert problems == [
        "gpu_count: found 7 GPUs, expected 8",
        "ib_state: not ACTIVE: mlx5_1/1",
        "ib_rate: below 400 Gb/s: mlx5_0/1 (200.0 Gb/s)",
    ]


def test_pci_addresses_as_sysfs_names_them(hw_facts_module):
    assert hw_facts_module.pci_sysfs_address("00000000:53:00.0") == "0000:53:00.0"
    assert hw_facts_module.pci_sysfs_address("00000000:DB:00.0") == "0000:db:00.0"


# --- the module run by the real Ansible, on a node whose hardware is the genuine samples ---


def _tool(path: Path, fixture: Path) -> str:
    # a test-side stand-in for the hardware tool: prints the genuine sample
    path.write_text(f"#!/bin/sh\nexec cat {fixture}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def sample_node(tmp_path: Path) -> dict[str, str]:
    from provisioning_helpers import REAL_WORLD, SAMPLES

    sysfs = tmp_path / "sys"
    for rel, value in parse_flattened(real(IB_SYSFS)).items():
        f = sysfs / "class" / "infiniband" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(value + "\n")
    (sysfs / "class/infiniband/mlx5_0/device").mkdir()
    (sysfs / "class/infiniband/mlx5_0/device/numa_node").write_text("0\n")
    gpu0 = sysfs / "bus/pci/devices/0000:53:00.0"
    gpu0.mkdir(parents=True)
    (gpu0 / "numa_node").write_text("0\n")
    for n in (0, 1):
        (sysfs / f"devices/system/node/node{n}").mkdir(parents=True)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text(sample("cpuinfo.gvisor-2vcpu.txt"))
    (proc / "meminfo").write_text(sample("meminfo.gvisor-24g.txt"))
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in range(4):
        (dev / f"nvidia-nvswitch{n}").touch()
    (dev / "nvidia-nvswitchctl").touch()
    tools = tmp_path / "tools"
    tools.mkdir()
    return {
        "nvidia_smi": _tool(tools / "nvidia-smi", REAL_WORLD / NVSMI),
        "lsblk": _tool(tools / "lsblk", SAMPLES / "lsblk.bytes-paths.gpud.json"),
        "nvme": _tool(tools / "nvme", SAMPLES / "nvme-list-o-json.azure-2ns.lisa.json"),
        "sysfs_root": str(sysfs),
        "proc_root": str(proc),
        "dev_root": str(dev),
    }


def _adhoc(tmp_path: Path, args: dict[str, Any], check: bool = True) -> dict[str, Any]:
    tree = tmp_path / "tree"
    proc = run_ansible(
        "ansible",
        ["localhost", "-c", "local", "-m", "hw_facts", "-a", json.dumps(args), "-t", str(tree)],
        tmp_path,
        check=check,
    )
    out = json.loads((tree / "localhost").read_text())
    out["_rc"] = proc.returncode
    return out


def test_module_through_ansible_on_the_samples(tmp_path, sample_node):
    result = _adhoc(
        tmp_path,
        dict(sample_node, expected={"gpu_count": 8, "gpu_model_substring": "H100", "ib_hcas": ["mlx5_0"]}),
    )
    hw = result["ansible_facts"]["hw"]
    assert result["changed"] is False and result["mismatches"] == []
    assert hw["gpu_count"] == 8 and hw["gpus"][0]["numa_node"] == 0
    assert hw["nvswitch_count"] == 4  # nvidia-nvswitchctl is not a switch
    assert hw["ib_hcas"][0]["numa_node"] == 0
    assert hw["numa_nodes"] == 2
    assert len(hw["nvme"]) == 8
    # lsblk gives the drives, nvme list the firmware of the namespace it knows
    assert hw["nvme"][0]["firmware"] == "v1.00000"
    assert hw["collection_errors"] == []


def test_module_fails_on_hardware_that_differs_from_the_inventory(tmp_path, sample_node):
    result = _adhoc(tmp_path, dict(sample_node, expected=H200_EXPECTED, fail_on_mismatch=True), check=False)
    assert result["_rc"] != 0
    assert result["mismatches"]
    assert result["msg"].startswith("hardware differs from the inventory: ")
    assert "expected models containing 'H200'" in result["msg"]


def test_module_without_gpus_and_infiniband(tmp_path, sample_node):
    args = dict(sample_node, gpus=False, infiniband=False, nvidia_smi=os.devnull)
    hw = _adhoc(tmp_path, args)["ansible_facts"]["hw"]
    assert hw["gpu_count"] == 0 and hw["ib_hcas"] == []
    assert hw["cpu"]["logical_cpus"] == 2


def test_module_reports_a_missing_nvidia_smi(tmp_path, sample_node):
    hw = _adhoc(tmp_path, dict(sample_node, nvidia_smi="no-such-nvidia-smi"))["ansible_facts"]["hw"]
    assert hw["gpu_count"] == 0
    assert "no-such-nvidia-smi: not found" in hw["collection_errors"]


def test_the_module_builds_facts_with_the_shared_code(hw_facts_module):
    # one implementation for the module and `opsctl preflight`, not a copy
    import opsctl.parsers.hw_facts_build as shared

    assert hw_facts_module.build_hw_facts is shared.build_hw_facts
    assert hw_facts_module.check_expected is shared.check_expected
