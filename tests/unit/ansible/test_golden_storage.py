"""Golden files of the storage and node-lifecycle configuration rendered by the real Ansible for the
production inventory: the NFS server's exports, nfs.conf and NVMe array plan (the exact mdadm and
mkfs.xfs argv the role runs), the scratch array, NFS and Lustre mount units, lnet.conf with the
IPoIB network files, and slurmd's mount drop-in with the job scripts.

The arrays are planned from hw facts built by hw_facts' own code from genuine lsblk samples."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from provisioning_helpers import GOLDEN, load_filter_plugin, render_playbook, run_ansible, sample
from test_golden_slurm import recorded_sample_facts

from opsctl.hwsim import state as hwstate

PLAYBOOK = "tests/unit/ansible/playbooks/render_storage.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
HOSTS = ("storage-01", "gpu-001", "login-01")


def data_drives(facts: dict[str, Any]) -> dict[str, Any]:
    """The genuine sample's six 7.68 TB data drives, their old volumes retired (unmounted); the two
    960 GB drives, which SOURCES.md says are the boot drives, left out."""
    out = copy.deepcopy(facts)
    out["nvme"] = [dict(d, mounts=[]) for d in out["nvme"] if d["size_bytes"] > 2 * 10**12]
    return out


def ib_sysfs(root: Path, hcas: list[tuple[str, str]]) -> Path:
    """A /sys/class/infiniband shaped as the kernel lays it out: <hca>/device a link to the HCA's PCI
    function, whose net/ holds its IPoIB interface, named as udev's path scheme names an InfiniBand
    device (ib + p<bus>s<slot>, decimal: 0000:1a:00.0 -> ibp26s0)."""
    for hca, pci in hcas:
        _, bus, slot_fn = pci.split(":")
        bus, slot = int(bus, 16), int(slot_fn.split(".")[0], 16)
        (root / "devices" / pci / "net" / f"ibp{bus}s{slot}").mkdir(parents=True)
        (root / "class" / "infiniband" / hca).mkdir(parents=True)
        (root / "class" / "infiniband" / hca / "device").symlink_to(f"../../../devices/{pci}")
    return root / "class" / "infiniband"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("storage")
    hw = data_drives(recorded_sample_facts())
    # the HCAs of the simulated H200 node (hwsim's PCI addresses); the login node has one
    h200 = [(h.name, h.pci_bus) for h in hwstate.make_node("gpu-001").hcas]
    sysfs = {
        "gpu-001": str(ib_sysfs(tmp / "gpu-001", h200)),
        "login-01": str(ib_sysfs(tmp / "login-01", h200[:1])),
    }
    extra = tmp / "vars.json"
    extra.write_text(
        json.dumps(
            {
                "render_dest": str(tmp / "out"),
                "render_hw": {"storage-01": hw, "gpu-001": hw},
                "render_sysfs": sysfs,
            }
        )
    )
    render_playbook(PLAYBOOK, tmp, "-e", f"@{extra}")
    return tmp / "out"


@pytest.mark.parametrize("host", HOSTS)
def test_production_storage_golden(rendered: Path, host: str) -> None:
    got = {p.name: p.read_text() for p in sorted((rendered / host).iterdir())}
    golden = GOLDEN / "production-storage" / host
    if UPDATE:
        golden.mkdir(parents=True, exist_ok=True)
        for old in golden.iterdir():
            old.unlink()
        for name, text in got.items():
            (golden / name).write_text(text)
    want = {p.name: p.read_text() for p in sorted(golden.iterdir())}
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], f"{host}/{name} differs from {golden / name}"


def _unit(text: str) -> dict[str, list[str]]:
    """key -> values of a systemd unit file (all sections)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_the_storage_host_builds_raid10_xfs_and_exports_only_to_the_storage_network(rendered: Path) -> None:
    plan = json.loads((rendered / "storage-01" / "nfs.plan.json").read_text())
    members = [f"/dev/nvme{i}n1" for i in range(2, 8)]
    assert plan["members"] == members
    assert plan["create_argv"][:3] == ["mdadm", "--create", "/dev/md/nfs"]
    assert "--level=10" in plan["create_argv"] and "--raid-devices=6" in plan["create_argv"]
    assert plan["create_argv"][-6:] == members
    assert plan["mkfs_argv"] == ["mkfs.xfs", "-L", "nfs", "/dev/md/nfs"]
    mount = _unit((rendered / "storage-01" / "srv-nfs.mount").read_text())
    assert (mount["What"], mount["Where"], mount["Type"]) == (["/dev/md/nfs"], ["/srv/nfs"], ["xfs"])
    exports = [
        ln for ln in (rendered / "storage-01" / "opsctl.exports").read_text().splitlines() if ln[:1] == "/"
    ]
    assert [ln.split()[1].split("(")[0] for ln in exports] == ["10.12.0.0/16", "10.12.0.0/16"]
    nfsd = (rendered / "storage-01" / "nfs.conf.d-opsctl.conf").read_text()
    # 66 NFS clients x 8 connections, capped at 256 threads
    assert "\n[nfsd]\nthreads=256\n" in nfsd and "vers3=n" in nfsd
    dropin = _unit((rendered / "storage-01" / "nfs-server.service.d-opsctl-mounts.conf").read_text())
    assert dropin["RequiresMountsFor"] == ["/srv/nfs"]


