"""Render simulated state, read it back with the project's parsers, and compare the layout with the
genuine samples in tests/fixtures/real-world/."""

from __future__ import annotations

import json
import re
from pathlib import Path

from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.jsoncpp import to_styled_string
from opsctl.hwsim.render_dcgm import render_dcgmi_diag, render_dcgmi_health, render_dcgmi_link_status
from opsctl.hwsim.render_dmesg import render_dmesg
from opsctl.hwsim.render_ib import render_ibstat, render_perfquery_x, sysfs_files, write_sysfs_tree
from opsctl.hwsim.render_nvidia_smi import render_nvidia_smi_q, render_nvlink_status
from opsctl.hwsim.state import NodeHardware
from opsctl.parsers.dcgmi_json import parse_dcgmi_diag, parse_dcgmi_health
from opsctl.parsers.dmesg_xid import parse_dmesg_xids
from opsctl.parsers.ib_sysfs import parse_flattened, parse_ib_sysfs, read_ib_sysfs
from opsctl.parsers.ibstat import parse_ibstat
from opsctl.parsers.nvidia_smi_nvlink import parse_dcgmi_link_status, parse_nvlink_status
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q
from opsctl.parsers.perfquery import parse_perfquery


def _skeleton(block: list[str]) -> list[tuple[int, str]]:
    """(indent, key) of each line: the layout without the values."""
    out = []
    for line in block:
        key = line.split(" : ")[0].strip() if " : " in line else line.strip()
        out.append((len(line) - len(line.lstrip(" ")), key))
    return out


