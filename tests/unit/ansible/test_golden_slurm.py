"""Golden files of slurm.conf, gres.conf, cgroup.conf and topology.conf rendered by the real Ansible for the
production inventory, from the inventory alone and from hw_facts recorded on genuine samples."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet
from provisioning_helpers import (
    GOLDEN,
    REPO,
    load_filter_plugin,
    load_library_module,
    real,
    render_playbook,
    run_ansible,
    sample,
)

from opsctl.parsers.ib_sysfs import parse_flattened

FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")
PLAYBOOK = "tests/unit/ansible/playbooks/render_slurm.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
GPU_NODES = [f"gpu-{i:03d}" for i in range(1, 65)]


def render(tmp_path: Path, *extra: str, record_dir: Path | None = None) -> Path:
    out = tmp_path / "rendered"
    out.mkdir(exist_ok=True)
    records = record_dir or tmp_path / "no-recorded-facts"
    render_playbook(
        PLAYBOOK,
        tmp_path,
        "-e",
        f"slurm_render_dest={out}",
        "-e",
        f"hw_facts_record_dir={records}",
        # no daemon restarts here: the handlers are for the cluster's hosts
        "-e",
        '{"slurm_is_compute": false, "slurm_is_controller": false, "slurm_is_dbd": false}',
        *extra,
    )
    return out


def compare(out: Path, golden: Path, names: tuple[str, ...] = FILES) -> None:
    for name in names:
        got = (out / name).read_text()
        if UPDATE:
            golden.mkdir(parents=True, exist_ok=True)
            (golden / name).write_text(got)
        assert got == (golden / name).read_text(), f"{name} differs from {golden / name}"


def recorded_sample_facts() -> dict[str, object]:
    """The hw fact of a node whose hardware is the genuine samples (what hw_facts records). The
    samples carry no sysfs NUMA nodes: GPUs 0-3 are given node 0 and 4-7 node 1, the two halves of
    an 8-GPU baseboard on a two-socket host."""
    mod = load_library_module("hw_facts")
    smi = real("nvidia-smi-q.h100x8.535.183.01.gpud.txt")
    buses = [line.split()[-1] for line in smi.splitlines() if line.startswith("GPU 0000")]
    return dict(
        mod.build_hw_facts(
            nvidia_smi_q=smi,
            gpu_numa={bus: i // 4 for i, bus in enumerate(buses)},
            ib_files=parse_flattened(real("sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt")),
            ib_numa={},
            lsblk_json=sample("lsblk.bytes-paths.gpud.json"),
            nvme_json=None,
            cpuinfo=sample("cpuinfo.gvisor-2vcpu.txt"),
            meminfo=sample("meminfo.gvisor-24g.txt"),
            nvswitch_count=4,
            numa_nodes=2,
        )
    )


def node_lines(conf: str) -> list[tuple[list[str], dict[str, str]]]:
    out = []
    for line in conf.splitlines():
        if line.startswith("NodeName="):
            fields = dict(f.split("=", 1) for f in line.split())
            out.append((list(NodeSet(fields.pop("NodeName"))), fields))
    return out


def test_inventory_lists_64_gpu_nodes(tmp_path):
    proc = run_ansible("ansible-inventory", ["-i", "inventory/production", "--list"], tmp_path)
    inv = json.loads(proc.stdout)
    assert inv["gpu_nodes"]["hosts"] == GPU_NODES
    assert inv["slurm_controller"]["children"] == ["head"]


def test_production_golden_from_the_inventory(tmp_path):
    out = render(tmp_path)
    compare(out, GOLDEN / "production")
    lines = node_lines((out / "slurm.conf").read_text())
    assert len(lines) == 1
    hosts, attrs = lines[0]
    assert hosts == GPU_NODES
    assert attrs["Gres"] == "gpu:h200:8"
    assert (attrs["CPUs"], attrs["RealMemory"]) == ("224", "2000000")


def test_production_golden_from_recorded_facts(tmp_path):
    facts = recorded_sample_facts()
    record = json.dumps(facts, indent=4, sort_keys=True) + "\n"
    if UPDATE:
        (GOLDEN / "production-recorded").mkdir(parents=True, exist_ok=True)
        (GOLDEN / "production-recorded" / "hw_facts.sample-node.json").write_text(record)
    assert record == (GOLDEN / "production-recorded" / "hw_facts.sample-node.json").read_text()
    records = tmp_path / "recorded"
    records.mkdir()
    # gpu-001..gpu-004 have been discovered; the others are still what the inventory declares
    for host in GPU_NODES[:4]:
        (records / f"{host}.json").write_text(record)
    out = render(tmp_path, record_dir=records)
    compare(out, GOLDEN / "production-recorded")
    lines = node_lines((out / "slurm.conf").read_text())
    assert [hosts for hosts, _ in lines] == [GPU_NODES[:4], GPU_NODES[4:]]
    discovered = lines[0][1]
    # 2 vCPUs, 24683584 kB of memory in the samples; RealMemory leaves 5% to the OS
    assert (discovered["CPUs"], discovered["Sockets"], discovered["CoresPerSocket"]) == ("2", "1", "2")
    assert discovered["RealMemory"] == str(int(24683584 / 1024 * 0.95))
    assert all(attrs["Gres"] == "gpu:h200:8" for _, attrs in lines)
    gres = (out / "gres.conf").read_text()
    # the discovered nodes' GPUs bound to their NUMA node's cores (one core per node in the samples:
    # two cores, two NUMA nodes); the undiscovered ones declared without a binding
    assert [line for line in gres.splitlines() if line.startswith("NodeName=")] == [
        "NodeName=gpu-[001-004] Name=gpu Type=h200 File=/dev/nvidia[0-3] Cores=0",
        "NodeName=gpu-[001-004] Name=gpu Type=h200 File=/dev/nvidia[4-7] Cores=1",
        "NodeName=gpu-[005-064] Name=gpu Type=h200 File=/dev/nvidia[0-7]",
    ]


def test_a_limited_run_renders_the_same_files(tmp_path):
    # the play runs on gpu-007 only; node lines still cover the whole compute group
    out = render(tmp_path, "-e", "render_hosts=slurm_compute", "--limit", "gpu-007")
    compare(out, GOLDEN / "production")


def test_lab_mode_without_cgroup_v2(tmp_path):
    out = render(tmp_path, "-e", "cgroup_v2_available=false")
    compare(out, GOLDEN / "lab-mode", ("slurm.conf", "cgroup.conf"))
    conf = (out / "slurm.conf").read_text()
    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin=task/none" in conf
    assert "JobAcctGatherType=jobacct_gather/linux" in conf
    assert "PrologFlags=Alloc\n" in conf
    assert not re.search(r"^Constrain", (out / "cgroup.conf").read_text(), re.M)


def test_production_uses_cgroup_v2_and_the_required_plugins():
    conf = (GOLDEN / "production" / "slurm.conf").read_text()
    for line in (
        "SelectType=select/cons_tres",
        "GresTypes=gpu",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "JobAcctGatherType=jobacct_gather/cgroup",
        "ReturnToService=1",
        "HealthCheckProgram=/etc/slurm/healthcheck.sh",
        "Prolog=/etc/slurm/prolog.d/*",
        "Epilog=/etc/slurm/epilog.d/*",
    ):
        assert f"\n{line}\n" in conf
    cgroup = (GOLDEN / "production" / "cgroup.conf").read_text()
    for line in (
        "CgroupPlugin=cgroup/v2",
        "ConstrainCores=yes",
        "ConstrainDevices=yes",
        "ConstrainRAMSpace=yes",
    ):
        assert f"\n{line}\n" in cgroup


def test_a_compute_node_without_facts_or_declaration_is_refused(tmp_path):
    proc = run_ansible(
        "ansible-playbook",
        [
            "-i",
            "inventory/production",
            PLAYBOOK,
            "-e",
            f"slurm_render_dest={tmp_path}",
            "-e",
            f"hw_facts_record_dir={tmp_path}",
            "-e",
            '{"slurm_node_declared": {}}',
        ],
        tmp_path,
        check=False,
    )
    assert proc.returncode != 0
    assert (
        "no hardware known for gpu-001: run hw_facts on it once, or set slurm_node_declared"
        in proc.stdout + proc.stderr
    )


@pytest.mark.parametrize("name", FILES)
def test_golden_files_are_what_the_repository_ships(name):
    assert (REPO / "tests" / "golden" / "production" / name).is_file()


def test_facts_are_recorded_outside_the_inventory_directory(tmp_path):
    # Ansible reads every file of an inventory directory as an inventory source, JSON included
    proc = run_ansible(
        "ansible",
        [
            "-i",
            "inventory/production",
            "gpu-001",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "var=hw_facts_record_dir",
        ],
        tmp_path,
    )
    assert f'"{REPO}/inventory/recorded_facts/production"' in proc.stdout


def _slurm_conf_filters():  # type: ignore[no-untyped-def]
    return load_filter_plugin("slurm", "slurm_conf")


def _hw(numa: list[int | None], sockets: int = 2, cores: int = 56, numa_nodes: int = 2) -> dict:
    return {
        "cpu": {"sockets": sockets, "cores_per_socket": cores, "threads_per_core": 2},
        "numa_nodes": numa_nodes,
        "gpus": [{"index": i, "numa_node": n} for i, n in enumerate(numa)],
    }


def test_gpus_are_bound_to_the_cores_of_their_numa_node():
    gpu_cores = _slurm_conf_filters()._gpu_cores
    # two sockets of 56 cores, GPUs 0-3 on node 0 and 4-7 on node 1
    assert gpu_cores(_hw([0] * 4 + [1] * 4), 8) == [
        {"gpus": "0-3", "cores": "0-55"}, {"gpus": "4-7", "cores": "56-111"},
    ]  # fmt: skip
    # four NUMA nodes per host (NPS2): a quarter of the cores each; interleaved GPUs fold to lists
    assert gpu_cores(_hw([0, 1, 2, 3, 0, 1, 2, 3], numa_nodes=4), 8) == [
        {"gpus": "0,4", "cores": "0-27"}, {"gpus": "1,5", "cores": "28-55"},
        {"gpus": "2,6", "cores": "56-83"}, {"gpus": "3,7", "cores": "84-111"},
    ]  # fmt: skip


def test_no_binding_without_numa_nodes_or_with_a_gpu_missing():
    gpu_cores = _slurm_conf_filters()._gpu_cores
    assert gpu_cores(_hw([0] * 7 + [None]), 8) == []
    assert gpu_cores(_hw([0] * 4 + [1] * 3), 8) == []  # seven recorded, eight expected
    assert gpu_cores(_hw([0] * 8, numa_nodes=3), 8) == []  # 112 cores do not split over 3 nodes
    assert gpu_cores({}, 8) == []


def test_topology_has_a_leaf_switch_per_fabric_unit_and_a_top_switch_joining_them():
    topology = _slurm_conf_filters().slurm_topology
    hv = {f"gpu-{i:03d}": {"fabric_unit": f"su{(i - 1) // 32 + 1}"} for i in range(1, 65)}
    assert topology(list(hv), hv, "fabric_unit", "fabric") == [
        {"name": "su1", "nodes": "gpu-[001-032]"}, {"name": "su2", "nodes": "gpu-[033-064]"},
        {"name": "fabric", "switches": "su1,su2"},
    ]  # fmt: skip
    one = {"gpu-001": {"fabric_unit": "leaf1"}, "gpu-002": {"fabric_unit": "leaf1"}}
    assert topology(list(one), one, "fabric_unit", "fabric") == [{"name": "leaf1", "nodes": "gpu-[001-002]"}]
    # no unit anywhere (or the variable turned off): no topology, slurm.conf keeps Slurm's default
    assert topology(list(one), {h: {} for h in one}, "fabric_unit", "fabric") == []
    assert topology(list(one), one, "", "fabric") == []


def test_a_compute_node_without_a_fabric_unit_beside_others_is_refused():
    from ansible.errors import AnsibleFilterError

    topology = _slurm_conf_filters().slurm_topology
    hv = {"gpu-001": {"fabric_unit": "su1"}, "gpu-002": {}, "gpu-003": {"fabric_unit": ""}}
    with pytest.raises(AnsibleFilterError, match=r"gpu-\[002-003\] set no fabric_unit while 1 other"):
        topology(list(hv), hv, "fabric_unit", "fabric")
    clash = {"gpu-001": {"fabric_unit": "su1"}, "gpu-002": {"fabric_unit": "fabric"}}
    with pytest.raises(AnsibleFilterError, match="also a fabric unit"):
        topology(list(clash), clash, "fabric_unit", "fabric")


def test_production_topology_turns_the_tree_plugin_on():
    conf = (GOLDEN / "production" / "slurm.conf").read_text()
    assert "TopologyPlugin=topology/tree" in conf.splitlines()
    assert (GOLDEN / "production" / "topology.conf").read_text().splitlines()[-3:] == [
        "SwitchName=su1 Nodes=gpu-[001-032]", "SwitchName=su2 Nodes=gpu-[033-064]",
        "SwitchName=fabric Switches=su1,su2",
    ]  # fmt: skip


RELEASES = ["20.02", "20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11"]


def test_a_slurm_upgrade_is_planned_within_what_slurm_accepts():
    upgrade = _slurm_conf_filters().slurm_upgrade
    same = upgrade("22.05.8-4+deb12u3", "22.05", RELEASES)
    assert same == {"from": "22.05", "to": "22.05", "upgrade": False}
    assert upgrade("", "24.11", RELEASES) == {"from": "", "to": "24.11", "upgrade": False}  # a new host
    assert upgrade("22.05.8-4", "23.11", RELEASES)["upgrade"]  # two releases on
    assert upgrade("23.02.7-1", "24.11", RELEASES)["upgrade"]  # three: 24.11 accepts them
    assert upgrade("1:24.05.4-1", "25.05", RELEASES) == {"from": "24.05", "to": "25.05", "upgrade": True}


@pytest.mark.parametrize(
    ("installed", "pin", "message"),
    [
        ("22.05.8-4", "24.05", "22.05 -> 24.05 is wider than one Slurm upgrade: pin 23.11 then 24.05"),
        ("22.05.8-4", "25.11", "pin 23.11 then 25.05 then 25.11 in turn"),
        ("23.11.4-1", "22.05", "the pin 22.05 is older than the installed 23.11 (23.11.4-1)"),
        ("22.05.8-4", "26.05", "Slurm 26.05 is not in slurm_release_series"),
    ],
)
def test_a_downgrade_or_a_jump_slurm_cannot_make_is_refused(installed, pin, message):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        _slurm_conf_filters().slurm_upgrade(installed, pin, RELEASES)
