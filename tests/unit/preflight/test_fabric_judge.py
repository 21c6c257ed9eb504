"""Per-node fabric judgements on genuine samples (the gpud mlx5 sysfs tree, the 8x H100
`nvidia-smi -q`, the H200 and VM `topo -m` matrices, DCGM's own `dcgmi diag -j`, nccl-tests
outputs) and on the simulated node's sysfs tree, plus mutated copies of them."""

from __future__ import annotations

import re

from preflight_samples import IB_FLAT, NVSMI, REAL_WORLD, ib_grep_output

from opsctl.checks.model import Status
from opsctl.evidence.ssh import CommandResult
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.render_dcgm import render_dcgmi_diag
from opsctl.hwsim.render_ib import sysfs_files
from opsctl.hwsim.state import make_node
from opsctl.parsers.ib_sysfs import parse_flattened
from opsctl.parsers.nvidia_smi_topo import parse_nvidia_smi_topo
from opsctl.preflight import fabric_judge as fj
from opsctl.preflight.fabric_collect import NodeFabricFacts, fabric_commands, fabric_facts, ib_ports_from_grep
from opsctl.preflight.settings import PreflightSection

HCAS = [f"mlx5_{i}" for i in range(8)]


def sim_tree(**changes: str) -> dict[str, str]:
    """The simulated node's /sys/class/infiniband (8 HCAs), with files changed or removed ("")."""
    files = {k: v.strip() for k, v in sysfs_files(make_node("gpu-001")).items()}
    for k, v in changes.items():
        if v:
            files[k] = v
        else:
            files.pop(k, None)
    return files


def facts(ib: dict[str, str] | None = None, smi: str | None = None, topo: str | None = None, nvsw: int = 4):
    out = {
        "fabric_ib": CommandResult(0, ib_grep_output(sim_tree() if ib is None else ib)),
        "nvidia_smi": CommandResult(0, NVSMI.read_text() if smi is None else smi),
    }
    if topo is not None:
        out["topo"] = CommandResult(0, topo)
    return fabric_facts("gpu-001", out, nvsw)


def by_code(verdicts) -> dict[str, str]:
    return {v.code: v.status.value for v in verdicts}


def test_the_command_reads_sm_lid_pkeys_and_the_hca_pcie_link_under_the_picked_root():
    cmd = fabric_commands("/srv/ib tree")["fabric_ib"]
    assert "OPSCTL_IB_SYSFS_ROOT" in cmd and "'/srv/ib tree'" in cmd
    for glob in ("ports/*/sm_lid", "ports/*/pkeys/*", "device/current_link_width", "*/fw_ver"):
        assert glob in cmd


def test_ports_from_the_genuine_tree():
    (port,) = ib_ports_from_grep(ib_grep_output(parse_flattened(IB_FLAT.read_text())))
    assert (port.hca, port.port, port.fw_ver, port.rate_gbps, port.rate_detail) == (
        "mlx5_0", 1, "28.41.1000", 400.0, "4X NDR"
    )  # fmt: skip
    assert (port.state, port.phys_state, port.link_layer) == ("ACTIVE", "LinkUp", "InfiniBand")
    assert port.sm_lid is None and port.pkeys_read == 0  # not in the sample: unknown, not failed


def test_the_genuine_port_passes_what_it_shows_and_is_unknown_for_what_it_lacks():
    f = facts(ib=parse_flattened(IB_FLAT.read_text()))
    got = by_code(fj.judge_ib_ports("gpu-001", f, PreflightSection(ib_hcas=["mlx5_0"])))
    assert got == {
        "fabric-ib-phys": "OK",
        "fabric-ib-rate": "OK",
        "fabric-ib-link-layer": "OK",
        "fabric-pkey": "UNKNOWN",
        "fabric-sm-lid": "UNKNOWN",
    }


def test_a_healthy_simulated_node_passes_every_port_check():
    f = facts()
    assert len(f.ports) == 8 and f.ports[3].sm_lid == 1 and f.ports[3].pkeys == ["0xffff"]
    assert f.ports[3].pcie_width == 16 and f.ports[3].pcie_speed_gts == 32.0
    assert set(by_code(fj.judge_ib_ports("gpu-001", f, PreflightSection())).values()) == {"OK"}