def _first_gpu_block(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GPU 0000"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("GPU 0000") or not lines[i])
    return lines[start + 1 : end]


# --- nvidia-smi -q ----------------------------------------------------------------------------------


def test_nvidia_smi_q_has_the_genuine_layout(node: NodeHardware, fixtures: Path) -> None:
    genuine = (fixtures / "nvidia-smi-q.h100x8.535.183.01.gpud.txt").read_text()
    ours = render_nvidia_smi_q(node)
    assert _skeleton(_first_gpu_block(ours)) == _skeleton(_first_gpu_block(genuine))
    assert _skeleton(ours.splitlines()[:7]) == _skeleton(genuine.splitlines()[:7])
    # The colon sits in the same column on every key line.
    cols = {line.index(" : ") for line in ours.splitlines() if " : " in line}
    assert cols == {line.index(" : ") for line in genuine.splitlines() if " : " in line}


def test_nvidia_smi_q_parses_back_to_the_state(node: NodeHardware) -> None:
    apply_fault(node, "ecc_dbe,gpu=2")
    apply_fault(node, "row_remap_failure,gpu=4")
    apply_fault(node, "thermal,gpu=1")
    apply_fault(node, "gpu_missing=6")
    report = parse_nvidia_smi_q(render_nvidia_smi_q(node))
    assert report.driver_version == node.driver_version and report.attached_gpus == 7
    assert [g.bus_id for g in report.gpus] == [g.bus_id for g in node.present_gpus]
    for parsed, g in zip(report.gpus, node.present_gpus, strict=True):
        assert parsed.product_name == "NVIDIA H200"
        assert (parsed.uuid, parsed.serial, parsed.module_id) == (g.uuid, g.serial, g.module_id)
        assert parsed.ecc_volatile.uncorrectable == g.ecc_dbe_volatile
        assert parsed.remapped_rows_uncorrectable == g.remapped_rows_uncorrectable
        assert parsed.remapped_rows_pending == g.remapped_rows_pending
        assert parsed.remapped_rows_failure == g.remapped_rows_failure
        assert parsed.temperature_c == g.temperature_c
        assert parsed.power_draw_w == g.power_draw_w
        assert (parsed.pcie_gen_current, parsed.pcie_width_current) == (5, 16)
        assert parsed.reset_required == g.reset_required
    thermal = report.gpus[1].clock_event_reasons
    assert thermal["HW Thermal Slowdown"] and thermal["SW Thermal Slowdown"]
    assert not report.gpus[0].clock_event_reasons["HW Thermal Slowdown"]


def test_nvlink_status_parses_back(node: NodeHardware) -> None:
    apply_fault(node, "nvlink_down,gpu=3,link=5")
    gpus = parse_nvlink_status(render_nvlink_status(node))
    assert len(gpus) == 8 and all(len(g.links) == 18 for g in gpus)
    assert gpus[3].links[5] is None and gpus[3].links[4] is not None
    assert gpus[3].uuid == node.gpu(3).uuid


# --- InfiniBand -------------------------------------------------------------------------------------


def _ca_skeleton(text: str) -> list[str]:
    return [re.sub(r":.*", ":", line) for line in text.splitlines()[:17]]


def test_ibstat_has_the_genuine_layout(node: NodeHardware, fixtures: Path) -> None:
    genuine = (fixtures / "ibstat.h100.all_active.gpud.txt").read_text()
    ours = render_ibstat(node)
    assert _ca_skeleton(ours) == _ca_skeleton(genuine)
    assert ours.count("CA '") == 8


def test_ibstat_parses_back(node: NodeHardware) -> None:
    apply_fault(node, "ib_down=mlx5_2")
    report = parse_ibstat(render_ibstat(node))
    assert not report.errors
    by_name = {ca.name: ca for ca in report.cas}
    assert sorted(by_name) == [f"mlx5_{i}" for i in range(8)]
    for h in node.hcas:
        (port,) = by_name[h.name].ports
        assert (port.state, port.physical_state, port.rate) == (h.state, h.physical_state, h.rate_gbps)
        assert port.link_layer == "InfiniBand"
        assert by_name[h.name].node_guid == f"0x{h.node_guid:016x}"
    assert by_name["mlx5_0"].ports[0].base_lid == node.hca("mlx5_0").lid


def test_sysfs_tree_matches_the_genuine_files_and_parses_back(
    node: NodeHardware, fixtures: Path, tmp_path: Path
) -> None:
    flattened = fixtures / "sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt"
    genuine = parse_flattened(flattened.read_text())
    ours = sysfs_files(node)
    missing = {p for p in genuine if p.startswith("mlx5_0/")} - set(ours)
    # The genuine HCA also has RoCE-only hw_counters; every InfiniBand file it has, we have.
    assert {p for p in missing if "roce" not in p and "rx_dct" not in p and "icrc" not in p} == set()
    apply_fault(node, "ib_down=mlx5_5")
    write_sysfs_tree(node, tmp_path / "infiniband")
    devices = {d.name: d for d in parse_ib_sysfs(read_ib_sysfs(str(tmp_path / "infiniband")))}
    assert sorted(devices) == [f"mlx5_{i}" for i in range(8)]
    p5, p0 = devices["mlx5_5"].ports[0], devices["mlx5_0"].ports[0]
    assert (p5.state, p5.phys_state) == ("DOWN", "Polling")
    assert (p0.state, p0.phys_state, p0.rate_gbps, p0.rate_detail) == ("ACTIVE", "LinkUp", 400, "4X NDR")
    assert p5.counters["link_downed"] == node.hca("mlx5_5").counters["link_downed"] == 1
    assert p0.counters["port_rcv_data"] == node.hca("mlx5_0").counters["port_rcv_data"]


def test_sysfs_tree_rewrite_removes_vanished_devices(node: NodeHardware, tmp_path: Path) -> None:
    write_sysfs_tree(node, tmp_path)
    node.hcas = node.hcas[:7]
    write_sysfs_tree(node, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"mlx5_{i}" for i in range(7)]


def test_perfquery_has_the_genuine_layout_and_parses_back(node: NodeHardware, fixtures: Path) -> None:
    genuine = (fixtures / "perfquery-x.2ports.infiniband_exporter.txt").read_text().splitlines()[:26]
    ours = render_perfquery_x(node, "mlx5_3")

    def shape(lines: list[str]) -> list[str]:
        # Names and the column where values start (33), without the values or the LID.
        return [
            re.sub(r"Lid \d+", "Lid N", line)
            if line.startswith("#")
            else f"{line.split(':')[0]}@{len(line) - len(line.split('.')[-1].lstrip('.'))}"
            for line in lines
        ]

    assert shape(ours.splitlines()) == shape(genuine)
    (block,) = parse_perfquery(ours)
    h = node.hca("mlx5_3")
    assert block.lid == h.lid and block.port == "1"
    assert block.counters["PortRcvData"] == h.counters["port_rcv_data"]
    assert block.counters["PortXmitWait"] == h.counters["port_xmit_wait"]


# --- dcgmi ------------------------------------------------------------------------------------------


def test_jsoncpp_layout_reproduces_the_genuine_dcgm4_fragment(fixtures: Path) -> None:
    raw = (fixtures / "dcgmi-diag-j.dcgm4.fragment.DCGM-issue215.json").read_text()
    obj = json.loads(raw.rstrip().rstrip(","))
    # The fragment sits five levels deep in the document; rebuild that nesting and cut it out.
    depth = len(raw) - len(raw.lstrip(" "))
    assert depth % 8 == 0
    text = to_styled_string([[[[[obj]]]]])
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line == "\t" * (depth // 8) + "{")
    ours = [line.replace("\t", " " * 8).rstrip() for line in lines[start:]]
    theirs = [line.rstrip() for line in raw.splitlines()]
    assert ours[: len(theirs) - 1] == theirs[:-1]
    assert theirs[-1] == ours[len(theirs) - 1] + ","


def test_dcgmi_diag_parses_back(node: NodeHardware) -> None:
    apply_fault(node, "ecc_dbe,gpu=2")
    apply_fault(node, "nvlink_down,gpu=5,link=1")
    apply_fault(node, "gpu_missing=7")
    report = parse_dcgmi_diag(render_dcgmi_diag(node, 2))
    assert report.schema == "dcgm4" and report.driver_version == node.driver_version
    per_gpu = [r for r in report.results if r.gpu is not None]
    assert {r.test for r in per_gpu} == {"software", "pcie", "memory"}
    assert {r.gpu for r in per_gpu} == {0, 1, 2, 3, 4, 5, 6}
    failed = {(r.test, r.gpu) for r in per_gpu if r.status == "Fail"}
    assert failed == {("software", 2), ("pcie", 5)}
    sw2 = next(r for r in per_gpu if (r.test, r.gpu) == ("software", 2))
    assert 4 in sw2.error_ids and any("double-bit ECC" in w for w in sw2.warnings)


def test_dcgmi_diag_healthy_passes(node: NodeHardware) -> None:
    report = parse_dcgmi_diag(render_dcgmi_diag(node, 4))
    assert report.results and all(r.status == "Pass" for r in report.results)


def test_dcgmi_health_parses_back(node: NodeHardware) -> None:
    healthy = parse_dcgmi_health(render_dcgmi_health(node))
    assert healthy.overall == "Healthy" and not healthy.incidents
    apply_fault(node, "row_remap_failure,gpu=1")
    apply_fault(node, "xid=79,gpu=3")
    apply_fault(node, "thermal,gpu=0")
    report = parse_dcgmi_health(render_dcgmi_health(node))
    assert report.overall == "Failure"
    assert report.gpu_status == {0: "Warning", 1: "Failure", 3: "Failure"}
    systems = {(i.gpu, i.system, i.status) for i in report.incidents}
    assert (3, "PCIe system", "Failure") in systems and (0, "Thermal system", "Warning") in systems
    assert any("row remapping failed" in i.message for i in report.incidents if i.gpu == 1)


def test_dcgmi_health_wraps_long_messages_like_dcgmi(node: NodeHardware) -> None:
    apply_fault(node, "ecc_dbe,gpu=2")
    doc = json.loads(render_dcgmi_health(node))
    errors = doc["body"]["GPU"]["children"]["2"]["children"]["Errors"]["children"]
    overflow = errors["Memory system"]["overflow"]
    assert len(overflow) > 1 and all(len(line) <= 55 for line in overflow)


# --- dmesg ------------------------------------------------------------------------------------------


def test_dmesg_xid_lines_match_the_genuine_format(node: NodeHardware, fixtures: Path) -> None:
    genuine = (fixtures / "dmesg.xid_sxid_pcie_lines.imbue.txt").read_text().splitlines()
    shape = re.compile(
        r"^\[ *\d+\.\d{6}\] NVRM: Xid \(PCI:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\): \d+, pid=\S+, name=\S+, "
    )
    assert all(shape.match(line) for line in genuine[:2])
    apply_fault(node, "row_remap_failure,gpu=2")
    apply_fault(node, "xid=94,gpu=5")
    lines = render_dmesg(node).splitlines()
    assert len(lines) == 2 and all(shape.match(line) for line in lines)
    # The Xid 64 line reads like the genuine one after the pid/name part.
    assert lines[0].split(", ", 2)[2] == genuine[1].split(", ", 2)[2]


def test_dmesg_parses_back_with_both_time_formats(node: NodeHardware) -> None:
    node.boot_time = 1_795_000_000.0
    apply_fault(node, "xid=79,gpu=3")
    node.xids[0].time = 1_795_000_123.5
    apply_fault(node, "xid=13,gpu=0")
    node.xids[1].time = 1_795_000_200.25
    log = parse_dmesg_xids(render_dmesg(node))
    assert [(x.code, x.pci) for x in log.xids] == [(79, node.gpu(3).pci_short), (13, node.gpu(0).pci_short)]
    assert log.xids[0].uptime_seconds == 123.5 and log.xids[1].process == "python3"
    human = parse_dmesg_xids(render_dmesg(node, human_time=True))
    assert [x.code for x in human.xids] == [79, 13] and human.xids[0].wall_time


def test_dcgmi_link_status_matches_the_genuine_layout_and_parses_back(
    node: NodeHardware, fixtures: Path
) -> None:
    genuine = (fixtures / "dcgmi-nvlink-s.gcm.txt").read_text().splitlines()
    apply_fault(node, "nvlink_down,gpu=4,link=17")
    ours = render_dcgmi_link_status(node).splitlines()
    # Same frame and sections; rows are 18 links (NVLink 4) instead of the sample's 12.
    assert ours[:5] == genuine[:5] and ours[-4:] == genuine[-4:]
    assert [line.split(":")[0] for line in ours if "gpuId" in line] == [
        line.split(":")[0] for line in genuine if "gpuId" in line
    ]
    status = parse_dcgmi_link_status("\n".join(ours))
    assert sorted(status.gpus) == list(range(8)) and all(len(v) == 18 for v in status.gpus.values())
    assert status.down(4) == 1 and status.gpus[4][17] == "D" and status.down(0) == 0