def test_a_gpu_node_mounts_in_order_and_slurmd_waits_for_every_mount(rendered: Path) -> None:
    node = rendered / "gpu-001"
    scratch = json.loads((node / "scratch.plan.json").read_text())
    assert scratch["level"] == 0 and scratch["device"] == "/dev/md/scratch" and len(scratch["members"]) == 6
    for name in ("home.mount", "shared.mount"):
        unit = _unit((node / name).read_text())
        assert unit["What"][0].startswith("10.12.0.20:/srv/nfs/")  # the server's storage address
        assert "nconnect=8" in unit["Options"][0].split(",") and "_netdev" in unit["Options"][0]
    lustre = _unit((node / "lustre-scratch.mount").read_text())
    assert lustre["Requires"] == ["lnet.service"] and lustre["After"][0].startswith("lnet.service")
    slurmd = _unit((node / "slurmd.service.d-opsctl-mounts.conf").read_text())
    # asserted, not required: a remounted unit (a changed mount) leaves slurmd running
    assert slurmd["AssertPathIsMountPoint"] == ["/home", "/shared", "/lustre/scratch", "/scratch"]
    assert not {"RequiresMountsFor", "Requires", "BindsTo"} & set(slurmd)
    assert "mountpoint -q" in (node / "prolog.d-50-job-scratch").read_text()


def test_lnet_runs_multi_rail_on_gpu_nodes_and_single_rail_on_login(rendered: Path) -> None:
    gpu = yaml.safe_load((rendered / "gpu-001" / "lnet.conf").read_text())
    login = yaml.safe_load((rendered / "login-01" / "lnet.conf").read_text())
    # rails 0, 2, 4, 6 of the H200 node (mlx5_0 1a:00.0, mlx5_2 3c:00.0, mlx5_4 9c:00.0, mlx5_6 bc:00.0)
    for conf, ifaces in ((gpu, ["ibp26s0", "ibp60s0", "ibp156s0", "ibp188s0"]), (login, ["ibp26s0"])):
        (net,) = conf["net"]
        assert net["net type"] == "o2ib0"
        assert [ni["interfaces"][0] for ni in net["local NI(s)"]] == ifaces
        assert conf["global"]["discovery"] == 1
    wait = _unit((rendered / "gpu-001" / "lnet.service.d-opsctl-ipoib.conf").read_text())["ExecStartPre"][0]
    assert wait.endswith("--interface=ibp26s0 --interface=ibp60s0 --interface=ibp156s0 --interface=ibp188s0")
    # one UDSP NID-pair rule per rail: a server's NID on rail r's subnet is reached from rail r
    udsp = _unit((rendered / "gpu-001" / "lnet.service.d-opsctl-udsp.conf").read_text())
    assert udsp["ExecStartPost"] == [
        f"/usr/sbin/lnetctl udsp add --src 10.30.{r}.*@o2ib0 --dst 10.30.{r}.*@o2ib0" for r in (0, 2, 4, 6)
    ]
    single_rail = (rendered / "login-01" / "lnet.service.d-opsctl-udsp.conf").read_text()
    assert "ExecStartPost" not in _unit(single_rail)


def test_udsp_rules_cover_a_wider_rail_subnet_and_add_the_sites_own(tmp_path: Path) -> None:
    """A /22 per rail (the plan for more than 250 nodes) is one NID range over four third octets;
    single-rail hosts get no rail rule; a site's own rules follow the rail rules."""
    plan = [{"hca": f"mlx5_{r}", "prefix": f"10.40.{4 * r}", "prefix_len": 22} for r in range(2)]
    rails = [{"hca": f"mlx5_{r}", "name": f"ib{r}", "present": True} for r in range(2)]
    own = {"src": "o2ib0", "rte": "10.40.8.[1-4]@o2ib0", "priority": 0}
    args = {"render_dest": str(tmp_path), "ipoib_interfaces": plan, "ipoib_rails": rails,
            "lnet_net": "o2ib0", "lnet_udsp_rules": [own]}  # fmt: skip
    got = {}
    for multirail in (True, False):
        (tmp_path / "vars.json").write_text(json.dumps({**args, "lnet_multirail": multirail}))
        run_ansible("ansible-playbook", ["tests/unit/ansible/playbooks/render_lnet_udsp.yml",
                                         "-e", f"@{tmp_path / 'vars.json'}"], tmp_path)  # fmt: skip
        got[multirail] = json.loads((tmp_path / "lnet-udsp.json").read_text())
    pairs = [{"src": f"10.40.[{a}-{a + 3}].*@o2ib0", "dst": f"10.40.[{a}-{a + 3}].*@o2ib0"} for a in (0, 4)]
    assert got[True] == {"interfaces": ["ib0", "ib1"], "udsp": [*pairs, own]}
    assert got[False] == {"interfaces": ["ib0"], "udsp": [own]}