def test_each_port_problem_fails_its_own_code():
    p = PreflightSection()
    cases = {
        "fabric-ib-phys": {"mlx5_2/ports/1/phys_state": "2: Polling", "mlx5_2/ports/1/state": "1: DOWN"},
        "fabric-ib-rate": {"mlx5_5/ports/1/rate": "200 Gb/sec (4X HDR)"},
        "fabric-ib-link-layer": {"mlx5_1/ports/1/link_layer": "Ethernet"},
        "fabric-pkey": {"mlx5_7/ports/1/pkeys/0": "0x0000"},
        "fabric-sm-lid": {"mlx5_6/ports/1/sm_lid": "0x0"},
    }
    for code, change in cases.items():
        verdicts = {v.code: v for v in fj.judge_ib_ports("gpu-001", facts(sim_tree(**change)), p)}
        assert verdicts[code].status is Status.FAIL, (code, verdicts[code].summary)
        hca = next(iter(change)).split("/")[0]
        assert hca in verdicts[code].summary
    # a port down also has no LID from the subnet manager
    down = {v.code: v for v in fj.judge_ib_ports("gpu-001", facts(sim_tree(**cases["fabric-ib-phys"])), p)}
    assert down["fabric-sm-lid"].status is Status.FAIL
    # a missing HCA fails the port checks with "missing"
    gone = {k: v for k, v in sim_tree().items() if not k.startswith("mlx5_4/")}
    verdicts = {v.code: v for v in fj.judge_ib_ports("gpu-001", facts(gone), p)}
    assert (
        verdicts["fabric-ib-phys"].status is Status.FAIL
        and "mlx5_4 missing" in verdicts["fabric-ib-phys"].summary
    )


def test_firmware_must_match_the_fleets():
    same = [facts(), facts(), facts()]
    odd = facts(sim_tree(**{"mlx5_3/fw_ver": "28.36.1010"}))
    got = fj.judge_fw([*same, NodeFabricFacts("gpu-004", odd.ports)], HCAS)
    by_node = {n: v for n, v in got.items()}
    assert by_node["gpu-004"].status is Status.FAIL
    assert "mlx5_3/1 28.36.1010" in by_node["gpu-004"].summary
    assert by_node["gpu-004"].evidence["reference"] == "28.39.1002"
    assert by_node["gpu-001"].status is Status.OK


def test_nvlink_fabric_state_and_nvswitch_count_on_the_genuine_report():
    p = PreflightSection()
    ok = by_code(fj.judge_nvlink("gpu-001", facts(nvsw=4), p))
    assert ok == {"fabric-nvlink-state": "OK", "fabric-nvswitch-count": "OK"}
    text = NVSMI.read_text()
    first = text.index("    Fabric\n")
    stuck = text[:first] + text[first:].replace(": Completed", ": In Progress", 1).replace(
        ": Success", ": N/A", 1
    )
    verdicts = {v.code: v for v in fj.judge_nvlink("gpu-001", facts(smi=stuck, nvsw=2), p)}
    nv = verdicts["fabric-nvlink-state"]
    assert nv.status is Status.FAIL and nv.gpu == 0 and "In Progress" in nv.summary
    assert verdicts["fabric-nvswitch-count"].status is Status.FAIL
    # no fabric at all (a PCIe board): fine unless NVSwitches are expected
    none = re.sub(r"(    Fabric\n {8}State\s+: )Completed(\n {8}Status\s+: )Success", r"\1N/A\2N/A", text)
    assert by_code(fj.judge_nvlink("gpu-001", facts(smi=none), PreflightSection(fabric_nvswitches=0))) == {
        "fabric-nvlink-state": "OK"
    }
    assert by_code(fj.judge_nvlink("gpu-001", facts(smi=none), p))["fabric-nvlink-state"] == "FAIL"


def test_pairing_from_the_genuine_h200_matrix():
    topo = (REAL_WORLD / "nvidia-smi-topo-m.h200x8.570.211.01.node-record.txt").read_text()
    f = facts(topo=topo)
    pairing = fj.gpu_for_hca(f, HCAS)
    assert (
        pairing["mlx5_4"] == (0, "PIX")
        and pairing["mlx5_0"] == (2, "PIX")
        and pairing["mlx5_2"] == (7, "PIX")
    )
    assert sorted(g for g, _ in pairing.values()) == list(range(8))
    v = fj.judge_pairing("gpu-001", f, PreflightSection())
    assert v.status is Status.OK and v.evidence["pairing"]["mlx5_4"] == {"gpu": 0, "link": "PIX"}


