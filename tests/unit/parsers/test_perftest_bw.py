"""perftest bandwidth reports: genuine outputs (tests/fixtures/real-world/SOURCES.md)."""

from __future__ import annotations

import pytest

from opsctl.parsers.perftest_bw import parse_perftest_bw


def test_ndr_write_client_with_a_warning_between_header_and_row(real):
    r = parse_perftest_bw(real("perftest.ib_write_bw.client.cx7-ndr.report_gbits.txt"))
    assert r.test == "RDMA_Write BW Test"
    assert (r.device, r.link_type, r.unit) == ("mlx5_0", "IB", "Gb")
    assert (r.local_lid, r.remote_lid) == (1, 2)
    assert r.settings["Connection type"] == "RC" and r.settings["Mtu"] == "4096[B]"
    assert r.settings["rdma_cm QPs"] == "OFF" and r.settings["Lock-free"] == "OFF"  # tab-split pairs
    assert len(r.rows) == 1
    row = r.rows[0]
    assert (row.size_bytes, row.iterations, row.bw_peak, row.bw_average) == (65536, 5000, 392.38, 392.34)
    assert r.average_gbps() == 392.34
    assert r.warnings and r.warnings[0].startswith("Conflicting CPU frequency")
    assert not r.errors


def test_mib_report_is_converted_to_gbps(real):
    r = parse_perftest_bw(real("perftest.ib_send_bw.client.cx7-ndr.mib.txt"))
    assert r.test == "Send BW Test" and r.unit == "MiB"
    # 46557.03 MiB/s = 46557.03 * 2^20 * 8 / 1e9 Gb/s (perftest's own conversion note)
    assert r.average_gbps() == pytest.approx(390.55, abs=0.01)


def test_read_test_has_outstanding_reads_and_no_inline(real):
    r = parse_perftest_bw(real("perftest.ib_read_bw.client.cx7-ndr.report_gbits.txt"))
    assert r.test == "RDMA_Read BW Test" and r.settings["Outstand reads"] == "16"
    assert "Max inline data" not in r.settings and r.average_gbps() == 328.61


def test_older_layout_all_sizes_indented_space_separated(real):
    r = parse_perftest_bw(real("perftest.ib_write_bw.bidir-a.roce.rocm-docs.txt"))
    assert r.test == "RDMA_Write Bidirectional BW Test"
    assert r.settings["Device"] == "<RDMA-NIC-2>" and r.settings["Transport type"] == "IB"
    assert r.link_type == "Ethernet" and r.settings["PCIe relax order"] == "ON"
    assert [row.size_bytes for row in r.rows][:3] == [2, 4, 8] and len(r.rows) == 23
    assert r.rows[0].bw_peak == 0.142947  # the 6-decimal format of tiny figures
    assert r.average_gbps() == 204.59  # the largest size, not the last line read


def test_server_side_without_rows_and_errors():
    server = (
        "\n************************************\n* Waiting for client to connect... *\n"
        "************************************\n"
    )
    r = parse_perftest_bw(server)
    assert r.rows == [] and r.average_gbps() is None and not r.errors
    failed = parse_perftest_bw(
        "Couldn't connect to 10.0.0.2:18515\n Unable to open file descriptor for socket connection\n"
    )
    assert len(failed.errors) == 2 and failed.average_gbps() is None


def test_garbage_is_an_empty_report():
    r = parse_perftest_bw("bash: ib_write_bw: command not found\n")
    assert (r.test, r.rows, r.settings) == ("", [], {})