def test_one_ipoib_address_plan_serves_lnet_and_every_rail(rendered: Path) -> None:
    """The ipoib role writes the only network files: one per HCA, by PCI address, on the plan's
    subnets (rail r of gpu-NNN is 10.30.r.NNN/24, the login node .250), datagram mode, 4K MTU."""
    gpu = {p.name: _unit(p.read_text()) for p in sorted((rendered / "gpu-001").glob("*.network"))}
    assert sorted(gpu) == [f"60-opsctl-ipoib-mlx5_{r}.network" for r in range(8)]
    assert [u["Address"] for u in gpu.values()] == [[f"10.30.{r}.1/24"] for r in range(8)]
    assert gpu["60-opsctl-ipoib-mlx5_0.network"]["Path"] == ["pci-0000:1a:00.0"]
    for unit in gpu.values():
        assert (
            unit["Mode"] == ["datagram"] and unit["MTUBytes"] == ["4092"] and unit["Type"] == ["infiniband"]
        )
    login = [_unit(p.read_text()) for p in (rendered / "login-01").glob("*.network")]
    assert [u["Address"] for u in login] == [["10.30.0.250/24"]]
    # the MGS NID is on rail 0's subnet, outside every host part a node or login host takes
    mount = _unit((rendered / "gpu-001" / "lustre-scratch.mount").read_text())
    nid = mount["What"][0].split("@")[0]
    assert nid.startswith("10.30.0.") and 200 <= int(nid.rsplit(".", 1)[1]) < 250


# -- the array planner on genuine samples --------------------------------------------------------
@pytest.fixture(scope="module")
def nvme() -> ModuleType:
    return load_filter_plugin("nvme_array", "nvme_array")


def raid0_sample_facts() -> dict[str, Any]:
    from opsctl.parsers.hw_facts_build import nvme_facts

    return {"nvme": nvme_facts(sample("lsblk.default.raid0-8nvme.gpud.json"), None)}


def test_an_existing_array_at_its_mount_point_is_planned_as_itself(nvme: ModuleType) -> None:
    plan = nvme.nvme_array_plan(raid0_sample_facts(), "raid", 0, "/raid")
    assert plan["md"] and len(plan["members"]) == 8


def test_drives_of_an_array_mounted_elsewhere_are_never_taken(nvme: ModuleType) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="needs at least 1 free NVMe data drives for RAID0, found 0"):
        nvme.nvme_array_plan(raid0_sample_facts(), "scratch", 0, "/scratch")
    with pytest.raises(AnsibleFilterError, match=r"refusing drives in use elsewhere: /dev/nvme0n1 \(/raid\)"):
        nvme.nvme_array_plan(raid0_sample_facts(), "scratch", 0, "/scratch", devices=["/dev/nvme0n1"])


def test_drives_of_different_sizes_are_refused_unless_chosen(nvme: ModuleType) -> None:
    from ansible.errors import AnsibleFilterError

    facts = recorded_sample_facts()  # two free 960 GB drives beside six 7.68 TB ones in use
    for d in facts["nvme"]:
        d["mounts"] = []
    with pytest.raises(AnsibleFilterError, match="the drives differ in size"):
        nvme.nvme_array_plan(facts, "scratch", 0, "/scratch")
    plan = nvme.nvme_array_plan(facts, "scratch", 0, "/scratch", devices=["/dev/nvme1n1", "/dev/nvme0n1"])
    assert plan["members"] == ["/dev/nvme0n1", "/dev/nvme1n1"]


