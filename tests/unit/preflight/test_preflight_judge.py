"""Preflight judgements on the genuine samples (nvidia-smi -q of an 8x H100 node, its mlx5 sysfs
tree, lsblk and nvme-cli JSON) and on mutated copies of them: facts come from the shared builder
the hw_facts module uses, verdicts from opsctl.preflight.judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from preflight_samples import as_h200, h100_report, ib_files, outputs, without_last_gpu

from opsctl.checks.model import Status
from opsctl.config import parse_config
from opsctl.errors import ConfigError
from opsctl.evidence.ssh import CommandResult
from opsctl.model import Node
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q
from opsctl.preflight.collect import commands, facts_from_outputs
from opsctl.preflight.judge import judge_hardware, judge_numa, judge_slurm_gres
from opsctl.preflight.settings import PreflightSection

REPO = Path(__file__).resolve().parents[3]
# what the genuine node is: one 400 Gb/s HCA (the sample's tree has only mlx5_0)
H100_PROFILE: dict[str, Any] = {
    "gpu_count": 8,
    "gpu_model_substring": "H100",
    "gpu_memory_mib_min": 80000,
    "ib_hcas": ["mlx5_0"],
    "ib_rate_gbps": 400,
    "nvme_data_min": 1,
}
H200_PROFILE = dict(H100_PROFILE, gpu_model_substring="H200", gpu_memory_mib_min=140000)


def hw_of(**kw: Any) -> dict[str, Any]:
    facts = facts_from_outputs("gpu-001", outputs(**kw))
    assert facts.hw is not None, facts.error
    return facts.hw


def statuses(verdicts) -> dict[str, str]:
    return {v.code: v.status.value for v in verdicts}


def test_facts_from_the_genuine_outputs():
    hw = hw_of()
    assert hw["gpu_count"] == 8 and hw["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert all(g["memory_mib"] == 81559 for g in hw["gpus"])
    assert [(p["name"], p["state"], p["rate_gbps"]) for p in hw["ib_hcas"]] == [("mlx5_0", "ACTIVE", 400.0)]
    assert hw["nvswitch_count"] == 2 and hw["numa_nodes"] == 2 and hw["nvlink_fabric"] is True
    assert len(hw["nvme"]) == 8 and hw["nvme"][0]["firmware"] == "v1.00000"  # nvme list filled it in
    assert hw["cpu"]["logical_cpus"] == 2 and hw["collection_errors"] == []


def test_the_genuine_node_meets_its_own_profile():
    verdicts = judge_hardware("gpu-001", hw_of(), H100_PROFILE)
    assert statuses(verdicts) == {
        "preflight-gpu-count": "OK",
        "preflight-gpu-model": "OK",
        "preflight-gpu-memory": "OK",
        "preflight-ib-hca": "OK",
        "preflight-ib-rate": "OK",
        "preflight-nvme": "OK",
    }
    assert all(v.node == "gpu-001" and v.evidence["source"] == "ssh" for v in verdicts)


def test_an_h100_where_an_h200_is_expected():
    verdicts = {v.code: v for v in judge_hardware("gpu-001", hw_of(), H200_PROFILE)}
    assert verdicts["preflight-gpu-model"].status is Status.FAIL
    assert "NVIDIA H100 80GB HBM3" in verdicts["preflight-gpu-model"].summary
    assert verdicts["preflight-gpu-memory"].status is Status.FAIL
    assert verdicts["preflight-gpu-memory"].evidence["min_mib"] == 140000
    assert verdicts["preflight-gpu-count"].status is Status.OK
    # the same board renamed and enlarged as an H200 is what the H200 profile wants
    assert set(
        statuses(judge_hardware("gpu-001", hw_of(report=as_h200(h100_report())), H200_PROFILE)).values()
    ) == {"OK"}


def test_a_missing_gpu_fails_the_count():
    hw = hw_of(report=without_last_gpu(h100_report()))
    verdicts = {v.code: v for v in judge_hardware("gpu-001", hw, H100_PROFILE)}
    v = verdicts["preflight-gpu-count"]
    assert v.status is Status.FAIL and v.evidence["seen"] == 7 and v.evidence["expected"] == 8
    assert v.short_evidence == "7/8 gpus"
    assert [c for c, s in statuses(verdicts.values()).items() if s != "OK"] == ["preflight-gpu-count"]


def test_no_gpu_at_all_fails_the_count_and_cannot_judge_model_or_memory():
    out = outputs()
    out["nvidia_smi"] = CommandResult(6, "No devices were found\n")
    facts = facts_from_outputs("gpu-001", out)
    assert facts.hw is not None
    verdicts = {v.code: v for v in judge_hardware("gpu-001", facts.hw, H100_PROFILE)}
    assert verdicts["preflight-gpu-count"].status is Status.FAIL
    assert "No devices were found" in verdicts["preflight-gpu-count"].evidence["collection_errors"][0]
    assert verdicts["preflight-gpu-model"].status is Status.UNKNOWN
    assert verdicts["preflight-gpu-memory"].status is Status.UNKNOWN


def test_an_hca_at_a_lower_rate_fails_the_rate():
    hw = hw_of(ib=ib_files(**{"mlx5_0/ports/1/rate": "200 Gb/sec (4X HDR)"}))
    verdicts = {v.code: v for v in judge_hardware("gpu-001", hw, H100_PROFILE)}
    assert verdicts["preflight-ib-rate"].status is Status.FAIL
    assert verdicts["preflight-ib-rate"].evidence["rate_gbps"] == {"mlx5_0/1": 200.0}
    assert verdicts["preflight-ib-hca"].status is Status.OK


def test_a_down_or_missing_hca_fails_the_hca_check():
    hw = hw_of(ib=ib_files(**{"mlx5_0/ports/1/state": "1: DOWN", "mlx5_0/ports/1/phys_state": "3: Disabled"}))
    verdicts = {v.code: v for v in judge_hardware("gpu-001", hw, H100_PROFILE)}
    assert verdicts["preflight-ib-hca"].status is Status.FAIL
    assert "not ACTIVE: mlx5_0/1" in verdicts["preflight-ib-hca"].summary
    assert verdicts["preflight-ib-rate"].status is Status.UNKNOWN  # nothing up to measure
    production = dict(H100_PROFILE, ib_hcas=[f"mlx5_{i}" for i in range(8)])
    v = next(v for v in judge_hardware("gpu-001", hw_of(), production) if v.code == "preflight-ib-hca")
    assert v.status is Status.FAIL and "missing mlx5_1, mlx5_2" in v.summary


def test_no_data_nvme_fails_the_nvme_check():
    out = outputs()
    out["lsblk"] = CommandResult(0, '{"blockdevices": []}')
    facts = facts_from_outputs("gpu-001", out)
    assert facts.hw is not None
    v = next(v for v in judge_hardware("gpu-001", facts.hw, H100_PROFILE) if v.code == "preflight-nvme")
    assert v.status is Status.FAIL and "found 0 data NVMe drives" in v.summary


def test_only_the_expectations_given_are_judged():
    assert [v.code for v in judge_hardware("gpu-001", hw_of(), {"gpu_count": 8})] == ["preflight-gpu-count"]


def _bus_ids() -> list[str]:
    return [g.bus_id for g in parse_nvidia_smi_q(h100_report()).gpus]


def _pci(numa: list[int]) -> dict[str, int]:
    return {f"{b[4:].lower()}": n for b, n in zip(_bus_ids(), numa, strict=True)}


def test_numa_affinity_warns_for_gpus_without_a_local_active_hca():
    ib = ib_files(**{"mlx5_0/device/numa_node": "0"})
    hw = hw_of(ib=ib, pci_numa=_pci([0, 0, 0, 0, 1, 1, 1, 1]))
    (v,) = judge_numa("gpu-001", hw, ["mlx5_0"])
    assert v.code == "preflight-numa-affinity" and v.status is Status.WARN
    assert "GPU 4 (NUMA 1)" in v.summary and "GPU 3" not in v.summary
    hw = hw_of(ib=ib, pci_numa=_pci([0] * 8))
    assert [v.status for v in judge_numa("gpu-001", hw, ["mlx5_0"])] == [Status.OK]


def test_numa_affinity_is_not_judged_without_numa_data():
    assert judge_numa("gpu-001", hw_of(), ["mlx5_0"]) == []  # no numa_node anywhere
    hw = hw_of(pci_numa=_pci([-1] * 8), ib=ib_files(**{"mlx5_0/device/numa_node": "-1"}))
    assert judge_numa("gpu-001", hw, ["mlx5_0"]) == []  # the kernel does not know


def _slurm(gpus: int, gtype: str = "h100") -> Node:
    return Node("gpu-001", "idle", gpus_total=gpus, gpu_type=gtype)


def test_slurm_gres_against_the_gpus_found():
    hw8 = hw_of()
    hw7 = hw_of(report=without_last_gpu(h100_report()))
    assert judge_slurm_gres("gpu-001", hw8, _slurm(8), "").status is Status.OK
    v = judge_slurm_gres("gpu-001", hw7, _slurm(8), "")
    assert v.status is Status.FAIL and v.summary == "Slurm declares 8 GPUs, 7 visible"
    assert (v.evidence["declared"], v.evidence["seen"]) == (8, 7)
    assert judge_slurm_gres("gpu-001", hw8, _slurm(8, "h200"), "").status is Status.FAIL
    assert judge_slurm_gres("gpu-001", hw8, _slurm(8, ""), "").status is Status.OK  # untyped GRES
    assert judge_slurm_gres("gpu-001", hw8, _slurm(4), "").status is Status.WARN
    unknown = judge_slurm_gres("gpu-001", hw8, None, "slurmctld: connection refused")
    assert unknown.status is Status.UNKNOWN and "connection refused" in unknown.summary
    assert judge_slurm_gres("gpu-001", hw8, None, "").status is Status.UNKNOWN


def test_unreadable_proc_is_no_facts():
    out = outputs()
    out["meminfo"] = CommandResult(1, "", "cat: /proc/meminfo: Permission denied")
    facts = facts_from_outputs("gpu-001", out)
    assert facts.hw is None and "meminfo" in facts.error


def test_commands_honour_the_sysfs_root_variable_and_quote_a_configured_root():
    ib = commands("/var/lib/hw sim/ib")["ib"]
    assert ib.startswith('r="${OPSCTL_IB_SYSFS_ROOT:-}"; [ -n "$r" ] || r=\'/var/lib/hw sim/ib\';')
    assert "counters" not in ib and '"$r"/*/device/numa_node' in ib
    assert "r=/sys/class/infiniband;" in commands()["ib"]


def _group_vars(inventory: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "inventory" / inventory / "group_vars" / "gpu_nodes.yml").read_text())


def test_the_default_profile_is_the_production_inventorys():
    assert PreflightSection().expected() == _group_vars("production")["hw_expected"]


def test_preflight_config_section():
    cfg = parse_config(
        '[preflight]\ngpu_count = 4\ngpu_model_substring = "H100"\nib_hcas = []\n'
        'addresses = { gpu-001 = "127.0.0.1:2222" }\n'
    )
    section = cfg.section("preflight", PreflightSection)
    assert section.expected() == {
        "gpu_count": 4,
        "gpu_model_substring": "H100",
        "gpu_memory_mib_min": 140000,
        "nvme_data_min": 1,
    }
    for bad in (
        'gpu_count = "eight"',
        "gpu_count = -1",
        'addresses = { gpu-001 = "h:99999" }',
        'ib_sysfs_root = "relative"',
        "colour = 1",
    ):
        with pytest.raises(ConfigError):
            parse_config(f"[preflight]\n{bad}\n")
