"""lsblk and nvme-cli parsers on genuine outputs."""

from __future__ import annotations

import pytest
from provisioning_helpers import sample

from opsctl.parsers.lsblk import mounts_of, nvme_disks, parse_lsblk_json, parse_size, walk
from opsctl.parsers.nvme import parse_nvme_list_json


def test_lsblk_bytes_and_paths_layout_of_a_gpu_server():
    devices = parse_lsblk_json(sample("lsblk.bytes-paths.gpud.json"))
    disks = nvme_disks(devices)
    assert [d.name for d in disks] == [
        "nvme0n1",
        "nvme1n1",
        "nvme3n1",
        "nvme2n1",
        "nvme7n1",
        "nvme6n1",
        "nvme5n1",
        "nvme4n1",
    ]
    boot = disks[0]
    assert boot.path == "/dev/nvme0n1"
    assert boot.size_bytes == 960197124096 and boot.size_exact
    assert boot.model == "Dell DC NVMe ISE 7450 RI U.2 960GB"
    assert boot.serial == "24014620E9AA"
    assert boot.rotational is False
    data = {d.name: d for d in disks}["nvme2n1"]
    assert data.size_bytes == 7681501126656
    assert mounts_of(data) == ["/mnt/local-volume/vol-0"]
    assert data.children[0].fstype == "ext4"
    # loop devices are not NVMe disks
    assert not [d for d in disks if d.type == "loop"]


def test_lsblk_default_layout_with_md_raid_and_human_sizes():
    devices = parse_lsblk_json(sample("lsblk.default.raid0-8nvme.gpud.json"))
    disks = nvme_disks(devices)
    assert len(disks) == 8
    assert all(not d.size_exact and d.size_bytes == 7 * 1024**4 for d in disks)
    assert all(mounts_of(d) == ["/raid"] for d in disks)
    sda = next(d for d in devices if d.name == "sda")
    assert mounts_of(sda) == ["/boot/efi", "/boot", "/"]
    assert next(d for d in walk(devices) if d.name == "ubuntu--vg-ubuntu--lv").type == "lvm"
    # the removable, empty sdb: mountpoints [null] means not mounted
    sdb = next(d for d in devices if d.name == "sdb")
    assert sdb.mountpoints == [] and sdb.size_bytes == 0


def test_lsblk_on_a_vm_without_nvme():
    devices = parse_lsblk_json(sample("lsblk.default.gvisor-vm.json"))
    assert [d.name for d in devices] == ["zram0", "vda"]
    assert nvme_disks(devices) == []
    assert devices[1].mountpoints == ["/"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (512, (512, True)),
        ("4096", (4096, True)),
        ("63.8M", (int(63.8 * 1024**2), False)),
        ("0B", (0, False)),
        ("1.7T", (int(1.7 * 1024**4), False)),
        (None, (None, False)),
        ("lots", (None, False)),
    ],
)
def test_lsblk_sizes(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize("text", ["", "not json", '{"devices": []}', "[]"])
def test_lsblk_rejects_what_is_not_lsblk_json(text):
    with pytest.raises(ValueError, match="lsblk"):
        parse_lsblk_json(text)


def test_nvme_list_with_namespaces():
    ns = parse_nvme_list_json(sample("nvme-list-o-json.azure-2ns.lisa.json"))
    assert [n.path for n in ns] == ["/dev/nvme0n1", "/dev/nvme0n2"]
    assert [n.namespace_id for n in ns] == [1, 2]
    assert {n.controller for n in ns} == {"nvme0"}
    assert ns[0].size_bytes == 536870912000 and ns[1].size_bytes == 4294967296
    assert ns[0].model == "MSFT NVMe Accelerator v1.0" and ns[0].serial == "SN: 000001"
    assert ns[0].firmware == "v1.00000" and ns[0].sector_size == 512


def test_nvme_list_without_namespace_field():
    ns = parse_nvme_list_json(sample("nvme-list-o-json.aws-2dev.mozsearch.json"))
    assert [(n.path, n.controller, n.namespace_id) for n in ns] == [
        ("/dev/nvme0n1", "nvme0", None),
        ("/dev/nvme1n1", "nvme1", None),
    ]
    assert ns[1].model == "Amazon Elastic Block Store" and ns[1].used_bytes == 0


def test_nvme_list_empty_output_means_no_drives():
    assert parse_nvme_list_json("") == []


def test_nvme_list_rejects_the_verbose_layout_and_garbage():
    with pytest.raises(ValueError, match="verbose"):
        parse_nvme_list_json('{"Devices": [{"HostNQN": "x", "Subsystems": []}]}')
    with pytest.raises(ValueError, match="nvme list"):
        parse_nvme_list_json("Failed to scan topology")
