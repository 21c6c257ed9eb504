from __future__ import annotations

import dataclasses
import json

from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q, parse_tree

H100 = "nvidia-smi-q.h100x8.535.183.01.gpud.txt"


def test_h100_report_header_and_gpus(real):
    r = parse_nvidia_smi_q(real(H100))
    assert (r.driver_version, r.cuda_version, r.attached_gpus) == ("535.183.01", "12.2", 8)
    assert len(r.gpus) == 8
    assert [g.index for g in r.gpus] == list(range(8))
    g0 = r.gpus[0]
    assert g0.bus_id == "00000000:53:00.0"
    assert g0.product_name == "NVIDIA H100 80GB HBM3"
    assert g0.uuid == "GPU-566e6f65-c38e-b12f-4824-6944218668b9"
    assert (g0.minor_number, g0.module_id) == (0, 7)
    assert (g0.pcie_gen_current, g0.pcie_gen_max, g0.pcie_width_current, g0.pcie_width_max) == (5, 5, 16, 16)
    assert g0.pcie_replays == 120
    assert g0.ecc_mode_current == "Enabled"
    assert (g0.ecc_volatile.correctable, g0.ecc_volatile.uncorrectable) == (0, 0)
    assert (g0.remapped_rows_pending, g0.remapped_rows_failure) == (False, False)
    assert g0.remapped_rows_uncorrectable == 0
    # H100 has row remapping, not page retirement: N/A stays unknown, not zero
    assert g0.retired_pages_dbe is None and g0.retired_pages_pending is None
    assert (g0.reset_required, g0.drain_and_reset_recommended) == (False, False)
    assert g0.temperature_c == 36.0 and g0.power_draw_w == 71.97 and g0.power_limit_w == 700.0
    assert g0.fabric_state == "Completed" and g0.fabric_status == "Success"
    json.dumps(dataclasses.asdict(r))


def test_clock_event_reasons_including_nested_ones(real):
    g2 = parse_nvidia_smi_q(real(H100)).gpus[2]
    assert g2.clock_event_reasons["SW Power Cap"] is True
    assert g2.clock_event_reasons["HW Power Brake Slowdown"] is True  # nested under HW Slowdown
    assert g2.clock_event_reasons["HW Thermal Slowdown"] is False
    assert g2.clock_event_reasons["SW Thermal Slowdown"] is True


def test_process_block_does_not_confuse_next_gpu(real):
    r = parse_nvidia_smi_q(real(H100))
    assert r.gpus[3].bus_id == "00000000:86:00.0"
    assert r.gpus[3].product_name == "NVIDIA H100 80GB HBM3"


def test_filtered_page_retirement_report(real):
    r = parse_nvidia_smi_q(real("nvidia-smi-q-d-PAGE_RETIREMENT.8gpu.azurehpc.txt"))
    assert r.driver_version == "535.86.10" and len(r.gpus) == 8
    assert r.gpus[7].bus_id == "00000008:00:00.0"
    assert all(g.retired_pages_sbe == 0 and g.retired_pages_dbe == 0 for g in r.gpus)
    assert all(g.retired_pages_pending is False for g in r.gpus)
    assert r.gpus[0].ecc_volatile.uncorrectable is None  # section not printed: unknown


def test_tree_keeps_values_with_colons(real):
    top, gpus = parse_tree(real(H100))
    assert top["Timestamp"] == "Fri Jun 21 02:03:08 2024"
    assert gpus[0][1]["PCI"]["Bus Id"] == "00000000:53:00.0"  # type: ignore[index]


def test_empty_report():
    r = parse_nvidia_smi_q("")
    assert r.gpus == [] and r.attached_gpus is None
