from __future__ import annotations

from opsctl.parsers.dmesg_xid import normalise_pci, parse_dmesg_xids


def test_uptime_stamped_lines_with_sxid_and_non_xid(real):
    log = parse_dmesg_xids(real("dmesg.xid_sxid_pcie_lines.imbue.txt"))
    assert [(x.code, x.pci, x.pid, x.process) for x in log.xids] == [
        (94, "0000:0f:00", "2503421", "python3"),
        (64, "0000:0f:00", "<unknown>", "<unknown>"),
    ]
    assert log.xids[0].uptime_seconds == 2397166.983093
    assert "All reserved rows for bank are remapped" in log.xids[1].message
    (s,) = log.sxids
    assert (s.kind, s.code, s.pci) == ("SXid", 12028, "0000:85:00")


def test_wall_clock_stamped_xid119_burst(real):
    log = parse_dmesg_xids(real("dmesg.xid119.h100.gpud.log"))
    assert [x.code for x in log.xids] == [119] * 5
    assert {x.pci for x in log.xids} == {"0000:9b:00"}
    assert log.xids[0].wall_time == "Sun Feb 23 16:24:18 2025" and log.xids[0].uptime_seconds is None
    assert log.xids[3].process == "cache_mgr_main"


def test_pci_normalisation():
    assert normalise_pci("PCI:0000:9b:00") == "0000:9b:00"
    assert normalise_pci("00000000:9B:00.0") == "0000:9b:00"
    assert normalise_pci("0000:85:00.0") == "0000:85:00"
