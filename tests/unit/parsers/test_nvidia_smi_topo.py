"""``nvidia-smi topo -m``: genuine matrices (tests/fixtures/real-world/SOURCES.md)."""

from __future__ import annotations

from opsctl.parsers.nvidia_smi_topo import parse_nvidia_smi_topo


def test_h200_node_tabs_and_nic_legend(real):
    m = parse_nvidia_smi_topo(real("nvidia-smi-topo-m.h200x8.570.211.01.node-record.txt"))
    assert m.gpus == [f"GPU{i}" for i in range(8)] and m.nics == [f"NIC{i}" for i in range(8)]
    assert m.nic_device("NIC4") == "mlx5_4"
    assert m.link("GPU0", "GPU1") == "NV18" and m.link("GPU0", "GPU0") == "X"
    assert m.link("GPU0", "NIC4") == "PIX" and m.link("GPU0", "NIC2") == "SYS"
    # the GPU next to each HCA is not GPU i on this board
    nearest = {g: m.nearest_nics(g)[0] for g in m.gpus}
    assert nearest["GPU0"] == ("mlx5_4", "PIX") and nearest["GPU2"] == ("mlx5_0", "PIX")
    assert nearest["GPU7"] == ("mlx5_2", "PIX")
    assert sorted(d for d, _ in nearest.values()) == [f"mlx5_{i}" for i in range(8)]
    gpu4 = m.rows["GPU4"]
    assert (gpu4.cpu_affinity, gpu4.numa_affinity) == ("64-127,192-255", 1)
    assert m.rows["NIC0"].numa_affinity is None and m.rows["NIC0"].links["GPU2"] == "PIX"


def test_vm_copy_with_spaces_every_nic_behind_the_host_bridge(real):
    m = parse_nvidia_smi_topo(real("nvidia-smi-topo-m.h100x4-vm.560.35.05.spaces.txt"))
    assert m.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"] and len(m.nics) == 8
    assert {link for g in m.gpus for _, link in m.nearest_nics(g)} == {"PHB"}
    assert m.rows["GPU2"].cpu_affinity == "0-79" and m.rows["GPU2"].numa_affinity == 0


def test_not_a_matrix():
    m = parse_nvidia_smi_topo(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    )
    assert m.columns == [] and m.rows == {}
