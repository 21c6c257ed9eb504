from __future__ import annotations

from opsctl.parsers.nvidia_smi_nvlink import parse_dcgmi_link_status, parse_nvlink_status


def test_a100_all_links_up(real):
    gpus = parse_nvlink_status(real("nvidia-smi-nvlink-s.a100.gpud.txt"))
    assert [g.index for g in gpus] == list(range(8))
    assert all(g.links_up == 12 and g.links_down == 0 for g in gpus)
    assert gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert gpus[0].links[11] == 25.0


def test_good_single_gpu_excerpt(real):
    (g,) = parse_nvlink_status(real("nvidia-smi-nvlink-s.good.a100.azurehpc.txt"))
    assert g.index == 7 and g.links_up == 12 and not g.all_inactive


def test_all_inactive(real):
    (g,) = parse_nvlink_status(real("nvidia-smi-nvlink-s.bad_all_inactive.a100.azurehpc.txt"))
    assert g.index == 6 and g.all_inactive and g.links == {}


def test_inactive_link_line():
    # The shape of a single inactive link as nvidia-smi prints it (test input, not a vendored sample).
    (g,) = parse_nvlink_status(
        "GPU 0: NVIDIA H200 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    )
    assert g.links == {0: 26.562, 1: None} and g.links_down == 1


def test_dcgmi_link_status_up_and_down(real):
    up = parse_dcgmi_link_status(real("dcgmi-nvlink-s.gcm.txt"))
    assert sorted(up.gpus) == list(range(8)) and all(up.down(g) == 0 for g in up.gpus)
    assert len(up.gpus[0]) == 12
    down = parse_dcgmi_link_status(real("dcgmi-nvlink-link-status.all_down.DCGM-issue198.txt"))
    assert down.down(0) == 18 and down.down(1) == 18