def test_pairing_warns_on_a_vm_and_fails_across_the_socket():
    vm = (REAL_WORLD / "nvidia-smi-topo-m.h100x4-vm.560.35.05.spaces.txt").read_text()
    v = fj.judge_pairing("gpu-001", facts(topo=vm), PreflightSection(ib_hcas=HCAS[:4]))
    assert v.status is Status.WARN and "PHB" in v.summary
    # the H200 board with GPU0's switch moved to the other socket: its best HCA is now SYS
    topo = (REAL_WORLD / "nvidia-smi-topo-m.h200x8.570.211.01.node-record.txt").read_text()
    lines = topo.splitlines(keepends=True)
    lines[1] = lines[1].replace("NODE\tNODE\tSYS\tNODE\tPIX", "SYS\tSYS\tSYS\tSYS\tSYS")
    m = parse_nvidia_smi_topo("".join(lines))
    assert m.link("GPU0", "NIC4") == "SYS"
    v = fj.judge_pairing("gpu-001", facts(topo="".join(lines)), PreflightSection())
    assert v.status is Status.FAIL
    assert fj.judge_pairing("gpu-001", facts(), PreflightSection()).status is Status.UNKNOWN  # no matrix


def test_pcie_width_loss_fails_and_a_slower_generation_warns():
    p = PreflightSection()
    assert fj.judge_pcie("gpu-001", facts(), p).status is Status.OK
    text = NVSMI.read_text()
    narrow = text.replace(
        "                Current                   : 16x", "                Current                   : 8x", 1
    )
    assert narrow != text
    v = fj.judge_pcie("gpu-001", facts(smi=narrow), p)
    assert v.status is Status.FAIL and "GPU 0 x8 of x16" in v.summary
    hca = fj.judge_pcie("gpu-001", facts(sim_tree(**{"mlx5_6/device/current_link_width": "8"})), p)
    assert hca.status is Status.FAIL and "mlx5_6 x8 of x16" in hca.summary


def test_dcgm_diag_verdicts():
    genuine = (REAL_WORLD / "dcgmi-diag-j.dcgm3.1.0.nvvs-jsonresulttests.DCGM.txt").read_text()
    assert fj.judge_dcgm("gpu-001", 1, 0, genuine).status is Status.OK
    sick = make_node("gpu-001")
    apply_fault(sick, "ecc_dbe,gpu=5")
    bad = fj.judge_dcgm("gpu-001", 1, 1, render_dcgmi_diag(sick, 1))
    assert bad.status is Status.FAIL and bad.gpu == 5
    assert fj.judge_dcgm("gpu-001", 1, None, "", not_run="node is allocated").status is Status.UNKNOWN
    assert fj.judge_dcgm("gpu-001", 1, 127, "sh: dcgmi: not found").status is Status.UNKNOWN


def test_nccl_on_one_node_against_the_floor():
    h100 = (REAL_WORLD / "nccl-tests.all_reduce_perf.h100x8.2.17.8.nccl-tests-cluster.txt").read_text()
    ok = fj.judge_nccl_node("gpu-001", 0, h100, 431.0)
    assert ok.status is Status.OK and ok.evidence["busbw_gbs"] == 482.27
    a100 = (REAL_WORLD / "nccl-tests.all_reduce_perf.a100x8.gcm.txt").read_text()
    slow = fj.judge_nccl_node("gpu-001", 0, a100, 431.0)
    assert slow.status is Status.FAIL and "231.72" in slow.summary
    dead = fj.judge_nccl_node(
        "gpu-001", 1, "gpu-001: Test CUDA failure util.cu:555 'system not yet initialized'\n", 431
    )
    assert dead.status is Status.FAIL and "system not yet initialized" in dead.summary


def test_a_dcgm_diag_that_could_not_run_or_ran_nothing_is_unknown_never_ok():
    for layout in ("dcgm4", "dcgm3"):
        text = (REAL_WORLD / f"dcgmi-diag-j.runtime_error.{layout}.derived.json").read_text()
        verdict = fj.judge_dcgm("gpu-001", 1, 202, text)
        assert verdict.status is Status.UNKNOWN, verdict
        assert "could not run: Error: Diagnostic could not be run" in verdict.summary
    empty = fj.judge_dcgm("gpu-001", 1, 0, '{"DCGM Diagnostic": {"test_categories": []}}')
    assert empty.status is Status.UNKNOWN and "no test results" in empty.summary


def test_a_dcgm_diag_failure_only_in_a_test_summary_fails_the_node():
    text = (REAL_WORLD / "dcgmi-diag-j.summary-only-fail.dcgm4.derived.json").read_text()
    verdict = fj.judge_dcgm("gpu-001", 1, 226, text)
    assert verdict.status is Status.FAIL and "memory: Error using CUDA API cuInit" in verdict.summary