def test_levels_need_their_least_member_count_and_one_drive_needs_no_md(nvme: ModuleType) -> None:
    from ansible.errors import AnsibleFilterError

    one = {"nvme": [{"path": "/dev/nvme0n1", "size_bytes": 10**12, "mounts": [], "system": False}]}
    plan = nvme.nvme_array_plan(one, "scratch", 0, "/scratch")
    assert (plan["md"], plan["device"], plan["create_argv"]) == (False, "/dev/nvme0n1", [])
    assert plan["mkfs_argv"][-1] == "/dev/nvme0n1"
    with pytest.raises(AnsibleFilterError, match="needs at least 2 free NVMe data drives for RAID1"):
        nvme.nvme_array_plan(one, "mirror", 1, "/srv/nfs")
    with pytest.raises(AnsibleFilterError, match="RAID level 4 not supported"):
        nvme.nvme_array_plan(one, "scratch", 4, "/scratch")
    with pytest.raises(AnsibleFilterError, match="not among the NVMe drives"):
        nvme.nvme_array_plan(one, "scratch", 0, "/scratch", devices=["/dev/sda"])


def test_mdadm_detail_reads_members_and_spares(nvme: ModuleType) -> None:
    detail = nvme.mdadm_detail(sample("mdadm-detail-export.raid5-spare.probert.txt"))
    assert detail == {
        "level": 5,
        "members": ["/dev/dm-2", "/dev/dm-3", "/dev/dm-4"],
        "spares": ["/dev/dm-5"],
        "name": "raid5-2406-2407-2408-2409",
    }
    assert nvme.mdadm_detail("mdadm: cannot open /dev/md/scratch: No such file or directory") == {}


@pytest.mark.parametrize(
    ("path", "unit"),
    [
        ("/srv/nfs", "srv-nfs.mount"),
        ("/lustre/scratch-2", "lustre-scratch\\x2d2.mount"),
        ("/scratch", "scratch.mount"),
    ],
)
def test_mount_unit_names_follow_systemd_escape(nvme: ModuleType, path: str, unit: str) -> None:
    assert nvme.systemd_mount_unit(path) == unit


# -- exports -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("export", "message"),
    [
        ({"path": "/srv/nfs/home", "options": "rw,root_squash,no_subtree_check"}, "one of sync/async"),
        ({"path": "/srv/nfs/home", "options": "rw,sync,no_subtree_check"}, "root_squash/no_root_squash"),
        (
            {
                "path": "/srv/nfs/home",
                "options": "rw,sync,root_squash,no_subtree_check",
                "clients": "10.0.0.0/8",
            },
            "outside the storage network 10.12.0.0/16",
        ),
        (
            {"path": "/srv/nfs/home", "options": "rw,sync,root_squash,no_subtree_check", "clients": "*"},
            "is not a network address/prefix",
        ),
        ({"path": "srv/nfs", "options": "rw,sync,root_squash,no_subtree_check"}, "must be absolute"),
    ],
)
def test_exports_must_be_explicit_and_confined(export: dict[str, str], message: str) -> None:
    from ansible.errors import AnsibleFilterError

    plugin = load_filter_plugin("nfs_server", "nfs_exports")
    with pytest.raises(AnsibleFilterError, match=message):
        plugin.nfs_export_lines([export], "10.12.0.0/16", "10.12.0.0/16")


def test_a_narrower_client_network_inside_the_storage_network_is_accepted() -> None:
    plugin = load_filter_plugin("nfs_server", "nfs_exports")
    export = {
        "path": "/srv/nfs/home",
        "options": "rw,sync,root_squash,no_subtree_check",
        "clients": "10.12.1.0/24",
    }
    assert plugin.nfs_export_lines([export], "10.12.0.0/16", "10.12.0.0/16") == [
        "/srv/nfs/home 10.12.1.0/24(rw,sync,root_squash,no_subtree_check)"
    ]


def test_lnet_refuses_a_rail_whose_hca_the_node_lacks(tmp_path: Path) -> None:
    """An HCA missing from the node (mlx5_2, one of LNet's rails) is skipped by the ipoib role, and
    the lnet role stops naming it instead of writing an lnet.conf with a hole in it."""
    hw = data_drives(recorded_sample_facts())
    h200 = [(h.name, h.pci_bus) for h in hwstate.make_node("gpu-001").hcas if h.name != "mlx5_2"]
    extra = tmp_path / "vars.json"
    extra.write_text(
        json.dumps(
            {
                "render_dest": str(tmp_path / "out"),
                "render_hw": {"gpu-001": hw},
                "render_sysfs": {"gpu-001": str(ib_sysfs(tmp_path / "sys", h200))},
            }
        )
    )
    proc = run_ansible(
        "ansible-playbook",
        ["-i", "inventory/production", PLAYBOOK, "--limit", "gpu-001", "-e", f"@{extra}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        tmp_path,
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "lnet: rails mlx5_2 have no IPoIB interface on gpu-001" in proc.stdout
    # the rails the node has were still found: seven network files, none for mlx5_2
    assert sorted(p.name for p in (tmp_path / "out" / "gpu-001").glob("*.network")) == [
        f"60-opsctl-ipoib-mlx5_{r}.network" for r in (0, 1, 3, 4, 5, 6, 7)
    ]
